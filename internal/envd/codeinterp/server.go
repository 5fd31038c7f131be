// Package codeinterp serves the code interpreter API (port 49999 of a
// sandbox): stateful code execution on real Jupyter kernels, streamed to
// clients as NDJSON in the shape the E2B code-interpreter SDKs read.
package codeinterp

import (
	"context"
	"log/slog"
	"net/http"
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
	// Authorize, when set, must accept every request except GET /health.
	Authorize func(*http.Request) bool
	// KernelSpecDirs are searched for kernelspecs; default: the standard
	// Jupyter data paths.
	KernelSpecDirs []string
	Logger         *slog.Logger
}

// Server holds the code contexts and their kernels.
type Server struct {
	opts Options
}

// New returns a Server; no kernel runs until Start or the first request.
func New(opts Options) *Server { return &Server{opts: opts} }

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler { return http.NotFoundHandler() }

// Start launches the default python context in the background, so a
// snapshot of the sandbox holds a warm kernel.
func (s *Server) Start(ctx context.Context) {}

// Ready reports whether the default context's kernel is up.
func (s *Server) Ready() bool { return false }

// Close stops every kernel and waits for their processes to exit.
func (s *Server) Close() error { return nil }
