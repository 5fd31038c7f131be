package envd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "cube/internal/envd/gen/process"
)

// startErr starts cmd and returns the error the client sees.
func (s *sandbox) startErr(cmd string) error {
	s.t.Helper()
	root := "/"
	stream, err := s.proc.Start(s.ctx(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: cmd, Args: []string{"-c", "true"}, Cwd: &root}}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
		stream.Close()
	}
	return err
}

func wantStartError(t *testing.T, err error, want string) {
	t.Helper()
	wantCode(t, err, connect.CodeInvalidArgument)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// A shell the image lacks is named as missing.
func TestMissingProgramIsNamed(t *testing.T) {
	s := newSandbox(t)
	wantStartError(t, s.startErr("/no/such/dir/bash"), "/no/such/dir/bash not found in the sandbox image")

	script := filepath.Join(t.TempDir(), "script")
	os.WriteFile(script, []byte("#!/no/such/interpreter\n"), 0o755)
	wantStartError(t, s.startErr(script), "the interpreter on its #! line or its dynamic loader is missing")
}

// A missing program behind a directory the user may not search is
// reported as missing, not as "permission denied"; a program that exists
// but that the user may not run is reported as such.
func TestMissingProgramIsNamedForUnprivilegedUsers(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	s.user = "nobody"
	private := t.TempDir()
	os.Chmod(private, 0o700)
	wantStartError(t, s.startErr(filepath.Join(private, "bash")), filepath.Join(private, "bash")+" not found in the sandbox image")

	open := t.TempDir()
	for _, d := range []string{filepath.Dir(open), open} {
		os.Chmod(d, 0o755)
	}
	rootOnly := filepath.Join(open, "root-only")
	os.WriteFile(rootOnly, []byte("#!/bin/sh\n"), 0o700)
	wantStartError(t, s.startErr(rootOnly), "user nobody may not execute "+rootOnly)
}
