// Package process implements envd's process.Process service: starting
// commands (with pipes or a pseudo-terminal) as the requested user, streaming
// their output, and letting later requests feed, signal, resize and
// re-attach to them. A started process belongs to the service, not to the
// request that started it, so it outlives the client's connection.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/creack/pty"

	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
	"cube/internal/envd/reap"
	"cube/internal/envd/state"
)

// Service is the process.Process handler.
type Service struct {
	state  *state.State
	reaper *reap.Reaper
	log    *slog.Logger

	mu    sync.Mutex
	procs map[uint32]*proc
}

var _ processpbconnect.ProcessHandler = (*Service)(nil)

// New returns the service. reaper may be nil when envd is not PID 1.
func New(st *state.State, reaper *reap.Reaper, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{state: st, reaper: reaper, log: log, procs: map[uint32]*proc{}}
}

// Handler returns the Connect path prefix and handler of the service.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return processpbconnect.NewProcessHandler(s, opts...)
}

// KillAll ends every process the service started, for shutdown.
func (s *Service) KillAll() {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.signal(syscall.SIGKILL)
	}
}

func (s *Service) find(sel *pb.ProcessSelector) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p, ok := s.procs[v.Pid]; ok {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", v.Pid))
	case *pb.ProcessSelector_Tag:
		for _, p := range s.procs {
			if p.tag != "" && p.tag == v.Tag && !p.exited.Load() {
				return p, nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", v.Tag))
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector needs a pid or a tag"))
	}
}

func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	s.mu.Lock()
	out := &pb.ListResponse{}
	for _, p := range s.procs {
		if p.exited.Load() {
			continue
		}
		info := &pb.ProcessInfo{Config: p.config, Pid: p.pid}
		if p.tag != "" {
			info.Tag = &p.tag
		}
		out.Processes = append(out.Processes, info)
	}
	s.mu.Unlock()
	sort.Slice(out.Processes, func(i, j int) bool { return out.Processes[i].Pid < out.Processes[j].Pid })
	return connect.NewResponse(out), nil
}

func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func writeInput(p *proc, in *pb.ProcessInput) error {
	var b []byte
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		b = v.Stdin
	case *pb.ProcessInput_Pty:
		b = v.Pty
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input needs stdin or pty bytes"))
	}
	if err := p.write(b); err != nil {
		if errors.Is(err, errNoStdin) {
			return connect.NewError(connect.CodeFailedPrecondition, err)
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("write to process %d: %w", p.pid, err))
	}
	return nil
}

func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := s.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input before the start event that selects the process"))
			}
			if err := writeInput(p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (s *Service) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	if err := p.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		if errors.Is(err, errNoStdin) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, err)
		}
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

func (s *Service) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		if p.ptmx == nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process %d has no terminal to resize", p.pid))
		}
		size := req.Msg.GetPty().GetSize()
		if err := pty.Setsize(p.ptmx, &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())}); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("resize terminal of process %d: %w", p.pid, err))
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// keepaliveInterval is how often an idle event stream carries a keepalive:
// the client's Keepalive-Ping-Interval (seconds) when it sends one.
func keepaliveInterval(h http.Header) time.Duration {
	if v, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 50 * time.Second
}
