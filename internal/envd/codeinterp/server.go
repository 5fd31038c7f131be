// Package codeinterp serves the code interpreter API (port 49999 of a
// sandbox): stateful code execution on real Jupyter kernels, streamed to
// clients as NDJSON in the shape the E2B code-interpreter SDKs read.
package codeinterp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"cube/internal/envd/codeinterp/jupyter"
)

// Options configures a Server.
type Options struct {
	// Env returns the sandbox-wide environment variables (set later through
	// envd /init). They are applied to a kernel before each execution, so a
	// kernel started before /init still sees them.
	Env func() map[string]string
	// DefaultCwd is the working directory of contexts created without one,
	// e.g. /home/user; when it does not exist the first existing of $HOME
	// and / is used.
	DefaultCwd string
	// Authorize, when set, must accept every request except those for
	// the routes OpenRoutes lists.
	Authorize func(*http.Request) bool
	// ContextsOpen, when set, reports whether ContextRoutes are open too
	// at the moment, for clients that send no access token with them.
	ContextsOpen func() bool
	// KernelSpecDirs are searched for kernelspecs; default: the standard
	// Jupyter data paths (jupyter.DefaultSpecDirs).
	KernelSpecDirs []string
	Logger         *slog.Logger
	// Spawn, when set, starts each kernel process and returns a function
	// waiting for its exit. cube-envd runs as PID 1 and reaps every child,
	// so it passes its reaper's (reap.Reaper.Start, Child.Wait) to keep
	// kernel exit statuses; nil uses cmd.Start and cmd.Wait.
	Spawn func(*exec.Cmd) (wait func() syscall.WaitStatus, err error)
}

// Server holds the code contexts and their kernels.
type Server struct {
	opts         Options
	log          *slog.Logger
	readyTimeout time.Duration

	// baseCtx bounds every kernel launch and background task; Close ends it.
	baseCtx context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu       sync.Mutex
	contexts map[string]*codeContext
	order    []string          // context ids in creation order, for listing
	defaults map[string]string // language → id of the context used when none is named
	starting bool
	closed   bool
}

// New returns a Server; no kernel runs until Start or the first request.
func New(opts Options) *Server {
	if len(opts.KernelSpecDirs) == 0 {
		opts.KernelSpecDirs = jupyter.DefaultSpecDirs()
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		opts:         opts,
		log:          logger.With("component", "codeinterp"),
		readyTimeout: 60 * time.Second,
		baseCtx:      ctx,
		cancel:       cancel,
		contexts:     map[string]*codeContext{},
		defaults:     map[string]string{},
	}
}

// Start launches the default python context in the background, so a
// snapshot of the sandbox holds a warm kernel.
func (s *Server) Start(ctx context.Context) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.starting = true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			s.starting = false
			s.mu.Unlock()
		}()
		c, err := s.defaultContext("python")
		if err != nil {
			s.log.Warn("no default python context", "err", err)
			return
		}
		// E2B's sandboxes list a default javascript context beside
		// python's; its kernel starts on its first execution, so it costs
		// no memory until then. Templates without a javascript kernel have
		// none.
		if _, err := s.defaultContext("javascript"); err != nil {
			s.log.Debug("no default javascript context", "err", err)
		}
		if err := c.turn.Lock(ctx); err != nil {
			return
		}
		defer c.turn.Unlock()
		k, err := c.ensureKernel()
		if err != nil {
			return // logged, and retried by the first execution
		}
		// The warm kernel goes into the template's snapshot, whose memory
		// every sandbox of the template shares until it writes a page, and
		// each first write costs a page fault. A full collection now, then
		// moving every object to the collector's permanent generation,
		// keeps later collections from writing to the shared heap.
		if err := runSilently(ctx, k.Kernel, warmPython); err != nil {
			s.log.Warn("warming the default python kernel failed", "err", err)
		}
	}()
}

// warmPython runs once in the default python kernel before the sandbox
// reports ready; it leaves no names behind.
const warmPython = "import gc as _cube_gc\n_cube_gc.collect()\n_cube_gc.freeze()\ndel _cube_gc\n"

// Ready reports whether the default python context's kernel is up.
func (s *Server) Ready() bool {
	s.mu.Lock()
	c := s.contexts[s.defaults["python"]]
	s.mu.Unlock()
	return c != nil && c.ready()
}

// Close stops every kernel and waits for their processes to exit.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	all := make([]*codeContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		all = append(all, c)
	}
	s.contexts = map[string]*codeContext{}
	s.defaults = map[string]string{}
	s.order = nil
	s.mu.Unlock()

	s.cancel()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.close(causeShutdown)
		}()
	}
	wg.Wait()
	s.wg.Wait()
	return nil
}

func (s *Server) sandboxEnv() map[string]string {
	if s.opts.Env == nil {
		return map[string]string{}
	}
	env := maps.Clone(s.opts.Env())
	for k := range env {
		if !envName.MatchString(k) {
			s.log.Warn("ignoring sandbox environment variable with an invalid name", "name", k)
			delete(env, k)
		}
	}
	if env == nil {
		env = map[string]string{}
	}
	return env
}

// defaultCwd is where contexts start when the client names no directory.
func (s *Server) defaultCwd() string {
	candidates := []string{s.opts.DefaultCwd}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, home)
	}
	for _, d := range candidates {
		if d == "" {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return "/"
}

// normalizeLanguage maps the names clients use to kernel languages.
func normalizeLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	switch l {
	case "":
		return "python"
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	case "sh":
		return "bash"
	}
	return l
}

// noKernelError says no kernelspec serves a language; it is the client's
// problem (a language this image does not have), not a server fault.
type noKernelError struct {
	language string
	dirs     []string
	found    []string
}

func (e *noKernelError) Error() string {
	msg := fmt.Sprintf("no Jupyter kernel for language %q is installed (kernelspecs searched in %s", e.language, strings.Join(e.dirs, ", "))
	if len(e.found) == 0 {
		return msg + "; none found)"
	}
	return msg + "; found: " + strings.Join(e.found, ", ") + ")"
}

func (s *Server) specFor(language string) (jupyter.Spec, error) {
	specs, errs := jupyter.FindSpecs(s.opts.KernelSpecDirs)
	for _, err := range errs {
		s.log.Warn("unusable kernelspec", "err", err)
	}
	if spec, ok := jupyter.SpecFor(specs, language); ok {
		return spec, nil
	}
	e := &noKernelError{language: language, dirs: s.opts.KernelSpecDirs}
	for _, sp := range specs {
		e.found = append(e.found, fmt.Sprintf("%s (%s)", sp.Name, sp.Language))
	}
	return jupyter.Spec{}, e
}

var errClosed = errors.New("the code interpreter is shutting down")

// newContext registers a context; its kernel starts on first use.
func (s *Server) newContext(language, cwd string) (*codeContext, error) {
	spec, err := s.specFor(language)
	if err != nil {
		return nil, err
	}
	c := newCodeContext(s, language, cwd, spec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	s.contexts[c.id] = c
	s.order = append(s.order, c.id)
	return c, nil
}

// defaultContext returns the context executions of a language run in when
// the client names none, creating it on first use.
func (s *Server) defaultContext(language string) (*codeContext, error) {
	s.mu.Lock()
	if c, ok := s.contexts[s.defaults[language]]; ok {
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	spec, err := s.specFor(language)
	if err != nil {
		return nil, err
	}
	c := newCodeContext(s, language, s.defaultCwd(), spec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if existing, ok := s.contexts[s.defaults[language]]; ok {
		return existing, nil // created meanwhile by a concurrent request
	}
	s.contexts[c.id] = c
	s.order = append(s.order, c.id)
	s.defaults[language] = c.id
	return c, nil
}

func (s *Server) lookup(id string) *codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[id]
}

func (s *Server) remove(id string) *codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.contexts[id]
	if c == nil {
		return nil
	}
	delete(s.contexts, id)
	for i, o := range s.order {
		if o == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	for lang, d := range s.defaults {
		if d == id {
			delete(s.defaults, lang)
		}
	}
	return c
}

// httpError answers in plain text: the SDKs put the body of a 404 (and,
// in diagnostics mode, of any error) into the exception they raise.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// handleHealth answers 200 unless the default context is still starting,
// so a readiness probe that waits for it gets a warm kernel.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	starting, closed := s.starting, s.closed
	s.mu.Unlock()
	if closed {
		httpError(w, http.StatusServiceUnavailable, errClosed.Error())
		return
	}
	if starting {
		httpError(w, http.StatusServiceUnavailable, "starting the default python kernel")
		return
	}
	writeJSON(w, http.StatusOK, "OK")
}

// decodeBody reads a JSON request body; an empty body is an empty object.
func decodeBody(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// contextJSON is a context on the wire.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (c *codeContext) json() contextJSON {
	return contextJSON{ID: c.id, Language: c.language, Cwd: c.cwd}
}

// contextError maps context creation errors to a status.
func contextError(w http.ResponseWriter, err error) {
	var nk *noKernelError
	switch {
	case errors.As(err, &nk):
		httpError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errClosed):
		httpError(w, http.StatusServiceUnavailable, err.Error())
	default:
		httpError(w, http.StatusInternalServerError, err.Error())
	}
}

func (s *Server) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language *string `json:"language"`
		Cwd      *string `json:"cwd"`
	}
	if err := decodeBody(r, &req); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	language := normalizeLanguage(deref(req.Language))
	cwd := deref(req.Cwd)
	if cwd == "" {
		cwd = s.defaultCwd()
	} else if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("cwd %q is not an existing directory", cwd))
		return
	}
	c, err := s.newContext(language, cwd)
	if err != nil {
		contextError(w, err)
		return
	}
	// Answer once the kernel is up, so the first execution is fast and a
	// broken kernel is reported here rather than later.
	if err := c.turn.Lock(r.Context()); err != nil {
		s.remove(c.id)
		c.close(causeDeleted)
		return
	}
	_, err = c.ensureKernel()
	c.turn.Unlock()
	if err != nil {
		s.remove(c.id)
		c.close(causeDeleted)
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, c.json())
}

func (s *Server) handleListContexts(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	list := make([]contextJSON, 0, len(s.order))
	for _, id := range s.order {
		list = append(list, s.contexts[id].json())
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleRestartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.lookup(id)
	if c == nil {
		httpError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return
	}
	if err := c.restart(r.Context()); err != nil {
		if errors.Is(err, errContextGone) {
			httpError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
			return
		}
		httpError(w, http.StatusInternalServerError, fmt.Sprintf("restart context %s: %v", id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleDeleteContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.remove(id)
	if c == nil {
		httpError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return
	}
	c.close(causeDeleted)
	w.WriteHeader(http.StatusNoContent)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
