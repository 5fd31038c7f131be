package gvisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/runtime"
)

// waitConsole polls a sandbox's console until it holds want.
func waitConsole(t *testing.T, sb runtime.Sandbox, want string) []byte {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := sb.Console()
		if err == nil && bytes.Contains(out, []byte(want)) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("console of %s never showed %q (%v); it ends %q", sb.ID(), want, err, out[max(len(out)-200, 0):])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consoleOnDisk is what the console files of a bundle take on disk.
func consoleOnDisk(t *testing.T, bundle string) int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(bundle, "console*"))
	var n int64
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// A sandbox writing 100 MiB to its PID 1's console leaves at most
// ConsoleLimit of it on the host's disk, the newest, and keeps running.
func TestConsoleFloodKeepsOnlyTheNewest(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a, err := f.rt.Boot(c, f.spec("ctflood"))
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, a)
	const line = "0123456789 a line of a console flood 0123456789"
	out, err := a.Exec(c, runtime.AgentMount+"/holder", "flood", "/proc/1/fd/1", "100", line)
	if err != nil || !strings.Contains(string(out), "flooded") {
		t.Fatalf("flood: %v %s", err, out)
	}
	console := waitConsole(t, a, "flood end\n")
	if used := consoleOnDisk(t, filepath.Join(f.rt.cfg.Bundles, "ctflood")); used > ConsoleLimit {
		t.Errorf("the console takes %d bytes on disk, more than the %d allowed", used, ConsoleLimit)
	}
	if len(console) > ConsoleLimit || len(console) < ConsoleLimit/2 {
		t.Errorf("Console returned %d bytes, want the newest, at most %d", len(console), ConsoleLimit)
	}
	// What is returned starts at a whole line, and ends with the newest.
	first, _, _ := strings.Cut(string(console), "\n")
	if first != line || !bytes.HasSuffix(console, []byte(line+"\nflood end\n")) {
		t.Errorf("console starts %q and ends %q", first, console[max(len(console)-100, 0):])
	}
	if got := token(t, a); got != tok {
		t.Fatalf("token after the flood %s, want %s", got, tok)
	}
}

// The console keeps draining across a server restart: output written
// while no keeper runs waits in the FIFO (the sandbox neither blocks on
// a few lines nor dies of a broken pipe), and Attach starts a keeper
// that writes it out.
func TestConsoleKeeperIsReplacedOnAttach(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a, err := f.rt.Boot(c, f.spec("ctkeep"))
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, a)
	bundle := filepath.Join(f.rt.cfg.Bundles, "ctkeep")
	pidText, err := os.ReadFile(filepath.Join(bundle, consoleLock))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatalf("console lock holds %q, want the keeper's PID", pidText)
	}
	// The keeper outlives the process that started it (its own session,
	// not a child that dies with the server); end it as a crash would.
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Fatalf("keeper %d: session %d, %v; want a session of its own", pid, sid, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitKeeper(bundle)

	if out, err := a.Exec(c, runtime.AgentMount+"/holder", "flood", "/proc/1/fd/1", "0", "written while no keeper ran"); err != nil {
		t.Fatalf("console write without a keeper: %v %s", err, out)
	}
	if got := token(t, a); got != tok {
		t.Fatalf("token after a console write without a keeper %s, want %s", got, tok)
	}
	rt2, err := New(f.rt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := rt2.Attach(c, "ctkeep")
	if err != nil {
		t.Fatal(err)
	}
	waitConsole(t, again, "written while no keeper ran\nflood end\n")

	// A keeper that dies while the server runs is replaced too.
	pidText, _ = os.ReadFile(filepath.Join(bundle, consoleLock))
	pid, _ = strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitKeeper(bundle)
	if out, err := a.Exec(c, runtime.AgentMount+"/holder", "flood", "/proc/1/fd/1", "0", "written after the keeper died"); err != nil {
		t.Fatalf("console write without a keeper: %v %s", err, out)
	}
	if err := again.(interface{ KeepConsole() error }).KeepConsole(); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, again, "written after the keeper died\nflood end\n")
	// Attaching again while that keeper runs starts no second one.
	if done, err := startKeeper(bundle, f.rt.keeperBin()); done != nil || err != nil {
		t.Fatalf("a second keeper started beside the first: %v", err)
	}
}
