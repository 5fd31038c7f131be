// Package keeper is the console keeper of one sandbox: a process that
// drains the sandbox's console FIFO into a pair of bounded files, and
// keeps doing so while cube-server restarts. One runs per sandbox, so it
// is kept small: this package imports only the standard library's
// basics, and cmd/cube-console is nothing but it (≈1 MiB of private
// memory, where cube-server re-executed as a keeper holds ≈10 MiB of its
// own data pages).
package keeper

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
)

const (
	// Limit bounds the console output kept on disk per sandbox.
	Limit = 2 << 20
	// Log and Old are the newest output and the half before it.
	Log = "console.log"
	Old = "console.log.1"
	// Env, set to a bundle directory, makes a process that bundle's
	// keeper, with the FIFO open at fd 3 and its lock at fd 4.
	Env = "CUBE_CONSOLE_KEEPER"
)

// Keep is the keeper's main: it copies the FIFO open at fd to the
// bundle's console files until every writer is gone. It never stops
// reading early, since a full FIFO would block the sandbox's writers.
func Keep(dir string, fd int) int {
	syscall.SetNonblock(fd, false)
	in := os.NewFile(uintptr(fd), "console.pipe")
	out := &ringFiles{dir: dir, half: Limit / 2}
	defer out.close()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		out.write(buf[:n])
		if err != nil {
			if err == io.EOF {
				return 0
			}
			return 1
		}
	}
}

// ringFiles keeps the newest 2*half bytes written to it in two files:
// when Log reaches half, it becomes Old (replacing the one
// before) and a new Log starts. A write error (the bundle was
// removed) makes it drop everything from then on.
type ringFiles struct {
	dir    string
	half   int64
	cur    *os.File
	size   int64
	broken bool
}

func (r *ringFiles) write(p []byte) {
	for len(p) > 0 && !r.broken {
		if r.cur == nil || r.size >= r.half {
			if err := r.next(); err != nil {
				r.broken = true
				return
			}
		}
		chunk := p[:min(int64(len(p)), r.half-r.size)]
		n, err := r.cur.Write(chunk)
		r.size += int64(n)
		p = p[n:]
		if err != nil {
			r.broken = true
		}
	}
}

// next opens Log to append to, first turning a full one into
// Old.
func (r *ringFiles) next() error {
	path := filepath.Join(r.dir, Log)
	if r.cur != nil {
		r.cur.Close()
		r.cur = nil
		if err := os.Rename(path, filepath.Join(r.dir, Old)); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.cur, r.size = f, st.Size()
	if r.size >= r.half {
		// Left full by a keeper before this one.
		return r.next()
	}
	return nil
}

func (r *ringFiles) close() {
	if r.cur != nil {
		r.cur.Close()
	}
}
