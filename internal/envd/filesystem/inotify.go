package filesystem

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"unsafe"

	pb "cube/internal/envd/gen/filesystem"
)

const watchMask = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_ATTRIB | syscall.IN_DELETE |
	syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DONT_FOLLOW | syscall.IN_ONLYDIR

// change is one event, named relative to the watched directory.
type change struct {
	name string
	path string
	typ  pb.EventType
}

// inotifyWatcher reports changes below one directory through inotify. A
// recursive watcher also watches every directory that appears below it.
type inotifyWatcher struct {
	f         *os.File
	root      string
	recursive bool

	mu  sync.Mutex
	wds map[int32]string // watch descriptor → directory
}

// watch starts watching root; emit receives changes in the order the kernel
// reports them until close is called.
func watch(root string, recursive bool, emit func(change)) (*inotifyWatcher, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &inotifyWatcher{f: os.NewFile(uintptr(fd), "inotify"), root: root, recursive: recursive, wds: map[int32]string{}}
	if err := w.add(root); err != nil {
		w.f.Close()
		return nil, err
	}
	if recursive {
		w.addTree(root)
	}
	go w.run(emit)
	return w, nil
}

func (w *inotifyWatcher) close() { w.f.Close() }

func (w *inotifyWatcher) add(dir string) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var wd int
	var aerr error
	rc.Control(func(fd uintptr) { wd, aerr = syscall.InotifyAddWatch(int(fd), dir, watchMask) })
	if aerr != nil {
		return &fs.PathError{Op: "watch", Path: dir, Err: aerr}
	}
	w.mu.Lock()
	w.wds[int32(wd)] = dir
	w.mu.Unlock()
	return nil
}

// addTree watches every directory below dir. Directories that cannot be
// read are skipped: their changes are simply not seen.
func (w *inotifyWatcher) addTree(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() && p != dir {
			w.add(p)
		}
		return nil
	})
}

func (w *inotifyWatcher) run(emit func(change)) {
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // closed
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			name := string(trimNUL(nameBytes))
			w.handle(ev.Wd, ev.Mask, name, emit)
		}
	}
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func (w *inotifyWatcher) handle(wd int32, mask uint32, name string, emit func(change)) {
	w.mu.Lock()
	dir, ok := w.wds[wd]
	if mask&syscall.IN_IGNORED != 0 {
		delete(w.wds, wd)
	}
	w.mu.Unlock()
	if !ok || name == "" {
		return
	}
	path := filepath.Join(dir, name)
	rel, err := filepath.Rel(w.root, path)
	if err != nil {
		return
	}
	isDir := mask&syscall.IN_ISDIR != 0
	if w.recursive && isDir && mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0 {
		w.add(path)
		w.addTree(path)
	}
	var typ pb.EventType
	switch {
	case mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0:
		typ = pb.EventType_EVENT_TYPE_CREATE
	case mask&syscall.IN_MODIFY != 0:
		typ = pb.EventType_EVENT_TYPE_WRITE
	case mask&syscall.IN_DELETE != 0:
		typ = pb.EventType_EVENT_TYPE_REMOVE
	case mask&syscall.IN_MOVED_FROM != 0:
		typ = pb.EventType_EVENT_TYPE_RENAME
	case mask&syscall.IN_ATTRIB != 0:
		typ = pb.EventType_EVENT_TYPE_CHMOD
	default:
		return
	}
	emit(change{name: rel, path: path, typ: typ})
}
