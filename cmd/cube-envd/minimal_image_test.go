package main

import (
	"context"
	"encoding/base64"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "cube/internal/envd/gen/process"
)

// runAs runs /bin/sh -c script as user and returns its stdout.
func (p *envdProc) runAs(t *testing.T, user, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cwd := "/"
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}, Cwd: &cwd}})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	stream, err := p.proc.Start(ctx, req)
	if err != nil {
		return "", err
	}
	defer stream.Close()
	var out string
	for stream.Receive() {
		out += string(stream.Msg().GetEvent().GetData().GetStdout())
	}
	return out, stream.Err()
}

// In an image without /etc/passwd, root is still uid 0 with home /root (envd
// creates the file for the default user only).
func TestRootWithoutAccountDatabase(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a mount namespace needs root")
	}
	p := startEnvd(t, true, []string{"CUBE_TEST_BARE_ETC=1"})
	if out, err := p.runAs(t, "root", "grep -q ^root: /etc/passwd && echo root-listed; id -u; id -g; echo $HOME"); err != nil || out != "0\n0\n/root\n" {
		t.Fatalf("as root without /etc/passwd: %q, %v", out, err)
	}
}
