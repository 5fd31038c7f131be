package forward

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/httperr"
)

// creating is a node's own service as far as a peer's create reaches it.
type creating struct {
	cube.Backend
	got cube.CreateRequest
	err error
}

func (c *creating) CreateSandbox(_ context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	c.got = req
	if c.err != nil {
		return nil, c.err
	}
	return &cube.Sandbox{ID: "sb1", TemplateID: req.Template, Node: "node-b", EnvdAccessToken: "tok", State: cube.StateRunning}, nil
}

// A create a node places on a peer reaches the peer's own service as the
// request the first node decoded, signed; the sandbox comes back whole,
// and a failure comes back as the peer's kind, words and wait, so the
// client is answered as that node would have answered it.
func TestTypedCreateOnAPeer(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	own := &creating{}
	internal := http.NewServeMux()
	ServeSandboxes(internal, own, 1<<20)
	b := httptest.NewServer(New(Config{Peers: onlyB{}, Secret: secret, Internal: internal,
		Local:     http.NotFoundHandler(),
		SandboxOf: func(*http.Request) (string, bool) { return "", false }}))
	defer b.Close()
	c := NewClient(ClientConfig{Peers: nodeB{b.URL}, Secret: secret})

	req := cube.CreateRequest{Template: "base", Timeout: time.Minute, MemoryMB: 512, Metadata: map[string]string{"k": "v"},
		VolumeMounts: []cube.VolumeMount{{Name: "data", Path: "/data"}}}
	sb, err := c.CreateSandbox(context.Background(), "node-b", req)
	if err != nil || sb.ID != "sb1" || sb.Node != "node-b" || sb.EnvdAccessToken != "tok" || sb.TemplateID != "base" {
		t.Fatalf("create on node-b: %+v, %v", sb, err)
	}
	if own.got.Template != "base" || own.got.Timeout != time.Minute || own.got.MemoryMB != 512 || own.got.Metadata["k"] != "v" ||
		len(own.got.VolumeMounts) != 1 || own.got.VolumeMounts[0].Path != "/data" {
		t.Fatalf("node-b was asked %+v", own.got)
	}

	own.err = cube.Errorf(cube.Capacity, "node-b runs as many sandboxes as it may").WithRetryAfter(3 * time.Second)
	_, err = c.CreateSandbox(context.Background(), "node-b", req)
	if cube.KindOf(err) != cube.Capacity || err.Error() != "node-b runs as many sandboxes as it may" || cube.RetryAfterOf(err) != 3*time.Second {
		t.Fatalf("a refused create on node-b: %v (%v, retry after %v)", err, cube.KindOf(err), cube.RetryAfterOf(err))
	}
	if httperr.StatusOf(err) != http.StatusTooManyRequests {
		t.Fatalf("a refused create on node-b answers %d", httperr.StatusOf(err))
	}
}
