package nodetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	processpb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
	"cube/internal/envd/protocol"
)

// Result is what a process run in a sandbox printed and how it ended.
type Result struct {
	Stdout, Stderr string
	ExitCode       int
}

// Run starts cmd with args in a sandbox through its envd at addr
// ("host:port") as user root, and waits for it to end.
func Run(t testing.TB, addr, token, cmd string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := processpbconnect.NewProcessClient(NoKeepAlive, "http://"+addr)
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: cmd, Args: args}})
	req.Header().Set(protocol.HeaderAccessToken, token)
	req.Header().Set("Authorization", "Basic cm9vdDo=") // root:
	stream, err := client.Start(ctx, req)
	if err != nil {
		t.Fatalf("start %s: %v", cmd, err)
	}
	defer stream.Close()
	var out, errb strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			errb.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			return Result{Stdout: out.String(), Stderr: errb.String(), ExitCode: int(end.GetExitCode())}
		}
	}
	t.Fatalf("%s %v: stream ended without an end event: %v", cmd, args, stream.Err())
	return Result{}
}

// String is a one-line description for failure messages.
func (r Result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
}
