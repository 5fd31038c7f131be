package codeinterp

import (
	"maps"
	"net/http"
)

// PublicRoutes are the code interpreter routes that answer without
// authorisation, each with the reason it may. Every other route, including
// ones added later and paths that match none, must pass Options.Authorize
// (but see Options.ContextsOpen).
var PublicRoutes = map[string]string{
	"GET /health": "the readiness probe that waits for the warm default kernel; it reveals only whether that kernel is up",
}

// ContextRoutes manage code contexts. @e2b/code-interpreter (up to 2.8.0,
// the newest) sends the access token with /execute only, never with these,
// so a server for such clients leaves them open with
// Options.ContextsOpen.
var ContextRoutes = map[string]string{
	"POST /contexts":              "creating a context: @e2b/code-interpreter up to 2.8.0 sends no access token with it",
	"GET /contexts":               "listing contexts: @e2b/code-interpreter up to 2.8.0 sends no access token with it",
	"POST /contexts/{id}/restart": "restarting a context: @e2b/code-interpreter up to 2.8.0 sends no access token with it",
	"DELETE /contexts/{id}":       "removing a context: @e2b/code-interpreter up to 2.8.0 sends no access token with it",
}

// OpenRoutes are the routes this server answers without authorisation
// at the moment, each with the reason it may.
func (s *Server) OpenRoutes() map[string]string {
	open := maps.Clone(PublicRoutes)
	if s.opts.ContextsOpen != nil && s.opts.ContextsOpen() {
		maps.Copy(open, ContextRoutes)
	}
	return open
}

// route is one endpoint of the API.
type route struct {
	pattern string
	handler http.HandlerFunc
}

// routes is the API's one table of endpoints, for Handler and Routes.
func (s *Server) routes() []route {
	return []route{
		{"GET /health", s.handleHealth},
		{"POST /execute", s.handleExecute},
		{"POST /contexts", s.handleCreateContext},
		{"GET /contexts", s.handleListContexts},
		{"POST /contexts/{id}/restart", s.handleRestartContext},
		{"DELETE /contexts/{id}", s.handleDeleteContext},
	}
}

// Handler returns the HTTP API, every route behind one access check.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		mux.HandleFunc(rt.pattern, rt.handler)
	}
	return s.authorized(mux)
}

// Routes lists the patterns Handler serves.
func (s *Server) Routes() []string {
	var out []string
	for _, rt := range s.routes() {
		out = append(out, rt.pattern)
	}
	return out
}

// authorized lets a request reach mux when it is for an open route or
// Options.Authorize accepts it.
func (s *Server) authorized(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); !s.open(pattern) && s.opts.Authorize != nil && !s.opts.Authorize(r) {
			httpError(w, http.StatusUnauthorized, "unauthorized: missing or invalid access token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// open reports whether the route served under pattern answers without
// authorisation now.
func (s *Server) open(pattern string) bool {
	if PublicRoutes[pattern] != "" {
		return true
	}
	return ContextRoutes[pattern] != "" && s.opts.ContextsOpen != nil && s.opts.ContextsOpen()
}
