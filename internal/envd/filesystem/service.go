// Package filesystem implements envd's filesystem.Filesystem service. Every
// operation runs with the file-system identity of the requesting user, so
// the kernel, not envd, decides what that user may see and change, and new
// files belong to the user. The one exception is making directories
// (MakeDir, and the missing parents of a Move's destination): envd makes
// them itself and gives them to the user, as E2B's agent does.
package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"connectrpc.com/connect"

	pb "cube/internal/envd/gen/filesystem"
	"cube/internal/envd/gen/filesystem/filesystempbconnect"
	"cube/internal/envd/state"
	"cube/internal/envd/users"
)

// Service is the filesystem.Filesystem handler.
type Service struct {
	state *state.State
	log   *slog.Logger

	mu       sync.Mutex
	watchers map[string]*polled
}

var _ filesystempbconnect.FilesystemHandler = (*Service)(nil)

// New returns the service.
func New(st *state.State, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{state: st, log: log, watchers: map[string]*polled{}}
}

// Handler returns the Connect path prefix and handler of the service.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return filesystempbconnect.NewFilesystemHandler(s, opts...)
}

// Close stops every polling watcher.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range s.watchers {
		w.close()
		delete(s.watchers, id)
	}
}

// target resolves the requesting user and the absolute path a request
// names.
func (s *Service) target(h http.Header, p string) (*users.User, string, error) {
	u, err := s.state.UserFromHeader(h)
	if err != nil {
		return nil, "", connect.NewError(connect.CodeUnauthenticated, err)
	}
	abs, err := s.state.Path(u, p)
	if err != nil {
		return nil, "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	return u, abs, nil
}

func (s *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	u, path, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var e *pb.EntryInfo
	if err := u.Do(func() (err error) { e, err = viewOf(req.Header()).entry(path); return err }); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

func (s *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, path, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %s already exists", path))
		}
		return nil, invalid("%s exists and is not a directory", path)
	}
	// Created by envd and given to u, ancestors included, as E2B's agent
	// does: a user may make a directory wherever a missing parent stands.
	if err := u.MakeDirs(path); err != nil {
		return nil, connectError(err)
	}
	e, err := viewOf(req.Header()).entry(path)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

func (s *Service) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	u, src, err := s.target(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := s.state.Path(u, req.Msg.GetDestination())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	// The source is looked at and renamed as u, so u moves only what u
	// may; the destination's missing parents are created by envd for u,
	// as for MakeDir.
	if err := u.Do(func() error { _, err := os.Lstat(src); return err }); err != nil {
		return nil, connectError(err)
	}
	if err := u.MakeDirs(filepath.Dir(dst)); err != nil {
		return nil, connectError(err)
	}
	var e *pb.EntryInfo
	err = u.Do(func() error {
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		e, err = viewOf(req.Header()).entry(dst)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

func (s *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	u, path, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	// A path that is not there is removed already: E2B's agent answers
	// so, and SDK code removes without looking first.
	err = u.Do(func() error { return os.RemoveAll(path) })
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

func (s *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	u, path, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	v := viewOf(req.Header())
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	var entries []*pb.EntryInfo
	err = u.Do(func() error {
		// The listed directory itself may be a link; what is below it is
		// listed without following links, so loops cannot trap the walk.
		root, err := filepath.EvalSymlinks(path)
		if err != nil {
			return err
		}
		fi, err := os.Stat(root)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return invalid("%s is not a directory", path)
		}
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == root {
					return err
				}
				// An unreadable subdirectory is listed but not entered.
				if errors.Is(err, fs.ErrPermission) {
					return nil
				}
				return err
			}
			if p == root {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			level := strings.Count(rel, string(filepath.Separator)) + 1
			if level > depth {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil // vanished while listing
			}
			shown := filepath.Join(path, rel)
			entries = append(entries, v.entryFromInfo(shown, info))
			if d.IsDir() && level == depth {
				return filepath.SkipDir
			}
			return nil
		})
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}
