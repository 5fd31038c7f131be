// Package envd is the agent inside every Cube sandbox: the E2B envd protocol
// on one port, with the process and filesystem Connect services and the
// plain-HTTP routes (/health, /files, /init, /envs, /metrics) beside them.
package envd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"cube/internal/envd/files"
	"cube/internal/envd/filesystem"
	"cube/internal/envd/process"
	"cube/internal/envd/protocol"
	"cube/internal/envd/reap"
	"cube/internal/envd/state"
	"cube/internal/envd/users"
)

// Options configure a Server.
type Options struct {
	// Env is the template's environment (KEY=VALUE), inherited by every
	// process under what /init and each request add.
	Env []string
	// DefaultUser is used when a request names no user. Empty means
	// "user" when that account exists, else the account envd runs as.
	DefaultUser string
	// DefaultWorkdir is where processes start when a request names no
	// directory, and what an empty path means; empty means the user's
	// home. Relative paths resolve in the acting user's home, as on E2B.
	DefaultWorkdir string
	// AccessToken, when set, is required from the start (normally /init
	// sets it).
	AccessToken string
	// Reaper waits for children; nil when envd is not the sandbox's init.
	Reaper *reap.Reaper
	Logger *slog.Logger
}

// Server is a running envd.
type Server struct {
	State   *state.State
	Process *process.Service
	FS      *filesystem.Service

	log      *slog.Logger
	handler  http.Handler
	patterns []string // what routes registered, for Routes
	metrics  *metricsSampler
}

// New builds the server.
func New(opts Options) (*Server, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	defUser := opts.DefaultUser
	if defUser == "" {
		if _, err := users.Lookup(users.DefaultName); err == nil {
			defUser = users.DefaultName
		} else {
			cur, err := users.Current()
			if err != nil {
				return nil, err
			}
			defUser = cur.Name
		}
	}
	if _, err := users.Lookup(defUser); err != nil {
		return nil, err
	}
	st := state.New(opts.Env, defUser, opts.DefaultWorkdir)
	st.SetToken(opts.AccessToken)
	s := &Server{
		State:   st,
		Process: process.New(st, opts.Reaper, log),
		FS:      filesystem.New(st, log),
		log:     log,
		metrics: &metricsSampler{},
	}
	s.handler = s.routes()
	return s, nil
}

// Handler serves the whole envd protocol.
func (s *Server) Handler() http.Handler { return s.handler }

// HTTPServer returns an http.Server for addr that speaks HTTP/1.1 and
// cleartext HTTP/2 (Connect clients use either).
func (s *Server) HTTPServer(addr string) *http.Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           s.handler,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

// Close stops watchers and kills the processes envd started.
func (s *Server) Close() {
	s.FS.Close()
	s.Process.KillAll()
}

// PublicRoutes are the envd routes that answer without the access token,
// each with the reason it may. Every other route, including ones added
// later and paths that match none, needs the token (or, for /files, a
// signed URL).
var PublicRoutes = map[string]string{
	"GET /health": "the control plane's readiness probe, called before /init hands out a token; it reveals only envd's version",
}

// signedRoute may be authorised by a URL signature instead of the token;
// its handler verifies the signature.
const signedRoute = "/files"

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, h)
		s.patterns = append(s.patterns, pattern)
	}
	opts := []connect.HandlerOption{
		connect.WithInterceptors(&tokenInterceptor{state: s.State}),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			s.log.Error("panic in handler", "procedure", spec.Procedure, "panic", p)
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
		connect.WithReadMaxBytes(64 << 20),
	}
	connectPrefixes := map[string]bool{}
	for _, svc := range []func(...connect.HandlerOption) (string, http.Handler){s.Process.Handler, s.FS.Handler} {
		prefix, h := svc(opts...)
		connectPrefixes[prefix] = true
		handle(prefix, h)
	}
	handle(signedRoute, files.New(s.State, s.log))
	handle("GET /health", http.HandlerFunc(s.health))
	handle("POST /init", http.HandlerFunc(s.init))
	handle("GET /envs", http.HandlerFunc(s.envs))
	handle("GET /metrics", http.HandlerFunc(s.metricsHandler))
	return s.requireToken(mux, connectPrefixes)
}

// Routes lists the patterns envd serves: the plain-HTTP routes and the
// path prefix of each Connect service.
func (s *Server) Routes() []string { return slices.Clone(s.patterns) }

// requireToken is envd's one access check, in front of every route: a
// request passes with the access token (any request while none is set),
// to a public route, or to the signed route when it carries a signature.
// A refused Connect call gets a Connect error, anything else E2B's JSON
// error; both with status 401.
func (s *Server) requireToken(mux *http.ServeMux, connectPrefixes map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		switch {
		case PublicRoutes[pattern] != "":
		case s.State.Authorized(r.Header.Get(protocol.HeaderAccessToken)):
		case pattern == signedRoute && r.URL.Query().Has("signature"):
		case connectPrefixes[pattern]:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"code": connect.CodeUnauthenticated.String(), "message": errNoToken.Error()})
			return
		default:
			writeError(w, http.StatusUnauthorized, "%v", errNoToken)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

var errNoToken = errors.New("missing or invalid access token: send the sandbox's envd access token in the X-Access-Token header")

// tokenInterceptor rejects RPCs without the access token once one is set.
// requireToken already refuses them; this second check keeps the services
// safe wherever else their handlers are mounted.
type tokenInterceptor struct{ state *state.State }

func (t *tokenInterceptor) check(h http.Header) error {
	if !t.state.Authorized(h.Get(protocol.HeaderAccessToken)) {
		return connect.NewError(connect.CodeUnauthenticated, errNoToken)
	}
	return nil
}

func (t *tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := t.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (t *tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t *tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := t.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
