package forward

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"

	"cube/internal/cube"
	"cube/internal/httperr"
)

// A node of an earlier version takes no typed calls (ErrPeerTooOld): it
// takes the client's request itself, signed, as nodes passed requests to
// each other before typed calls. The cluster-aware service, which finds
// that out, cannot pass on a request it never saw, so the Handler keeps
// every API request a client sends it replayable while the API serves it
// (what the API reads of its body is kept too, up to wholeBodyBytes): the
// service asks for it with PassOn, the API's own answer is dropped, and
// the Handler passes the request to that node, whose answer the client
// gets. During a rolling upgrade only.

// ErrPassedOn is in the chain of the error a call passed on to a node of
// an earlier version returns: that node answers the request, and the API
// here answers and audits nothing of it.
var ErrPassedOn = cube.ErrAnsweredElsewhere

// passKey carries a request's pass through its context.
type passKey struct{}

// pass is what PassOn asked of the request being served.
type pass struct {
	mu             sync.Mutex
	node, moveFrom string
	// started: the API began its answer, which can no longer be replaced.
	started bool
	body    *keptBody
}

// PassOn asks that the client's request ctx serves be passed whole to
// node (taking its sandbox over from moveFrom first, when set) instead of
// answered here, and reports whether it will be: not when the request did
// not come through a Handler, or its answer began, or its body was too
// large to keep. The caller then returns an error wrapping ErrPassedOn.
func PassOn(ctx context.Context, node, moveFrom string) bool {
	p, _ := ctx.Value(passKey{}).(*pass)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.node != "" || (p.body != nil && p.body.over) {
		return false
	}
	p.node, p.moveFrom = node, moveFrom
	return true
}

// passed returns the node PassOn named, "" when none.
func (p *pass) passed() (node, moveFrom string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node, p.moveFrom
}

// serveReplayable serves r through h.cfg.Local, and passes it on to the
// node PassOn names if it is asked to.
func (h *Handler) serveReplayable(w http.ResponseWriter, r *http.Request) {
	p := &pass{}
	if r.Body != nil && r.Body != http.NoBody {
		p.body = &keptBody{r: r.Body}
		r.Body = p.body
	}
	pw := &passWriter{w: w, p: p, header: http.Header{}}
	h.cfg.Local.ServeHTTP(pw, r.WithContext(context.WithValue(r.Context(), passKey{}, p)))
	node, moveFrom := p.passed()
	if node == "" {
		return
	}
	addr, _, err := h.cfg.Peers.Peer(r.Context(), node)
	if err != nil {
		httperr.Write(w, unavailable(err))
		return
	}
	if p.body != nil {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(p.body.kept.Bytes()), p.body.r))
	}
	if moveFrom != "" {
		r.Header.Set(MoveHeader, moveFrom)
	}
	h.forward(w, r, addr)
}

// keptBody keeps what is read of a request body, up to wholeBodyBytes.
// The API's closing it does not close the request's: a replay reads on.
type keptBody struct {
	r    io.ReadCloser
	kept bytes.Buffer
	over bool
}

func (k *keptBody) Read(b []byte) (int, error) {
	n, err := k.r.Read(b)
	if !k.over {
		if k.kept.Len()+n > wholeBodyBytes {
			k.over = true
			k.kept = bytes.Buffer{}
		} else {
			k.kept.Write(b[:n])
		}
	}
	return n, err
}

func (k *keptBody) Close() error { return nil }

// passWriter holds back the API's headers until it answers, and drops its
// answer when the request is passed on.
type passWriter struct {
	w      http.ResponseWriter
	p      *pass
	header http.Header
}

func (pw *passWriter) Header() http.Header {
	pw.p.mu.Lock()
	defer pw.p.mu.Unlock()
	if pw.p.started {
		return pw.w.Header()
	}
	return pw.header
}

// begin reports whether the answer goes to the client, starting it if
// need be: not once the request is passed on.
func (pw *passWriter) begin() (first, answering bool) {
	pw.p.mu.Lock()
	defer pw.p.mu.Unlock()
	if pw.p.node != "" {
		return false, false
	}
	first, pw.p.started = !pw.p.started, true
	return first, true
}

func (pw *passWriter) WriteHeader(status int) {
	first, answering := pw.begin()
	if !answering || !first {
		return
	}
	for k, v := range pw.header {
		pw.w.Header()[k] = v
	}
	pw.w.WriteHeader(status)
}

func (pw *passWriter) Write(b []byte) (int, error) {
	pw.p.mu.Lock()
	started, passing := pw.p.started, pw.p.node != ""
	pw.p.mu.Unlock()
	if passing {
		return len(b), nil
	}
	if !started {
		pw.WriteHeader(http.StatusOK)
	}
	return pw.w.Write(b)
}

func (pw *passWriter) Flush() {
	pw.p.mu.Lock()
	started := pw.p.started
	pw.p.mu.Unlock()
	if started {
		http.NewResponseController(pw.w).Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (pw *passWriter) Unwrap() http.ResponseWriter { return pw.w }
