// Package webui is Cube's web console: a single-page app, embedded in the
// binary, that an operator opens at /console in a browser. The page itself
// holds no data and is served without a key; everything it shows comes
// from the API's own routes, called with the key the operator signs in
// with, and from one summary route of its own (Summary) that reads the
// server's Prometheus registry. The API decides which of its routes need
// the key; this package only answers them.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The bundle that `make console-assets` writes from web/console: index.html,
// app.js, app.css and the benchmark summary. It is committed, so a Go build
// needs no Node.
//
//go:embed dist
var dist embed.FS

// Paths under which the API serves this handler.
const (
	IndexPath   = "/console"
	AssetsPath  = "/console/assets/"
	SummaryPath = "/console/api/summary"
)

// Config is what the console reports about the server beyond its metrics.
type Config struct {
	// Gatherer is the registry GET /metrics serves; the summary reads the
	// same values, so the console and Prometheus never disagree.
	Gatherer prometheus.Gatherer
	// Version of the server, Runtime a short description of the sandbox
	// runtime, DataDir the directory whose filesystem usage is reported.
	Version, Runtime, DataDir string
	// MaxSandboxes is the capacity: running plus paused sandboxes allowed.
	MaxSandboxes int
}

// Handler answers the console's routes (IndexPath, AssetsPath..., and
// SummaryPath); the caller authenticates SummaryPath.
type Handler struct {
	cfg    Config
	assets fs.FS
	host   hostReader
}

// New returns the console's handler.
func New(cfg Config) *Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return &Handler{cfg: cfg, assets: sub, host: hostReader{proc: "/proc"}}
}

// contentSecurity keeps the page to its own assets: nothing loads from
// elsewhere, no inline script runs, and it cannot be framed.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case p == SummaryPath:
		h.serveSummary(w, r)
	case p == IndexPath:
		h.serveFile(w, r, "index.html", "text/html; charset=utf-8")
	case strings.HasPrefix(p, AssetsPath):
		name := strings.TrimPrefix(p, AssetsPath)
		if name == "index.html" || strings.Contains(name, "/") {
			http.NotFound(w, r)
			return
		}
		h.serveFile(w, r, name, "")
	default:
		http.NotFound(w, r)
	}
}

var contentTypes = map[string]string{
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".md":   "text/markdown; charset=utf-8",
	".html": "text/html; charset=utf-8",
}

// modTime stands for every embedded file's: embed keeps none.
var modTime = time.Now()

func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, name, ctype string) {
	f, err := h.assets.Open(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	if ctype == "" {
		ctype = contentTypes[path.Ext(name)]
	}
	if ctype == "" {
		// Only the page's own kinds of file are served (not the bundle's
		// list of sources, for one).
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Security-Policy", contentSecurity)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	// The bundle changes with the binary; revalidate rather than cache.
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, modTime, f.(readSeeker))
}

type readSeeker interface {
	Read([]byte) (int, error)
	Seek(int64, int) (int64, error)
}
