package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "cube/internal/envd/gen/filesystem"
)

// view is how entries are described to one client, which depends on what
// its SDK can decode.
type view struct {
	// symlinkType: the client reads FILE_TYPE_SYMLINK. E2B's SDKs learnt
	// it in e2b 2.36.0 (JS) and 2.35.0 (Python); older ones fail to decode
	// a whole answer holding it ("Invalid enum value FILE_TYPE_SYMLINK"),
	// so a listing of any directory with a link in it failed for them.
	symlinkType bool
}

// symlinkTypeSince is the first release of each SDK that reads
// FILE_TYPE_SYMLINK, by the name its User-Agent starts with.
var symlinkTypeSince = map[string][3]int{
	"e2b-js-sdk":     {2, 36, 0},
	"e2b-python-sdk": {2, 35, 0},
}

// viewOf picks the view for the client that sent h, from the SDK name and
// version E2B's SDKs put first in User-Agent on every envd call
// ("e2b-js-sdk/2.51.0 e2b-code-interpreter/2.8.0", "e2b-python-sdk/2.35.0").
// Any other client gets the description every SDK release decodes.
func viewOf(h http.Header) view {
	fields := strings.Fields(h.Get("User-Agent"))
	if len(fields) == 0 {
		return view{}
	}
	name, ver, ok := strings.Cut(fields[0], "/")
	since, known := symlinkTypeSince[name]
	return view{symlinkType: ok && known && versionAtLeast(ver, since)}
}

// versionAtLeast compares a version's major.minor.patch (anything after a
// "-" or "+" ignored) with min; a version it cannot read is not.
func versionAtLeast(v string, min [3]int) bool {
	v, _, _ = strings.Cut(v, "-")
	v, _, _ = strings.Cut(v, "+")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		if n != min[i] {
			return n > min[i]
		}
	}
	return true
}

// entry describes path without following a final symbolic link.
func (v view) entry(path string) (*pb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return v.entryFromInfo(path, fi), nil
}

// entryFromInfo describes path, whose Lstat is fi. A symbolic link is
// described as E2B's agent does, by what it points at: a link to a file is
// a file and one to a directory a directory, with the target's permission
// bits and the resolved target in symlink_target, which every SDK release
// reads. A link that points at nothing (or into a loop) has no such type:
// it is FILE_TYPE_SYMLINK to a client that reads that, and
// FILE_TYPE_UNSPECIFIED (which SDKs leave out of listings) to others.
func (v view) entryFromInfo(path string, fi fs.FileInfo) *pb.EntryInfo {
	e := &pb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	link := fi.Mode()&fs.ModeSymlink != 0
	switch {
	case link:
		if target, err := filepath.EvalSymlinks(path); err == nil {
			e.SymlinkTarget = &target
		} else if target, err := os.Readlink(path); err == nil {
			// A dangling link still tells where it points.
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(path), target)
			}
			e.SymlinkTarget = &target
		}
		switch to, err := os.Stat(path); {
		case err == nil:
			e.Mode = uint32(to.Mode().Perm())
			e.Type = fileType(to)
		case v.symlinkType:
			e.Type = pb.FileType_FILE_TYPE_SYMLINK
		default:
			e.Type = pb.FileType_FILE_TYPE_UNSPECIFIED
		}
	default:
		e.Type = fileType(fi)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = userName(st.Uid)
		e.Group = groupName(st.Gid)
	}
	if !link {
		if md, err := Metadata(path); err == nil && len(md) > 0 {
			e.Metadata = md
		}
	}
	return e
}

func fileType(fi fs.FileInfo) pb.FileType {
	if fi.IsDir() {
		return pb.FileType_FILE_TYPE_DIRECTORY
	}
	return pb.FileType_FILE_TYPE_FILE
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
