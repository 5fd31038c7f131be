package envdclient

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strconv"

	"connectrpc.com/connect"

	processpb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
)

// ExitError is a process that ended with a non-zero code: it ran, so the
// caller's failure is the command's, not the agent's.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return "exited with code " + strconv.Itoa(e.Code) }

// Run runs script by /bin/sh as user, in cwd unless that is empty, with
// env, writing its output to out as it comes (standard output and error
// in one stream, as a build log shows them). A non-zero exit is an
// *ExitError; a process envd could not start, or whose stream broke, is
// envd's error as it came.
func (c *Client) Run(ctx context.Context, user, cwd string, env map[string]string, script string, out io.Writer) error {
	client := processpbconnect.NewProcessClient(c.hc, c.base)
	cfg := &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}, Envs: env}
	if cwd != "" {
		cfg.Cwd = &cwd
	}
	req := connect.NewRequest(&processpb.StartRequest{Process: cfg})
	// envd runs a process as the user its Basic authorization names.
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	stream, err := client.Start(ctx, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			out.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				return &ExitError{int(end.GetExitCode())}
			}
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := stream.Err(); err != nil {
		return err
	}
	return errors.New("the process ended without an exit code")
}
