package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestNetworkHTTPSPorts(t *testing.T) {
	e := newEnv(t)
	r := e.do("POST", "/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{"httpsPorts": []int{8443, 443}}})
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if got := e.fake.lastCreate.Network.HTTPSPorts; !slices.Equal(got, []int{8443, 443}) {
		t.Fatalf("backend got httpsPorts %v", got)
	}
	for _, ports := range [][]int{{49983}, {0}, {70000}} {
		r := e.do("POST", "/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{"httpsPorts": ports}})
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "network.httpsPorts[0]") {
			t.Errorf("httpsPorts %v: %d %s", ports, r.status, r.body)
		}
	}
}
