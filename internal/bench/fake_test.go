package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"cube/internal/api/wire"
)

const fakeKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// fakeAPI is a test double of the control plane: it keeps sandboxes and
// snapshots in maps and answers like the real server, with switches for
// the routes a server may lack.
type fakeAPI struct {
	t  *testing.T
	mu sync.Mutex

	next      int
	live      map[string]bool
	paused    map[string]bool
	snapshots map[string]string // snapshot → sandbox it was taken from
	creates   int
	deletes   int
	inFlight  int
	maxFlight int
	executed  []string
	rollbacks []string // the snapshot of each rollback, in order

	// noSnapshots makes the snapshot routes answer 501; noClone leaves
	// the clone route out of the router.
	noSnapshots, noClone bool
	// onPause and onConnect, when set, see each sandbox paused and each
	// connected (with f.mu held), as the server's disk would.
	onPause, onConnect func(id string)
	// pauseMemory records each pause's "memory" field (nil: left out).
	pauseMemory []*bool
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t, live: map[string]bool{}, paused: map[string]bool{}, snapshots: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", f.auth(f.create))
	mux.HandleFunc("DELETE /sandboxes/{id}", f.auth(f.kill))
	mux.HandleFunc("GET /sandboxes/{id}", f.auth(f.get))
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", f.auth(f.snapshot))
	mux.HandleFunc("DELETE /templates/{id}", f.auth(f.dropTemplate))
	mux.HandleFunc("POST /sandboxes/{id}/rollback", f.auth(f.rollback))
	mux.HandleFunc("POST /sandboxes/{id}/fork", f.auth(f.fork))
	mux.HandleFunc("POST /sandboxes/{id}/clone", f.auth(func(w http.ResponseWriter, r *http.Request) {
		if f.noClone {
			http.NotFound(w, r) // what Go's router says for an unknown route
			return
		}
		f.fork(w, r)
	}))
	mux.HandleFunc("POST /sandboxes/{id}/pause", f.auth(f.pause))
	mux.HandleFunc("POST /sandboxes/{id}/connect", f.auth(f.connect))
	mux.HandleFunc("POST /execute", f.execute)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func fail(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(wire.Error{Code: code, Message: fmt.Sprintf(format, args...)})
}

func (f *fakeAPI) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != fakeKey {
			fail(w, http.StatusUnauthorized, "invalid API key")
			return
		}
		f.mu.Lock()
		f.inFlight++
		f.maxFlight = max(f.maxFlight, f.inFlight)
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.inFlight--
			f.mu.Unlock()
		}()
		h(w, r)
	}
}

func (f *fakeAPI) newSandbox(template string) wire.Sandbox {
	f.next++
	id := fmt.Sprintf("sb%04d", f.next)
	f.live[id] = true
	f.creates++
	return wire.Sandbox{TemplateID: template, SandboxID: id, ClientID: "cube", EnvdVersion: "0.5.7", EnvdAccessToken: "tok-" + id}
}

func (f *fakeAPI) create(w http.ResponseWriter, r *http.Request) {
	var body wire.NewSandbox
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		fail(w, 400, "bad body: %v", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if body.TemplateID != "base" {
		if _, ok := f.snapshots[body.TemplateID]; !ok {
			fail(w, http.StatusNotFound, "template %s not found", body.TemplateID)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(f.newSandbox(body.TemplateID))
}

func (f *fakeAPI) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if !f.live[id] {
		fail(w, http.StatusNotFound, "sandbox %s not found", id)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(wire.SandboxDetail{SandboxID: id, TemplateID: "base", ClientID: "cube", State: "running"})
}

func (f *fakeAPI) kill(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if !f.live[id] {
		fail(w, http.StatusNotFound, "sandbox %s not found", id)
		return
	}
	delete(f.live, id)
	delete(f.paused, id)
	f.deletes++
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeAPI) snapshot(w http.ResponseWriter, r *http.Request) {
	if f.noSnapshots {
		fail(w, http.StatusNotImplemented, "snapshots are not supported by this server")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if !f.live[id] {
		fail(w, http.StatusNotFound, "sandbox %s not found", id)
		return
	}
	f.next++
	snap := fmt.Sprintf("snap-%04d", f.next)
	f.snapshots[snap] = id
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(wire.SnapshotInfo{SnapshotID: snap, Names: []string{}, SandboxID: id, SizeBytes: 8 << 20})
}

func (f *fakeAPI) dropTemplate(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if _, ok := f.snapshots[id]; !ok {
		fail(w, http.StatusNotFound, "template %s not found", id)
		return
	}
	delete(f.snapshots, id)
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeAPI) rollback(w http.ResponseWriter, r *http.Request) {
	var body wire.RollbackRequest
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if f.snapshots[body.SnapshotID] != id {
		fail(w, http.StatusForbidden, "snapshot %s was not taken by %s", body.SnapshotID, id)
		return
	}
	f.rollbacks = append(f.rollbacks, body.SnapshotID)
	json.NewEncoder(w).Encode(wire.RollbackResult{SandboxID: id, SnapshotID: body.SnapshotID, Status: "done"})
}

func (f *fakeAPI) fork(w http.ResponseWriter, r *http.Request) {
	var body wire.CloneRequest
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live[r.PathValue("id")] {
		fail(w, http.StatusNotFound, "sandbox not found")
		return
	}
	n := 1
	if body.Count != nil {
		n = *body.Count
	}
	var out []wire.ForkResult
	for i := 0; i < n; i++ {
		sb := f.newSandbox("fork")
		out = append(out, wire.ForkResult{Sandbox: &sb})
	}
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(out)
}

func (f *fakeAPI) pause(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if f.paused[id] {
		fail(w, http.StatusConflict, "sandbox %s is already paused", id)
		return
	}
	var body struct {
		Memory *bool `json:"memory"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	f.pauseMemory = append(f.pauseMemory, body.Memory)
	f.paused[id] = true
	if f.onPause != nil {
		f.onPause(id)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeAPI) connect(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	code := http.StatusOK
	if f.paused[id] {
		code = http.StatusCreated
	}
	if f.onConnect != nil {
		f.onConnect(id)
	}
	delete(f.paused, id)
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(wire.Sandbox{SandboxID: id, TemplateID: "base", ClientID: "cube", EnvdVersion: "0.5.7"})
}

// execute plays the code interpreter behind the proxy: it checks the
// routing headers and prints the length of a dirty buffer.
func (f *fakeAPI) execute(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if r.Header.Get("E2b-Sandbox-Port") != "49999" || r.Header.Get("X-Access-Token") != "tok-"+id {
		fail(w, http.StatusUnauthorized, "bad proxy headers")
		return
	}
	var body struct {
		Code string `json:"code"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.executed = append(f.executed, body.Code)
	f.mu.Unlock()
	out := "ok\n"
	var mb int
	if _, err := fmt.Sscanf(body.Code[strings.Index(body.Code, "*")+1:], " (%d << 20)", &mb); err == nil {
		out = fmt.Sprintf("%d\n", mb<<20)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	enc.Encode(map[string]any{"type": "stdout", "text": out, "timestamp": 1})
	enc.Encode(map[string]any{"type": "end_of_execution"})
}

func (f *fakeAPI) counts() (live, snaps, creates, deletes, maxFlight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live), len(f.snapshots), f.creates, f.deletes, f.maxFlight
}

func fakeClient(t *testing.T, srv *httptest.Server, key string) *Client {
	t.Helper()
	c, err := NewClient(srv.URL, key, 8)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
