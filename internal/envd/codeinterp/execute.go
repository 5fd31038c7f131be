package codeinterp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"cube/internal/envd/codeinterp/jupyter"
)

type executeRequest struct {
	Code      *string           `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// handleExecute runs code in a context and streams its output as NDJSON.
// Request problems (bad body, unknown context, a language without a kernel)
// are HTTP errors; everything that goes wrong once the stream is open (a
// kernel that fails to start or dies) is an error line, so a client always
// learns what happened to its code.
func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := decodeBody(r, &req); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Code == nil {
		httpError(w, http.StatusBadRequest, "code is required")
		return
	}
	if deref(req.ContextID) != "" && deref(req.Language) != "" {
		httpError(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	if err := validateEnv(req.EnvVars); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	var c *codeContext
	if id := deref(req.ContextID); id != "" {
		if c = s.lookup(id); c == nil {
			httpError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
			return
		}
	} else {
		var err error
		if c, err = s.defaultContext(normalizeLanguage(deref(req.Language))); err != nil {
			contextError(w, err)
			return
		}
	}
	if len(req.EnvVars) > 0 && envCodeFor(c.language) == nil {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("env_vars are not supported for language %q", c.language))
		return
	}

	// The execution stops when the client goes away, noticed either by the
	// server (connection closed) or by a failed write.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out := newLineWriter(w, cancel)
	defer out.close()

	// Headers are out: from here on a queued request gets keepalives while
	// it waits for its turn.
	if err := c.turn.Lock(ctx); err != nil {
		return
	}
	defer c.turn.Unlock()
	s.execute(ctx, c, *req.Code, req.EnvVars, out)
	out.write(typeLine{Type: lineEnd})
}

// execute runs code on the context's kernel, holding the context's turn.
func (s *Server) execute(ctx context.Context, c *codeContext, code string, envVars map[string]string, out *lineWriter) {
	k, err := c.ensureKernel()
	if err != nil {
		if errors.Is(err, errContextGone) {
			out.write(errorLine{Type: lineError, Name: causeDeleted.name, Value: causeDeleted.value})
			return
		}
		out.write(errorLine{Type: lineError, Name: errKernelStart, Value: err.Error()})
		return
	}

	// Helper executions run even if the client has gone: the environment
	// must be restored for whoever comes next.
	bg := context.WithoutCancel(ctx)
	envc := envCodeFor(c.language)
	if envc != nil {
		if diff := c.envToApply(); len(diff) > 0 {
			if err := runSilently(bg, k.Kernel, envc.set(diff)); err != nil {
				s.log.Warn("applying sandbox environment failed", "context", c.id, "err", err)
			}
		}
	}
	if len(envVars) > 0 {
		if err := runSilently(bg, k.Kernel, envc.push(envVars)); err != nil {
			s.kernelFailed(c, k, err, out)
			return
		}
		defer func() {
			if err := runSilently(bg, k.Kernel, envc.pop(sortedKeys(envVars))); err != nil && !errors.Is(err, jupyter.ErrDied) {
				s.log.Warn("restoring environment failed", "context", c.id, "err", err)
			}
		}()
	}

	if ctx.Err() != nil {
		return // the client left while waiting for its turn or the kernel
	}
	// Executions are queued here, never in the kernel, so stop_on_error
	// would only abort our own environment restore that follows a failure.
	errored := false
	reply, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: code, StoreHistory: true}, func(m *jupyter.Message) {
		for _, line := range translate(m) {
			if _, ok := line.(errorLine); ok {
				errored = true
			}
			out.write(line)
		}
	})
	if err != nil {
		s.kernelFailed(c, k, err, out)
		return
	}
	var rc struct {
		Status string   `json:"status"`
		Ename  string   `json:"ename"`
		Evalue string   `json:"evalue"`
		Trace  []string `json:"traceback"`
	}
	if reply.Decode(&rc) != nil || errored {
		return
	}
	switch rc.Status {
	case "error":
		// Kernels normally publish the error on iopub too; this covers
		// those that only put it in the reply.
		out.write(errorLine{Type: lineError, Name: rc.Ename, Value: rc.Evalue, Traceback: strings.Join(rc.Trace, "\n")})
	case "abort", "aborted":
		out.write(errorLine{Type: lineError, Name: "ExecutionAborted", Value: "Execution was aborted"})
	}
}

// kernelFailed reports a kernel that died or hung under an execution. Its
// context gets a fresh kernel (the watcher starts it for a death).
func (s *Server) kernelFailed(c *codeContext, k *kernelRun, err error, out *lineWriter) {
	switch {
	case errors.Is(err, jupyter.ErrDied):
		if cause := c.whyStopped(k); cause != nil {
			out.write(errorLine{Type: lineError, Name: cause.name, Value: cause.value})
			return
		}
		exit := k.ExitErr()
		s.log.Warn("kernel died during execution", "context", c.id, "err", exit)
		out.write(errorLine{
			Type:  lineError,
			Name:  errKernelDied,
			Value: fmt.Sprintf("The kernel died (%v) and is being restarted; variables and imports of this context are lost. Rerun the code to get its results.", exit),
		})
	case errors.Is(err, jupyter.ErrUnresponsive):
		s.log.Warn("kernel ignored an interrupt, restarting it", "context", c.id)
		c.stopKernel(causeUnresponsive)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if c.turn.Lock(s.baseCtx) == nil {
				c.ensureKernel()
				c.turn.Unlock()
			}
		}()
		out.write(errorLine{Type: lineError, Name: causeUnresponsive.name, Value: causeUnresponsive.value})
	default:
		out.write(errorLine{Type: lineError, Name: "KernelError", Value: err.Error()})
	}
}
