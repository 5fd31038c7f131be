package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/creack/pty"

	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/users"
)

func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	u, err := s.state.UserFromHeader(req.Header())
	if err != nil {
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	p, sub, err := s.start(u, req.Msg)
	if err != nil {
		return err
	}
	// Connect-Timeout-Ms bounds the life of the process, not only of this
	// stream: a client that disconnects early leaves the process running
	// (to be re-attached), but the deadline still ends it.
	if dl, ok := ctx.Deadline(); ok {
		t := time.AfterFunc(time.Until(dl), func() { p.signal(syscall.SIGKILL) })
		go func() { <-p.done; t.Stop() }()
	}
	return s.follow(ctx, p, sub, keepaliveInterval(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.subscribe()
	return s.follow(ctx, p, sub, keepaliveInterval(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// follow streams a process's events to one client: start first, then output
// as it comes, keepalives while it is quiet, and end last.
func (s *Service) follow(ctx context.Context, p *proc, sub *subscriber, keepalive time.Duration, send func(*pb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	ticker := time.NewTicker(keepalive)
	defer ticker.Stop()
	for {
		for _, ev := range sub.take() {
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil {
				return nil
			}
		}
		select {
		case <-sub.wake:
		case <-ticker.C:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("process %d: the request's timeout elapsed", p.pid))
			}
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

// start launches the process described by req as u and registers it. The
// returned subscriber was attached before any output could be produced.
func (s *Service) start(u *users.User, req *pb.StartRequest) (*proc, *subscriber, error) {
	cfg := req.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd, err := s.cwd(u, cfg.GetCwd())
	if err != nil {
		return nil, nil, err
	}
	if req.Tag != nil && req.GetTag() != "" {
		if _, err := s.find(&pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: req.GetTag()}}); err == nil {
			return nil, nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a process tagged %q is already running", req.GetTag()))
		}
	}

	layers := []map[string]string{s.state.Env(), u.Env(), cfg.GetEnvs()}
	if req.Pty != nil {
		layers = append([]map[string]string{{"TERM": "xterm-256color"}}, layers...)
	}
	env := environ(layers...)
	path, err := lookPath(cfg.GetCmd(), lookupEnv(env, "PATH"))
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	cmd := &exec.Cmd{
		Path: path,
		Args: append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env:  env,
		Dir:  cwd,
		SysProcAttr: &syscall.SysProcAttr{
			Credential: u.Credential(),
		},
	}

	p := &proc{
		tag:    req.GetTag(),
		config: cfg,
		subs:   map[*subscriber]struct{}{},
		done:   make(chan struct{}),
	}
	var outputs []*output
	var childEnds []*os.File // closed in envd once the child holds them
	cleanup := func() {
		for _, f := range childEnds {
			f.Close()
		}
		for _, o := range outputs {
			o.f.Close()
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
	}

	if req.Pty != nil {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("open terminal: %w", err))
		}
		size := req.GetPty().GetSize()
		if size.GetCols() > 0 && size.GetRows() > 0 {
			pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())})
		}
		u.Chown(tty.Name()) // programs such as sudo insist on owning their terminal
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
		cmd.SysProcAttr.Ctty = 0
		childEnds = append(childEnds, tty)
		p.isPTY, p.ptmx, p.stdin = true, ptmx, ptmx
		outputs = append(outputs, &output{kind: "pty", f: ptmx, done: make(chan struct{})})
	} else {
		cmd.SysProcAttr.Setpgid = true
		for _, kind := range []string{"stdout", "stderr"} {
			r, w, err := os.Pipe()
			if err != nil {
				cleanup()
				return nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("pipe: %w", err))
			}
			childEnds = append(childEnds, w)
			outputs = append(outputs, &output{kind: kind, f: r, done: make(chan struct{})})
		}
		cmd.Stdout, cmd.Stderr = childEnds[0], childEnds[1]
		if req.Stdin == nil || req.GetStdin() {
			r, w, err := os.Pipe()
			if err != nil {
				cleanup()
				return nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("pipe: %w", err))
			}
			childEnds = append(childEnds, r)
			cmd.Stdin = r
			p.stdin = w
		}
	}

	sub := &subscriber{wake: make(chan struct{}, 1)}
	p.subs[sub] = struct{}{}

	child, err := s.reaper.Start(cmd)
	for _, f := range childEnds {
		f.Close()
	}
	childEnds = nil
	if err != nil {
		cleanup()
		code := connect.CodeInternal
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) {
			code = connect.CodeInvalidArgument
		}
		return nil, nil, connect.NewError(code, startError(cfg.GetCmd(), path, cwd, u, err))
	}
	p.child = child
	p.pid = uint32(child.Pid())

	s.mu.Lock()
	s.procs[p.pid] = p
	s.mu.Unlock()
	// The control plane reads these two records into the sandbox's logs.
	s.log.Info("process started", "pid", p.pid, "cmd", cfg.GetCmd(), "user", u.Name, "pty", p.isPTY)

	for _, o := range outputs {
		go p.read(o)
	}
	go p.wait(outputs, func() {
		// A process started later may already have the same pid.
		s.mu.Lock()
		if s.procs[p.pid] == p {
			delete(s.procs, p.pid)
		}
		s.mu.Unlock()
		end := p.end.GetEnd()
		s.log.Info("process exited", "pid", p.pid, "cmd", cfg.GetCmd(), "exit_code", end.GetExitCode(), "status", end.GetStatus())
	})
	return p, sub, nil
}

// startError explains why the program at path could not be started as u.
// The kernel answers ENOENT or EACCES for several causes, and the plain
// "fork/exec /bin/bash: permission denied" of a directory u may not search
// hides that the program is simply missing; envd looks for itself.
func startError(cmd, path, cwd string, u *users.User, err error) error {
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("start %s: %w", cmd, err)
	}
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(cwd, abs)
	}
	if _, statErr := os.Stat(abs); errors.Is(statErr, fs.ErrNotExist) {
		return fmt.Errorf("start %s: %s not found in the sandbox image; install it in the template or run a program the image has: %w", cmd, abs, fs.ErrNotExist)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("start %s: %s exists, but the interpreter on its #! line or its dynamic loader is missing from the sandbox image: %w", cmd, abs, err)
	}
	return fmt.Errorf("start %s: user %s may not execute %s (or search a directory on its way): %w", cmd, u.Name, abs, err)
}

// cwd resolves the working directory a request names for u as paths are
// resolved everywhere (state.Path): none means the default workdir, else
// u's home; a relative one starts at u's home. It must be an existing
// directory; the wording of the error is E2B's agent's.
func (s *Service) cwd(u *users.User, requested string) (string, error) {
	cwd, err := s.state.Path(u, requested)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	st, err := os.Stat(cwd)
	switch {
	case err != nil:
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist", cwd))
	case !st.IsDir():
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' is not a directory", cwd))
	}
	return cwd, nil
}
