package forward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/httperr"
)

// creating is a node's own service as far as a peer's create reaches it.
type creating struct {
	Local
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
	own := &creating{}
	b, secret := peerB(t, own)
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

	// A node nobody listens at took nothing: the create may go elsewhere.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	_, err = NewClient(ClientConfig{Peers: nodeB{gone.URL}, Secret: secret}).CreateSandbox(context.Background(), "node-b", req)
	if cube.KindOf(err) != cube.Unavailable || !errors.Is(err, ErrNotDelivered) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a create on a node that does not listen: %v; want unavailable, not delivered", err)
	}
}

// peerB is node-b serving the typed calls of peers through own, and the
// cluster secret its calls are signed with.
func peerB(t *testing.T, own Local) (*httptest.Server, []byte) {
	secret := []byte("0123456789abcdef0123")
	internal := http.NewServeMux()
	ServeSandboxes(internal, own, 1<<20)
	b := httptest.NewServer(New(Config{Peers: onlyB{}, Secret: secret, Internal: internal,
		Local:     http.NotFoundHandler(),
		SandboxOf: func(*http.Request) (string, bool) { return "", false }}))
	t.Cleanup(b.Close)
	return b, secret
}

// During a rolling upgrade a node of an earlier version takes no typed
// calls: it answers one 404, which the client reports as ErrPeerTooOld.
// The client's request is then passed to that node whole, signed, as
// nodes passed requests before typed calls (a pause runs on the
// sandbox's own node): that node answers the client, not the API of the
// node the client called. A resume the calling node moves carries the
// node to take the sandbox from, as such nodes read it.
func TestPassedOnToAnOlderPeer(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	type servedOld struct{ method, path, body, moveFrom string }
	var old []servedOld
	b := httptest.NewServer(New(Config{Peers: onlyB{}, Secret: secret, Internal: http.NewServeMux(),
		SandboxOf: func(*http.Request) (string, bool) { return "", false },
		Local:     http.NotFoundHandler(),
		Signed: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			old = append(old, servedOld{r.Method, r.URL.Path, string(body), r.Header.Get(MoveHeader)})
			w.Header().Set("X-Answered-By", "node-b")
			w.WriteHeader(http.StatusNoContent)
		})}))
	defer b.Close()
	client := NewClient(ClientConfig{Peers: nodeB{b.URL}, Secret: secret})
	apiCalls := 0
	// node-a's API: it decodes the request, and its service calls node-b.
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiCalls++
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		r.Body.Close()
		var err error
		moveFrom := ""
		switch {
		case strings.HasSuffix(r.URL.Path, "/pause"):
			err = client.PauseSandbox(r.Context(), "node-b", "abc", true)
		default:
			moveFrom = "node-c"
			_, _, err = client.ConnectSandbox(r.Context(), "node-b", "abc", cube.ConnectRequest{MoveFrom: moveFrom})
		}
		if !errors.Is(err, ErrPeerTooOld) {
			t.Errorf("a typed call on a node of an earlier version: %v", err)
		}
		if !PassOn(r.Context(), "node-b", moveFrom) {
			t.Error("the request could not be passed on")
		}
		if PassOn(r.Context(), "node-b", moveFrom) {
			t.Error("a request was passed on twice")
		}
		w.Header().Set("Retry-After", "9")
		httperr.Write(w, cube.Errorf(cube.Unavailable, "node-a's own answer"))
	})
	a := New(Config{Peers: nodeB{b.URL}, Secret: secret, Client: client, Local: api,
		SandboxOf:  func(*http.Request) (string, bool) { return "", false },
		Authorized: func(*http.Request) bool { return true },
	})
	for _, c := range []struct{ path, body, moveFrom string }{
		{"/sandboxes/abc/pause", `{"memory":true}`, ""},
		{"/sandboxes/abc/connect", `{"timeout":60}`, "node-c"},
	} {
		old = nil
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", c.path, strings.NewReader(c.body))
		r.Header.Set("X-API-Key", "e2b_key")
		a.ServeHTTP(w, r)
		if w.Code != http.StatusNoContent || w.Header().Get("X-Answered-By") != "node-b" || w.Header().Get("Retry-After") != "" || w.Body.Len() != 0 {
			t.Fatalf("%s: answered %d %v %q, want node-b's answer alone", c.path, w.Code, w.Header(), w.Body)
		}
		if len(old) != 1 || old[0] != (servedOld{"POST", c.path, c.body, c.moveFrom}) {
			t.Fatalf("%s: node-b served %+v", c.path, old)
		}
	}
	// Outside a request a Handler serves, nothing is passed on.
	if PassOn(context.Background(), "node-b", "") {
		t.Fatal("a call outside a client's request was passed on")
	}
	if apiCalls != 2 {
		t.Fatalf("node-a's API served %d requests", apiCalls)
	}
}

// volumesOfB is node-b's own service as far as its peers' calls on its
// volumes reach it.
type volumesOfB struct {
	Local
	deleted []string
}

func (v *volumesOfB) GetVolume(_ context.Context, id string) (*cube.Volume, error) {
	if id != "vol1" {
		return nil, cube.Errorf(cube.NotFound, "volume %q not found", id)
	}
	return &cube.Volume{ID: id, Team: "t1", Name: "data", Token: "vtok", SizeBytes: 1 << 30, UsedBytes: 4096}, nil
}

func (v *volumesOfB) DeleteVolume(_ context.Context, id string) error {
	v.deleted = append(v.deleted, id)
	if id == "busy" {
		return cube.Errorf(cube.Conflict, "volume %q is mounted by sb1", id)
	}
	return nil
}

// A volume's record is read, and the volume deleted, on the node holding
// its files, through typed calls: the volume as that node sees it (what
// its files use among it), a failure as its kind and words.
func TestTypedVolumeCallsOnAPeer(t *testing.T) {
	own := &volumesOfB{}
	b, secret := peerB(t, own)
	c := NewClient(ClientConfig{Peers: nodeB{b.URL}, Secret: secret})
	ctx := context.Background()
	v, err := c.GetVolume(ctx, "node-b", "vol1")
	if err != nil || v.ID != "vol1" || v.Team != "t1" || v.Token != "vtok" || v.UsedBytes != 4096 {
		t.Fatalf("volume vol1 of node-b: %+v, %v", v, err)
	}
	if _, err := c.GetVolume(ctx, "node-b", "vol2"); cube.KindOf(err) != cube.NotFound || err.Error() != `volume "vol2" not found` {
		t.Fatalf("an unknown volume of node-b: %v", err)
	}
	if err := c.DeleteVolume(ctx, "node-b", "vol1"); err != nil {
		t.Fatalf("delete vol1 on node-b: %v", err)
	}
	if err := c.DeleteVolume(ctx, "node-b", "busy"); cube.KindOf(err) != cube.Conflict || !strings.Contains(err.Error(), "mounted by sb1") {
		t.Fatalf("delete of a mounted volume on node-b: %v", err)
	}
	if strings.Join(own.deleted, ",") != "vol1,busy" {
		t.Fatalf("node-b deleted %q", own.deleted)
	}
}

// templatesOfB is node-b's own service as far as its peers' calls on its
// templates reach it.
type templatesOfB struct {
	Local
	started []string
	spec    cube.BuildSpec
}

func (tb *templatesOfB) StartBuild(_ context.Context, team, templateID, buildID string, spec cube.BuildSpec) error {
	tb.started = append(tb.started, team+"/"+templateID+"/"+buildID)
	tb.spec = spec
	return nil
}

func (tb *templatesOfB) BuildStatus(_ context.Context, team, templateID, buildID string, logsOffset int) (*cube.BuildStatus, error) {
	if buildID != "b1" {
		return nil, cube.Errorf(cube.NotFound, "build %q of template %q not found", buildID, templateID)
	}
	return &cube.BuildStatus{TemplateID: templateID, BuildID: buildID, Status: cube.BuildBuilding,
		Logs: []cube.BuildLogEntry{{Level: "info", Message: fmt.Sprintf("from %d", logsOffset)}}}, nil
}

// A template's build is started, and followed, on the node that holds
// the template through typed calls: the spec as the first node decoded
// it, the status as that node has it, a failure as its kind and words.
func TestTypedTemplateCallsOnAPeer(t *testing.T) {
	own := &templatesOfB{}
	b, secret := peerB(t, own)
	c := NewClient(ClientConfig{Peers: nodeB{b.URL}, Secret: secret})
	ctx := context.Background()
	spec := cube.BuildSpec{FromImage: "alpine:3", Steps: []cube.BuildStep{{Type: "RUN", Args: []string{"echo hi"}}}, StartCmd: "sleep 1"}
	if err := c.StartBuild(ctx, "node-b", "t1", "tpl:v1", "b1", spec); err != nil {
		t.Fatalf("start a build on node-b: %v", err)
	}
	if strings.Join(own.started, ",") != "t1/tpl:v1/b1" || own.spec.FromImage != "alpine:3" || len(own.spec.Steps) != 1 ||
		own.spec.Steps[0].Args[0] != "echo hi" || own.spec.StartCmd != "sleep 1" {
		t.Fatalf("node-b started %q with %+v", own.started, own.spec)
	}
	st, err := c.BuildStatus(ctx, "node-b", "t1", "tpl", "b1", 3)
	if err != nil || st.Status != cube.BuildBuilding || len(st.Logs) != 1 || st.Logs[0].Message != "from 3" {
		t.Fatalf("a build's status on node-b: %+v, %v", st, err)
	}
	if _, err := c.BuildStatus(ctx, "node-b", "t1", "tpl", "b2", 0); cube.KindOf(err) != cube.NotFound || !strings.Contains(err.Error(), `build "b2"`) {
		t.Fatalf("an unknown build on node-b: %v", err)
	}
}

// countingPeers is node-b at addr, counting the reads of its address.
type countingPeers struct {
	addr  string
	reads *int
}

func (countingPeers) Self() string { return "node-a" }
func (p countingPeers) Peer(context.Context, string) (string, bool, error) {
	*p.reads++
	return p.addr, true, nil
}

// A typed call whose caller just read the node's address (with its
// heartbeat, to know where the sandbox is) does not read it again; one to
// another node does.
func TestTypedCallsReuseAKnownAddress(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	own := &volumesOfB{}
	internal := http.NewServeMux()
	ServeSandboxes(internal, own, 1<<20)
	b := httptest.NewServer(New(Config{Peers: onlyB{}, Secret: secret, Internal: internal,
		Local:     http.NotFoundHandler(),
		SandboxOf: func(*http.Request) (string, bool) { return "", false }}))
	defer b.Close()
	reads := 0
	c := NewClient(ClientConfig{Peers: countingPeers{b.URL, &reads}, Secret: secret})
	if _, err := c.GetVolume(AtAddress(context.Background(), "node-b", b.URL), "node-b", "vol1"); err != nil || reads != 0 {
		t.Fatalf("a call at a known address: %v, the address read %d times", err, reads)
	}
	if _, err := c.GetVolume(AtAddress(context.Background(), "node-c", "http://node-c.invalid"), "node-b", "vol1"); err != nil || reads != 1 {
		t.Fatalf("a call on another node than the one whose address is known: %v, the address read %d times", err, reads)
	}
}
