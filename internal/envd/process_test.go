package envd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
)

func TestStartStreamsStartDataEnd(t *testing.T) {
	s := newSandbox(t)
	for name, client := range map[string]processpbconnect.ProcessClient{"proto": s.proc, "json": s.procJS} {
		t.Run(name, func(t *testing.T) {
			r := s.run(client, shell("echo out; echo err >&2; exit 3"))
			if r.err != nil {
				t.Fatal(r.err)
			}
			if len(r.events) < 2 || r.events[0].GetStart() == nil || r.events[0].GetStart().GetPid() == 0 {
				t.Fatalf("first event is not start with a pid: %v", r.events)
			}
			if r.events[len(r.events)-1].GetEnd() == nil {
				t.Fatalf("last event is not end: %v", r.events)
			}
			if r.stdout != "out\n" || r.stderr != "err\n" {
				t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
			}
			if r.end.GetExitCode() != 3 || !r.end.GetExited() || r.end.GetStatus() != "exit status 3" {
				t.Fatalf("end = %v", r.end)
			}
			// The error text is what the SDKs show as CommandExitError's message.
			if r.end.Error == nil || r.end.GetError() != "exit status 3" {
				t.Fatalf("end error = %q, want exit status 3", r.end.GetError())
			}
		})
	}
}

func TestLargeOutputArrivesCompleteBeforeEnd(t *testing.T) {
	s := newSandbox(t)
	// 4 MiB, far more than a pipe buffers.
	r := s.run(s.procJS, shell("head -c 4194304 /dev/zero | tr '\\0' x"))
	if r.err != nil || r.end == nil {
		t.Fatal(r.err)
	}
	if len(r.stdout) != 4<<20 || strings.Trim(r.stdout, "x") != "" {
		t.Fatalf("got %d bytes of stdout", len(r.stdout))
	}
}

func TestOutputOfLeftBehindJobDoesNotHoldTheEnd(t *testing.T) {
	s := newSandbox(t)
	// The background sleep keeps stdout open; the stream must end anyway
	// with everything the shell printed.
	r := s.run(s.proc, shell("echo before; sleep 5 & echo after"))
	if r.err != nil || r.end == nil {
		t.Fatal(r.err, r.end)
	}
	if r.stdout != "before\nafter\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
}

func TestEnvironmentLayers(t *testing.T) {
	s := newSandbox(t)
	if st := s.init(map[string]any{"envVars": map[string]string{"A": "init", "B": "init"}}, ""); st != 204 {
		t.Fatalf("init: %d", st)
	}
	req := shell(`echo "$CUBE_TEMPLATE_VAR $A $B"; pwd`)
	req.Process.Envs = map[string]string{"B": "call"}
	r := s.run(s.proc, req)
	if want := "from-template init call\n" + s.dir + "\n"; r.stdout != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	cwd := "/"
	req = shell("pwd")
	req.Process.Cwd = &cwd
	if r := s.run(s.proc, req); r.stdout != "/\n" {
		t.Fatalf("cwd: %q", r.stdout)
	}
}

func TestStdinAndCloseStdin(t *testing.T) {
	s := newSandbox(t)
	yes := true
	ctx := s.ctx()
	stream, err := s.procJS.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Stdin: &yes}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	for _, chunk := range []string{"hello ", "world\n"} {
		if _, err := s.proc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(chunk)}}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.proc.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	r := collect(stream)
	if r.stdout != "hello world\n" || r.end.GetExitCode() != 0 || r.end.Error != nil {
		t.Fatalf("stdout %q end %v err %v", r.stdout, r.end, r.err)
	}
}

func TestStdinOffReadsEOF(t *testing.T) {
	s := newSandbox(t)
	no := false
	req := shell(`read x; echo "got:$x"`)
	req.Stdin = &no
	r := s.run(s.proc, req)
	if r.stdout != "got:\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
}

func TestPTYInteractiveBash(t *testing.T) {
	s := newSandbox(t)
	ctx := s.ctx()
	stream, err := s.procJS.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--norc", "--noprofile", "-i"}, Envs: map[string]string{"PS1": "$ "}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	var out strings.Builder
	send := func(line string) {
		t.Helper()
		if _, err := s.proc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(line)}}})); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			if !stream.Receive() {
				t.Fatalf("stream ended before %q appeared: %v\n%s", want, stream.Err(), out.String())
			}
			out.WriteString(string(stream.Msg().GetEvent().GetData().GetPty()))
		}
	}
	send("echo $((6*7))-$TERM; tty\n")
	waitFor("42-xterm-256color")
	waitFor("/dev/pts/")
	if _, err := s.proc.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 101, Rows: 33}}})); err != nil {
		t.Fatal(err)
	}
	send("stty size\n")
	waitFor("33 101")
	send("exit 5\n")
	r := collect(stream)
	if r.end == nil || r.end.GetExitCode() != 5 {
		t.Fatalf("end %v err %v", r.end, r.err)
	}
}

// startAndDetach starts req and returns its pid with the stream still open.
func startStream(t *testing.T, ctx context.Context, client processpbconnect.ProcessClient, req *pb.StartRequest) (*connect.ServerStreamForClient[pb.StartResponse], uint32) {
	t.Helper()
	stream, err := client.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	return stream, stream.Msg().GetEvent().GetStart().GetPid()
}

func TestSignals(t *testing.T) {
	s := newSandbox(t)
	for _, tc := range []struct {
		sig    pb.Signal
		status string
	}{{pb.Signal_SIGNAL_SIGKILL, "signal: killed"}, {pb.Signal_SIGNAL_SIGTERM, "signal: terminated"}} {
		stream, pid := startStream(t, s.ctx(), s.proc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}})
		sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
		if _, err := s.proc.SendSignal(s.ctx(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: tc.sig})); err != nil {
			t.Fatal(err)
		}
		r := collect(stream)
		stream.Close()
		if r.end == nil || r.end.GetExited() || r.end.GetStatus() != tc.status || r.end.GetExitCode() != -1 || r.end.GetError() != tc.status {
			t.Fatalf("%v: end %v err %v", tc.sig, r.end, r.err)
		}
	}
	_, err := s.proc.SendSignal(s.ctx(), connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 1 << 30}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = s.proc.SendSignal(s.ctx(), connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{}}))
	wantCode(t, err, connect.CodeInvalidArgument)
}

func listed(t *testing.T, s *sandbox) map[uint32]*pb.ProcessInfo {
	t.Helper()
	res, err := s.proc.List(s.ctx(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]*pb.ProcessInfo{}
	for _, p := range res.Msg.GetProcesses() {
		out[p.GetPid()] = p
	}
	return out
}

func TestConnectTimeoutIsTheProcessLifetime(t *testing.T) {
	s := newSandbox(t)
	s.headers = map[string][]string{"Connect-Timeout-Ms": {"300"}}
	stream, pid := startStream(t, context.Background(), s.proc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}})
	r := collect(stream)
	stream.Close()
	s.headers = nil
	if r.err != nil {
		wantCode(t, r.err, connect.CodeDeadlineExceeded)
	} else if r.end == nil || r.end.GetStatus() != "signal: killed" {
		t.Fatalf("stream ended without error and with %v", r.end)
	}
	eventually(t, "the timed-out process to be gone", func() bool { return listed(t, s)[pid] == nil })
}

func TestBackgroundProcessSurvivesDisconnectAndReattaches(t *testing.T) {
	s := newSandbox(t)
	yes, tag := true, "worker"
	ctx, cancel := context.WithCancel(context.Background())
	stream, pid := startStream(t, ctx, s.procJS, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `while read line; do echo "got $line"; done`}},
		Tag:     &tag,
		Stdin:   &yes,
	})
	cancel() // the client goes away
	stream.Close()

	info := listed(t, s)[pid]
	if info == nil || info.GetTag() != tag || info.GetConfig().GetCmd() != "/bin/bash" {
		t.Fatalf("List after disconnect: %v", info)
	}
	for _, sel := range []*pb.ProcessSelector{
		{Selector: &pb.ProcessSelector_Tag{Tag: tag}},
		{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
	} {
		conn, err := s.procJS.Connect(s.ctx(), connect.NewRequest(&pb.ConnectRequest{Process: sel}))
		if err != nil {
			t.Fatal(err)
		}
		if !conn.Receive() || conn.Msg().GetEvent().GetStart().GetPid() != pid {
			t.Fatalf("connect: first event %v, err %v", conn.Msg().GetEvent(), conn.Err())
		}
		word := fmt.Sprintf("w%d", time.Now().UnixNano())
		if _, err := s.proc.SendInput(s.ctx(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(word + "\n")}}})); err != nil {
			t.Fatal(err)
		}
		var out string
		for !strings.Contains(out, "got "+word) {
			if !conn.Receive() {
				t.Fatalf("connect stream ended: %v", conn.Err())
			}
			out += string(conn.Msg().GetEvent().GetData().GetStdout())
		}
		conn.Close()
	}
	conn, err := s.proc.Connect(s.ctx(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.proc.CloseStdin(s.ctx(), connect.NewRequest(&pb.CloseStdinRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}})); err != nil {
		t.Fatal(err)
	}
	r := collect(conn)
	conn.Close()
	if r.end == nil || r.end.GetExitCode() != 0 || r.events[0].GetStart() == nil {
		t.Fatalf("reattached stream: end %v err %v", r.end, r.err)
	}
	_, err = s.proc.Connect(s.ctx(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "nobody-has-this"}}}))
	if err == nil {
		c, _ := s.proc.Connect(s.ctx(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "nobody-has-this"}}}))
		c.Receive()
		err = c.Err()
	}
	wantCode(t, err, connect.CodeNotFound)
}

func TestKeepalivesOnQuietStreams(t *testing.T) {
	s := newSandbox(t)
	s.headers = map[string][]string{"Keepalive-Ping-Interval": {"1"}}
	yes := true
	stream, pid := startStream(t, s.ctx(), s.proc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Stdin: &yes})
	defer stream.Close()
	for stream.Receive() {
		if stream.Msg().GetEvent().GetKeepalive() != nil {
			break
		}
	}
	if _, err := s.proc.CloseStdin(s.ctx(), connect.NewRequest(&pb.CloseStdinRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}})); err != nil {
		t.Fatal(err)
	}
	if r := collect(stream); r.end == nil {
		t.Fatalf("no end after keepalive: %v", r.err)
	}
}

func TestStartRejectsBadRequests(t *testing.T) {
	s := newSandbox(t)
	missing := "/no/such/dir"
	for name, req := range map[string]*pb.StartRequest{
		"no command":      {Process: &pb.ProcessConfig{}},
		"unknown command": {Process: &pb.ProcessConfig{Cmd: "no-such-command-in-cube"}},
		"missing cwd":     {Process: &pb.ProcessConfig{Cmd: "true", Cwd: &missing}},
	} {
		stream, err := s.proc.Start(s.ctx(), connect.NewRequest(req))
		if err == nil {
			stream.Receive()
			err = stream.Err()
			stream.Close()
		}
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}

func TestStreamInput(t *testing.T) {
	s := newSandbox(t)
	yes := true
	stream, pid := startStream(t, s.ctx(), s.proc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "head", Args: []string{"-n1"}}, Stdin: &yes})
	defer stream.Close()
	in := s.proc.StreamInput(s.ctx())
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}})
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("streamed\n")}}}}})
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	if r := collect(stream); r.stdout != "streamed\n" {
		t.Fatalf("stdout %q err %v", r.stdout, r.err)
	}
}

func TestProcessRunsAsChosenUser(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	s.user = "nobody"
	root := "/"
	req := shell("id -un; echo $HOME")
	req.Process.Cwd = &root
	r := s.run(s.proc, req)
	if !strings.HasPrefix(r.stdout, "nobody\n") {
		t.Fatalf("ran as %q (err %v)", r.stdout, r.err)
	}
	s.user = "no-such-user-in-cube"
	stream, err := s.proc.Start(s.ctx(), connect.NewRequest(shell("true")))
	if err == nil {
		stream.Receive()
		err = stream.Err()
	}
	wantCode(t, err, connect.CodeUnauthenticated)
}
