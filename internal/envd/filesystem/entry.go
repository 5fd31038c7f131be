package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "cube/internal/envd/gen/filesystem"
)

// Entry describes path without following a final symbolic link.
func Entry(path string) (*pb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return entryFromInfo(path, fi), nil
}

func entryFromInfo(path string, fi fs.FileInfo) *pb.EntryInfo {
	e := &pb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = pb.FileType_FILE_TYPE_SYMLINK
		if target, err := filepath.EvalSymlinks(path); err == nil {
			e.SymlinkTarget = &target
		} else if target, err := os.Readlink(path); err == nil {
			// A dangling link still tells where it points.
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(path), target)
			}
			e.SymlinkTarget = &target
		}
	case fi.IsDir():
		e.Type = pb.FileType_FILE_TYPE_DIRECTORY
	default:
		e.Type = pb.FileType_FILE_TYPE_FILE
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = userName(st.Uid)
		e.Group = groupName(st.Gid)
	}
	if e.Type != pb.FileType_FILE_TYPE_SYMLINK {
		if md, err := Metadata(path); err == nil && len(md) > 0 {
			e.Metadata = md
		}
	}
	return e
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return id
}

func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name
	}
	return id
}

// Code is the Connect code that tells a client what went wrong with a file
// operation.
func Code(err error) connect.Code {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.CodeNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return connect.CodePermissionDenied
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.ENAMETOOLONG):
		return connect.CodeInvalidArgument
	case errors.Is(err, fs.ErrExist):
		return connect.CodeAlreadyExists
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EXDEV),
		errors.Is(err, syscall.EBUSY):
		return connect.CodeFailedPrecondition
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return connect.CodeResourceExhausted
	default:
		return connect.CodeInternal
	}
}

// connectError wraps err with the code Code picks, unless it already is a
// Connect error.
func connectError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(Code(err), err)
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}
