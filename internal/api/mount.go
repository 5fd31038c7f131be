package api

import (
	"log/slog"
	"net/http"
	"time"
)

// Sandboxes is the handler of sandbox traffic that shares the API's
// listener: the proxy. The API knows it only through this, so which
// requests are sandbox traffic is decided in one place, the proxy's
// routing, and never by an API route.
type Sandboxes interface {
	http.Handler
	// Match reports whether r is sandbox traffic, and the sandbox and port
	// it names as far as it names them; the access log records them.
	Match(r *http.Request) (sandboxID string, port int, ok bool)
}

// Mount returns the handler of the whole listener: requests sandboxes
// claims go to it, every other one to the API. Both kinds are recorded in
// the access log and the request metrics, sandbox traffic under the route
// label "proxy".
func Mount(s *Server, sandboxes Sandboxes) http.Handler {
	return &mounted{api: s, sandboxes: sandboxes}
}

type mounted struct {
	api       *Server
	sandboxes Sandboxes
}

func (m *mounted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	if sid, port, ok := m.sandboxes.Match(r); ok {
		m.sandboxes.ServeHTTP(rec, r)
		m.api.observe(r, rec, "proxy", time.Since(start), slog.String("sandbox", sid), slog.Int("port", port))
		return
	}
	label := m.api.serveAPI(rec, r)
	m.api.observe(r, rec, label, time.Since(start))
}

// observe records one answered request. Sandbox traffic carries the
// sandbox it was for in extra.
func (s *Server) observe(r *http.Request, rec *recorder, label string, d time.Duration, extra ...slog.Attr) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	s.metrics.request(label, status, d)
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("route", label),
		// The path only: query strings may carry file-URL signatures.
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Int64("bytes", rec.bytes),
		slog.Duration("duration", d),
		slog.String("remote", r.RemoteAddr),
	}
	attrs = append(attrs, extra...)
	level := slog.LevelInfo
	if label == "proxy" {
		// Every envd call goes through here; keep them out of the default log.
		level = slog.LevelDebug
		if status >= 500 {
			level = slog.LevelWarn
		}
	}
	s.log.LogAttrs(r.Context(), level, "http request", attrs...)
}

// recorder remembers the status and size of an answer. It passes Flush and
// Hijack through (Unwrap), which streaming and WebSocket proxying need.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	// elsewhere: another node answers the request (cube.ErrAnsweredElsewhere).
	elsewhere bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
