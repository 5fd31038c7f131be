package filesystem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "cube/internal/envd/gen/filesystem"
	"cube/internal/envd/users"
)

// maxPolledEvents bounds what a polling watcher keeps between polls; older
// events are dropped first.
const maxPolledEvents = 10000

// startWatch validates the request and starts a watcher as u.
func (s *Service) startWatch(u *users.User, v view, path string, recursive, includeEntry, allowNetwork bool, emit func(*pb.FilesystemEvent)) (*inotifyWatcher, error) {
	var w *inotifyWatcher
	err := u.Do(func() error {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return invalid("%s is not a directory", path)
		}
		if !allowNetwork && onNetworkMount(path) {
			// inotify sees only changes made through this kernel; on a
			// network mount that silently misses most of them.
			return connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("%s is on a network mount, where changes made elsewhere are not seen; allow network mounts to watch it anyway", path))
		}
		// inotify checks only read access of the watched inode; listing
		// proves the user may see what the events would reveal.
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = f.Readdirnames(1)
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		w, err = watch(path, recursive, func(c change) {
			ev := &pb.FilesystemEvent{Name: c.name, Type: c.typ}
			if includeEntry && c.typ != pb.EventType_EVENT_TYPE_REMOVE && c.typ != pb.EventType_EVENT_TYPE_RENAME {
				if e, err := v.entry(c.path); err == nil {
					ev.Entry = e
				}
			}
			emit(ev)
		})
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return w, nil
}

func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	u, path, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		queue []*pb.FilesystemEvent
		wake  = make(chan struct{}, 1)
	)
	w, err := s.startWatch(u, viewOf(req.Header()), path, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts(), func(ev *pb.FilesystemEvent) {
		mu.Lock()
		queue = append(queue, ev)
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer w.close()
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	ticker := time.NewTicker(keepaliveInterval(req.Header().Get("Keepalive-Ping-Interval")))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("watching %s: the request's timeout elapsed", path))
			}
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		case <-ticker.C:
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-wake:
			mu.Lock()
			evs := queue
			queue = nil
			mu.Unlock()
			for _, ev := range evs {
				if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
			}
		}
	}
}

func keepaliveInterval(v string) time.Duration {
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 50 * time.Second
}

// polled is a watcher whose events wait for GetWatcherEvents.
type polled struct {
	w      *inotifyWatcher
	mu     sync.Mutex
	events []*pb.FilesystemEvent
}

func (p *polled) add(ev *pb.FilesystemEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.events) >= maxPolledEvents {
		p.events = p.events[1:]
	}
	p.events = append(p.events, ev)
}

func (p *polled) take() []*pb.FilesystemEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := p.events
	p.events = nil
	return evs
}

func (p *polled) close() { p.w.close() }

func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	u, path, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	p := &polled{}
	w, err := s.startWatch(u, viewOf(req.Header()), path, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts(), p.add)
	if err != nil {
		return nil, err
	}
	p.w = w
	// Ids come from the kernel's generator on every call, so sandboxes
	// cloned from one snapshot never hand out the same ids.
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.watchers[id] = p
	s.mu.Unlock()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *Service) polledWatcher(id string) (*polled, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.watchers[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return p, nil
}

func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	p, err := s.polledWatcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: p.take()}), nil
}

func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	p, err := s.polledWatcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.watchers, req.Msg.GetWatcherId())
	s.mu.Unlock()
	p.close()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}

// onNetworkMount reports whether path lies on NFS, SMB/CIFS or FUSE.
func onNetworkMount(path string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return false
	}
	switch uint32(st.Type) {
	case 0x6969, 0xFF534D42, 0x517B, 0xFE534D42, 0x65735546:
		return true
	}
	return false
}
