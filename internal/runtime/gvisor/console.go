package gvisor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"cube/internal/runtime/gvisor/keeper"

	"golang.org/x/sys/unix"
)

// A sandbox's PID 1 writes its stdout and stderr (and runsc its own
// messages) for as long as it runs, at whatever rate it likes, so what
// reaches the host's disk is bounded: the console is a FIFO in the bundle,
// drained by a console keeper that keeps only the newest ConsoleLimit
// bytes, as a pair of files of half that each (consoleLog, and
// consoleOld before it).
//
// The keeper is a process of its own (cube-console, see package keeper;
// or this binary again, see init), so
// the console keeps draining while the server restarts; the sandbox's
// runsc processes hold the FIFO open for reading and writing, so a
// sandbox never sees a broken pipe (SIGPIPE would kill its PID 1), even
// without a keeper. Output then waits in the pipe (consolePipeSize) and a
// writer blocks once it is full, until Attach, when the server adopts the
// sandbox again, starts a new keeper. The keeper ends by itself when the
// sandbox's last process does.
const (
	// ConsoleLimit bounds the console output kept on disk per sandbox.
	ConsoleLimit = keeper.Limit

	consoleFIFO = "console.pipe"
	consoleLog  = keeper.Log
	consoleOld  = keeper.Old
	// consoleLock is held (flock) by the sandbox's keeper while it runs,
	// and holds its PID.
	consoleLock = "console.lock"
	// consolePipeSize is what the FIFO buffers while no keeper runs.
	consolePipeSize = 1 << 20
	// keeperEnv, set to a bundle directory, makes this binary that
	// bundle's console keeper instead of what it normally is.
	keeperEnv = keeper.Env
	// keeperExitWait bounds the wait for a keeper to finish after the
	// sandbox's processes are gone.
	keeperExitWait = 5 * time.Second
)

// init makes any binary that links this package a console keeper when
// started as one: the fallback when no cube-console binary is installed
// (Config.Keeper), and how tests run keepers.
func init() {
	if dir := os.Getenv(keeperEnv); dir != "" {
		os.Exit(keeper.Keep(dir, 3))
	}
}

// console is a sandbox's console as start sets it up: the end runsc
// writes to, while a keeper drains it.
type console struct {
	w *os.File // the FIFO, read-write: give it to runsc
}

// consoleWriter opens another writer of the console FIFO in dir, for a
// runsc command on container id that follows the one openConsole served.
func consoleWriter(dir, id string) (*os.File, error) {
	w, err := os.OpenFile(filepath.Join(dir, consoleFIFO), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("console of %s: %w", id, err)
	}
	return w, nil
}

// openConsole makes the console FIFO of bundle dir and starts its keeper.
func openConsole(dir, bin string) (*console, error) {
	fifo := filepath.Join(dir, consoleFIFO)
	// A keeper of an earlier container of this ID that is still going
	// keeps its own FIFO and lock: these names are for the new one.
	os.Remove(fifo)
	os.Remove(filepath.Join(dir, consoleLock))
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("console fifo %s: %w (the bundles directory must be on a local filesystem that supports FIFOs)", fifo, err)
	}
	// O_RDWR: the FIFO always has a reader, so writes never fail with
	// EPIPE, whether or not a keeper runs.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("console fifo: %w", err)
	}
	unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, consolePipeSize)
	done, err := startKeeper(dir, bin)
	if err == nil && done == nil {
		err = errors.New("console lock taken")
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	return &console{w: w}, nil
}

// startKeeper starts the console keeper of bundle dir unless one runs
// already (done nil then). done is closed when the keeper exits.
func startKeeper(dir, bin string) (done chan struct{}, err error) {
	lock, err := os.OpenFile(filepath.Join(dir, consoleLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("console lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("console lock: %w", err)
	}
	// Non-blocking, so the open does not wait for a writer; the keeper
	// reads it blocking.
	r, err := os.OpenFile(filepath.Join(dir, consoleFIFO), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("console fifo: %w", err)
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path: bin,
		Args: []string{"cube-console-keeper", filepath.Base(dir)},
		Env:  []string{keeperEnv + "=" + dir, "GOMAXPROCS=1"},
		// fd 3 the FIFO, fd 4 the lock, which the keeper holds from now
		// on (a flock belongs to the open file, which it shares).
		ExtraFiles: []*os.File{r, lock},
		// Its own session: signals to the server's process group (^C)
		// leave it, and with it the console, alone.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start console keeper: %w", err)
	}
	lock.Truncate(0)
	lock.WriteAt([]byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0)
	done = make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return done, nil
}

// adoptConsole starts a keeper for a running sandbox whose keeper is gone
// (the server restarted and something ended it). A bundle without a
// console FIFO has nothing to drain.
func adoptConsole(dir, bin string) error {
	if _, err := os.Stat(filepath.Join(dir, consoleFIFO)); err != nil {
		return nil
	}
	_, err := startKeeper(dir, bin)
	return err
}

// waitKeeper waits, up to keeperExitWait, until no keeper holds the
// console of bundle dir: after the sandbox is deleted, so its bundle can
// be removed without the keeper writing into it meanwhile.
func waitKeeper(dir string) {
	lock, err := os.Open(filepath.Join(dir, consoleLock))
	if err != nil {
		return
	}
	defer lock.Close()
	deadline := time.Now().Add(keeperExitWait)
	for unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// readConsole returns the newest console output of bundle dir, at most
// ConsoleLimit bytes; when older output was dropped, it starts at a line.
func readConsole(dir string) ([]byte, error) {
	cur, err := readTail(filepath.Join(dir, consoleLog), ConsoleLimit)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	old, err := readTail(filepath.Join(dir, consoleOld), ConsoleLimit-int64(len(cur)))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	out := append(old, cur...)
	if len(old) > 0 {
		// consoleOld was cut: its first line may be partial.
		if i := bytes.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}
	return out, nil
}

// readTail reads at most n bytes from the end of a file.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(st.Size()-max(n, 0), 0)
	buf := make([]byte, st.Size()-off)
	k, err := f.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return buf[:k], nil
}

// KeepConsole starts a new keeper for the sandbox's console if its keeper
// has died (killed by hand, by the host for memory, or with the server's
// cgroup on a restart): without one, the sandbox's console writes block
// once the FIFO is full. The node calls it periodically.
func (s *sandbox) KeepConsole() error {
	return adoptConsole(filepath.Join(s.r.cfg.Bundles, s.id), s.r.keeperBin())
}
