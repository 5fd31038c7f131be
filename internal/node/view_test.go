package node

import (
	"testing"

	"cube/internal/store"
)

// Settings that do not decode are an error: read as empty they would
// give the sandbox open egress.
func TestNetworkSettingsThatDoNotDecodeAreAnError(t *testing.T) {
	if _, err := network(&store.Sandbox{ID: "s", Network: []byte(`{"allowOut":`)}); err == nil {
		t.Fatal("undecodable network settings read as empty")
	}
	nw, err := network(&store.Sandbox{ID: "s", Network: []byte(`{"allowInternetAccess":false}`)})
	if err != nil || nw.AllowInternetAccess == nil || *nw.AllowInternetAccess {
		t.Fatalf("network = %+v, %v", nw, err)
	}
	if _, err := network(&store.Sandbox{ID: "s"}); err != nil {
		t.Fatalf("a record without settings: %v", err)
	}
}
