package jupyter_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"cube/internal/envd/codeinterp/jupyter"
	"cube/internal/envd/codeinterp/jupyter/jupytertest"
)

func startPython(t *testing.T) *jupyter.Kernel {
	t.Helper()
	specs, errs := jupyter.FindSpecs([]string{jupytertest.SpecDir(t)})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	spec, ok := jupyter.SpecFor(specs, "python")
	if !ok {
		t.Fatal("python spec not found")
	}
	// Spawn the way a PID 1 reaper does: the status comes from elsewhere.
	spawn := func(cmd *exec.Cmd) (func() syscall.WaitStatus, error) {
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		status := make(chan syscall.WaitStatus, 1)
		go func() {
			cmd.Wait()
			status <- cmd.ProcessState.Sys().(syscall.WaitStatus)
		}()
		return func() syscall.WaitStatus { return <-status }, nil
	}
	k, err := jupyter.Start(context.Background(), spec, jupyter.StartOptions{Dir: t.TempDir(), Spawn: spawn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Kill)
	return k
}

// collect runs code and returns the iopub message types and the reply status.
func collect(t *testing.T, ctx context.Context, k *jupyter.Kernel, code string) ([]*jupyter.Message, string, error) {
	t.Helper()
	var msgs []*jupyter.Message
	reply, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: code, StoreHistory: true}, func(m *jupyter.Message) {
		msgs = append(msgs, m)
	})
	if err != nil {
		return msgs, "", err
	}
	var r struct {
		Status string `json:"status"`
	}
	if err := reply.Decode(&r); err != nil {
		t.Fatal(err)
	}
	return msgs, r.Status, nil
}

func TestKernelExecute(t *testing.T) {
	k := startPython(t)

	msgs, status, err := collect(t, context.Background(), k, "print('hi'); 6*7")
	if err != nil || status != "ok" {
		t.Fatalf("execute: status %q, err %v", status, err)
	}
	var stream, result string
	for _, m := range msgs {
		switch m.Type() {
		case "stream":
			var c struct{ Text string }
			m.Decode(&c)
			stream += c.Text
		case "execute_result":
			var c struct {
				Data map[string]any `json:"data"`
			}
			m.Decode(&c)
			result, _ = c.Data["text/plain"].(string)
		}
	}
	if stream != "hi\n" || result != "42" {
		t.Fatalf("stream %q result %q", stream, result)
	}

	t.Run("interrupt on cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		reply, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(120)"}, func(m *jupyter.Message) {
			if m.Type() == "stream" {
				cancel() // the kernel is inside the sleep now
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Status string `json:"status"`
			Ename  string `json:"ename"`
		}
		reply.Decode(&r)
		if r.Status != "error" || r.Ename != "KeyboardInterrupt" {
			t.Fatalf("interrupted execution replied %+v", r)
		}
	})

	t.Run("death", func(t *testing.T) {
		syscall.Kill(k.Pid(), syscall.SIGKILL)
		_, _, err := collect(t, context.Background(), k, "1")
		if !errors.Is(err, jupyter.ErrDied) {
			t.Fatalf("execute on dead kernel: %v", err)
		}
		<-k.Done()
		if got := k.ExitErr().Error(); got != "signal: killed" {
			t.Fatalf("exit %q, want signal: killed", got)
		}
	})
}

func TestStartFailureExplains(t *testing.T) {
	spec := jupyter.Spec{Name: "broken", Argv: []string{jupytertest.Python, "-c", "import sys; sys.exit('no kernel here')"}}
	_, err := jupyter.Start(context.Background(), spec, jupyter.StartOptions{})
	if err == nil || !strings.Contains(err.Error(), "no kernel here") {
		t.Fatalf("start error %v does not carry the kernel's output", err)
	}
}

// What a kernel printed reaches the start error even when the pipe is
// read after the exit is seen: a busy machine schedules the reader late,
// which this stands for with a child that writes after its parent exited.
func TestStartFailureWaitsForTheLastOutput(t *testing.T) {
	spec := jupyter.Spec{Name: "broken", Argv: []string{"/bin/sh", "-c", "(sleep 0.3; echo 'printed late' >&2) & exit 3"}}
	_, err := jupyter.Start(context.Background(), spec, jupyter.StartOptions{})
	if err == nil || !strings.Contains(err.Error(), "printed late") {
		t.Fatalf("start error %v does not carry the kernel's output", err)
	}
}
