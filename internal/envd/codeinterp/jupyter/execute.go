// Running code in a kernel and interrupting it.

package jupyter

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ExecuteRequest is the content of an execute_request.
type ExecuteRequest struct {
	Code            string         `json:"code"`
	Silent          bool           `json:"silent"`
	StoreHistory    bool           `json:"store_history"`
	UserExpressions map[string]any `json:"user_expressions"`
	AllowStdin      bool           `json:"allow_stdin"`
	StopOnError     bool           `json:"stop_on_error"`
}

// Execute runs code and calls onOutput, in order, with every iopub message
// the kernel publishes for it, until the kernel is idle again and has sent
// its execute_reply, which Execute returns.
//
// When ctx ends first (the client went away), the kernel is interrupted and
// Execute keeps collecting, so the next request on this kernel starts from
// an idle kernel. It returns ErrUnresponsive if the kernel ignores the
// interrupt for InterruptGrace, and ErrDied if the process exits.
func (k *Kernel) Execute(ctx context.Context, req ExecuteRequest, onOutput func(*Message)) (*Message, error) {
	if req.UserExpressions == nil {
		req.UserExpressions = map[string]any{}
	}
	id, in := k.request()
	defer k.drop(id)
	if err := k.send(k.shell, id, "execute_request", req); err != nil {
		if errors.Is(err, ErrDied) || k.exited() {
			return nil, ErrDied
		}
		return nil, fmt.Errorf("send execute_request: %w", err)
	}
	var (
		reply    *Message
		idle     bool
		ctxDone  = ctx.Done()
		deadline <-chan time.Time
		again    <-chan time.Time
	)
	interrupt := func() {
		if err := k.Interrupt(); err != nil {
			k.log.Warn("interrupt failed", "err", err)
		}
	}
	for reply == nil || !idle {
		select {
		case <-ctxDone:
			ctxDone = nil
			k.log.Info("interrupting execution", "reason", ctx.Err())
			interrupt()
			t := time.NewTimer(InterruptGrace)
			defer t.Stop()
			deadline = t.C
			// An interrupt that lands before the kernel began running
			// the code is lost; repeat it until the kernel is idle.
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			again = tick.C
		case <-again:
			if reply == nil {
				interrupt()
			}
		case <-deadline:
			return nil, ErrUnresponsive
		case <-in.notify:
			msgs := in.take()
			for _, m := range msgs {
				switch {
				case m.channel == "shell" && m.Type() == "execute_reply":
					reply = m.Message
				case m.channel == "iopub":
					if m.Type() == "status" {
						var st struct {
							ExecutionState string `json:"execution_state"`
						}
						if m.Decode(&st) == nil && st.ExecutionState == "idle" {
							idle = true
						}
					}
					if onOutput != nil {
						onOutput(m.Message)
					}
				}
			}
			if in.isClosed() && len(msgs) == 0 {
				return nil, ErrDied
			}
		}
	}
	return reply, nil
}

// Interrupt stops the running execution the way the kernelspec asks: a
// SIGINT to the kernel's process group, or an interrupt_request on control.
func (k *Kernel) Interrupt() error {
	if k.spec.InterruptMode == "message" {
		id, _ := k.request()
		defer k.drop(id)
		return k.send(k.control, id, "interrupt_request", struct{}{})
	}
	return syscall.Kill(-k.cmd.Process.Pid, syscall.SIGINT)
}
