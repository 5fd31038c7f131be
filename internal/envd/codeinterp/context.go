package codeinterp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	"cube/internal/envd/codeinterp/jupyter"
)

var errContextGone = errors.New("context was deleted")

// codeContext is one isolated execution state: a kernel process of one
// language, restarted in place when it dies. Executions take turns through
// a FIFO lock, so two calls on one context run in the order they came.
type codeContext struct {
	id       string
	language string
	cwd      string
	spec     jupyter.Spec
	srv      *Server

	turn fifo

	mu         sync.Mutex
	kernel     *kernelRun
	appliedEnv map[string]string // sandbox-wide env the kernel has
	closed     bool
}

// kernelRun is one kernel process of a context.
type kernelRun struct {
	*jupyter.Kernel
	stopped *stopCause // set (under the context's mu) when we kill it on purpose
}

// stopCause is the error line an execution gets when its kernel is stopped
// on purpose under it.
type stopCause struct{ name, value string }

var (
	causeRestart      = &stopCause{"ContextRestarting", "Context was restarted"}
	causeDeleted      = &stopCause{"ContextDeleted", "Context was deleted"}
	causeShutdown     = &stopCause{"ContextDeleted", "The code interpreter is shutting down"}
	causeUnresponsive = &stopCause{"KernelUnresponsive", "The kernel did not respond to an interrupt and is being restarted"}
)

func newCodeContext(srv *Server, language, cwd string, spec jupyter.Spec) *codeContext {
	if spec.Language != "" {
		language = spec.Language // "python3" asks for the python3 kernel, whose language is python
	}
	return &codeContext{
		id:       jupyter.NewID(),
		language: language,
		cwd:      cwd,
		spec:     spec,
		srv:      srv,
	}
}

// ensureKernel returns the live kernel, starting one if there is none. The
// caller holds the turn.
func (c *codeContext) ensureKernel() (*kernelRun, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errContextGone
	}
	if k := c.kernel; k != nil {
		select {
		case <-k.Done():
		default:
			c.mu.Unlock()
			return k, nil
		}
	}
	c.kernel = nil
	c.mu.Unlock()

	env := c.srv.sandboxEnv()
	procEnv := os.Environ()
	for k, v := range env {
		procEnv = append(procEnv, k+"="+v)
	}
	begin := time.Now()
	k, err := jupyter.Start(c.srv.baseCtx, c.spec, jupyter.StartOptions{
		Dir:          c.cwd,
		Env:          procEnv,
		ReadyTimeout: c.srv.readyTimeout,
		Logger:       c.srv.log,
		Spawn:        c.srv.opts.Spawn,
	})
	if err != nil {
		c.srv.log.Error("kernel start failed", "context", c.id, "language", c.language, "err", err)
		return nil, err
	}
	c.srv.log.Info("kernel started", "context", c.id, "language", c.language, "spec", c.spec.Name, "pid", k.Pid(), "took", time.Since(begin).Round(time.Millisecond))

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		k.Kill()
		return nil, errContextGone
	}
	run := &kernelRun{Kernel: k}
	c.kernel = run
	c.appliedEnv = env
	c.mu.Unlock()

	c.srv.wg.Add(1)
	go c.watch(run)
	return run, nil
}

// watch restarts the kernel after it dies on its own (os._exit, OOM kill),
// so the context is warm again before the next execution arrives.
func (c *codeContext) watch(k *kernelRun) {
	defer c.srv.wg.Done()
	select {
	case <-k.Done():
	case <-c.srv.baseCtx.Done():
		return
	}
	c.mu.Lock()
	intended := k.stopped != nil
	current := c.kernel == k
	closed := c.closed
	c.mu.Unlock()
	// Release the dead kernel's sockets, connection file, and any
	// processes it left behind in its group.
	k.Kill()
	if intended || closed || !current {
		return
	}
	c.srv.log.Warn("kernel died, restarting", "context", c.id, "err", k.ExitErr(), "output", k.Output())
	if err := c.turn.Lock(c.srv.baseCtx); err != nil {
		return
	}
	defer c.turn.Unlock()
	c.ensureKernel()
}

// stopKernel kills the current kernel on purpose; an execution running on
// it ends with the error line of cause.
func (c *codeContext) stopKernel(cause *stopCause) {
	c.mu.Lock()
	k := c.kernel
	c.kernel = nil
	if k != nil {
		k.stopped = cause
	}
	c.mu.Unlock()
	if k != nil {
		k.Kill()
	}
}

// whyStopped says why a kernel that ended was stopped, or nil if it died.
func (c *codeContext) whyStopped(k *kernelRun) *stopCause {
	c.mu.Lock()
	defer c.mu.Unlock()
	return k.stopped
}

// restart replaces the kernel with a fresh one, interrupting whatever runs.
func (c *codeContext) restart(ctx context.Context) error {
	c.stopKernel(causeRestart)
	if err := c.turn.Lock(ctx); err != nil {
		return err
	}
	defer c.turn.Unlock()
	_, err := c.ensureKernel()
	return err
}

// close stops the kernel for good.
func (c *codeContext) close(cause *stopCause) {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stopKernel(cause)
}

// ready reports whether a live kernel is attached.
func (c *codeContext) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kernel == nil {
		return false
	}
	select {
	case <-c.kernel.Done():
		return false
	default:
		return true
	}
}

// envToApply returns the sandbox-wide variables the kernel does not have
// yet (set by /init after it started), and records them as applied.
func (c *codeContext) envToApply() map[string]string {
	env := c.srv.sandboxEnv()
	c.mu.Lock()
	defer c.mu.Unlock()
	diff := map[string]string{}
	for k, v := range env {
		if old, ok := c.appliedEnv[k]; !ok || old != v {
			diff[k] = v
		}
	}
	if len(diff) > 0 {
		c.appliedEnv = maps.Clone(env)
	}
	return diff
}

// runSilently executes helper code (environment changes) that must leave
// no trace: no output, no history, no execution count.
func runSilently(ctx context.Context, k *jupyter.Kernel, code string) error {
	reply, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: code, Silent: true}, nil)
	if err != nil {
		return err
	}
	var r struct {
		Status string `json:"status"`
		Ename  string `json:"ename"`
		Evalue string `json:"evalue"`
	}
	if err := reply.Decode(&r); err != nil {
		return err
	}
	if r.Status != "ok" {
		return fmt.Errorf("%s (%s: %s)", r.Status, r.Ename, r.Evalue)
	}
	return nil
}

// fifo is a lock granted in arrival order; waiting can be abandoned.
type fifo struct {
	mu    sync.Mutex
	held  bool
	queue []chan struct{}
}

func (f *fifo) Lock(ctx context.Context) error {
	f.mu.Lock()
	if !f.held {
		f.held = true
		f.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	f.queue = append(f.queue, ch)
	f.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		for i, q := range f.queue {
			if q == ch {
				f.queue = append(f.queue[:i], f.queue[i+1:]...)
				f.mu.Unlock()
				return ctx.Err()
			}
		}
		f.mu.Unlock()
		// The lock was handed over as we gave up: pass it on.
		f.Unlock()
		return ctx.Err()
	}
}

func (f *fifo) Unlock() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) > 0 {
		next := f.queue[0]
		f.queue = f.queue[1:]
		close(next)
		return
	}
	f.held = false
}
