package node_test

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/node"
	"cube/internal/nodetest"
	"cube/internal/runtime/gvisor"
)

// prober runs the holder test program inside a sandbox.
func (f *fixture) prober(t *testing.T, sb *cube.Sandbox, args ...string) nodetest.Result {
	t.Helper()
	target, err := f.Resolve(ctx(t), sb.ID, protocol.EnvdPort)
	if err != nil {
		t.Fatal(err)
	}
	return nodetest.Run(t, target.Addr, sb.EnvdAccessToken, "/holder", args...)
}

// hostIP is the host's own address on its default route.
func hostIP(t *testing.T) string {
	c, err := net.Dial("udp", "192.0.2.1:9")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// TestEscapeSuite tries, from inside a real sandbox, the doors a hostile
// program would: the host's processes, files and services, another
// sandbox, the cloud metadata address, and the shared rootfs.
func TestEscapeSuite(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "tiny", 5*time.Minute)
	b := f.create(t, "tiny", 5*time.Minute)

	// Host processes are invisible: nothing in the sandbox's /proc is this
	// test binary.
	procs := f.prober(t, a, "ls", "/proc")
	self := filepath.Base(os.Args[0])
	for _, p := range strings.Fields(procs.Stdout) {
		if p[0] < '0' || p[0] > '9' {
			continue
		}
		if r := f.prober(t, a, "cat", "/proc/"+p+"/cmdline"); strings.Contains(r.Stdout, self) {
			t.Fatalf("host process %s visible in the sandbox: %q", p, r.Stdout)
		}
	}

	// Host files are unreadable.
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o644)
	for _, path := range []string{secret, "/etc/shadow", "/proc/1/root/etc/hostname"} {
		if r := f.prober(t, a, "cat", path); strings.Contains(r.Stdout, "host secret") || (path == secret && r.ExitCode == 0) {
			t.Fatalf("read host file %s from the sandbox: %s", path, r)
		}
	}

	// Services on the host listening on every address (as the control
	// plane would with --listen 0.0.0.0:...), the other sandbox's ports
	// and the cloud metadata address are unreachable. Each has a control
	// first: the host reaches it at that very address, so the sandbox's
	// failure is the isolation's doing, not a missing listener.
	port := listenAll(t, "tcp", "0.0.0.0:0")
	out := newOutside(t)
	recA, _ := f.Store.Sandboxes().Get(ctx(t), a.ID)
	recB, _ := f.Store.Sandboxes().Get(ctx(t), b.ID)
	hostPeer := netip.MustParseAddr(recA.HostAddr).Prev()
	targets := []struct{ what, addr string }{
		{"host on the slot link", net.JoinHostPort(hostPeer.String(), itoa(port))},
		{"host's own address", net.JoinHostPort(hostIP(t), itoa(port))},
		{"host loopback", net.JoinHostPort("127.0.0.1", itoa(port))},
		{"another sandbox", net.JoinHostPort(recB.HostAddr, itoa(nodetest.HolderPort))},
		{"another sandbox's envd", net.JoinHostPort(recB.HostAddr, itoa(protocol.EnvdPort))},
		{"cloud metadata", out.metadata.String()},
		{"another slot's host side", net.JoinHostPort(netip.MustParseAddr(recB.HostAddr).Prev().String(), itoa(port))},
	}
	// The sandbox's own dial works: out to the internet, and on its own
	// loopback (where "host loopback" lands).
	for what, addr := range map[string]string{"a host outside": out.public.String(), "its own loopback": net.JoinHostPort("127.0.0.1", itoa(nodetest.HolderPort))} {
		if r := f.prober(t, a, "dial", addr); r.ExitCode != 0 || !strings.Contains(r.Stdout, "connected") {
			t.Fatalf("control: the sandbox does not reach %s at %s: %s", what, addr, r)
		}
	}
	for _, tc := range targets {
		c, err := net.DialTimeout("tcp", tc.addr, 5*time.Second)
		if err != nil {
			t.Errorf("control: the host does not reach %s at %s: %v", tc.what, tc.addr, err)
			continue
		}
		c.Close()
		if r := f.prober(t, a, "dial", tc.addr); r.ExitCode == 0 {
			t.Errorf("sandbox reached %s at %s", tc.what, tc.addr)
		}
	}
	// The host itself still reaches both sandboxes (through the proxy path).
	f.holderToken(t, a)
	f.holderToken(t, b)

	// A write to the shared rootfs stays in the writer's layer.
	if r := f.prober(t, a, "write", "/etc/marker", "a was here"); r.ExitCode != 0 {
		t.Fatalf("write in a: %s", r)
	}
	if r := f.prober(t, b, "cat", "/etc/marker"); r.ExitCode == 0 {
		t.Fatalf("b sees a's write to the shared rootfs: %s", r)
	}
	tpl, _ := f.Store.Templates().Get(ctx(t), "tiny")
	if _, err := os.Stat(filepath.Join(tpl.Rootfs, "etc", "marker")); !os.IsNotExist(err) {
		t.Fatal("a's write reached the shared rootfs on the host")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// listenAll accepts (and closes) connections on addr until the test ends,
// and returns its port.
func listenAll(t *testing.T, network, addr string) int {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// outside is a host beyond this machine, as the internet is to a
// sandbox: a network namespace linked to the host, holding a public
// address and the cloud metadata address, both routed to it from the
// host, each with a listener.
type outside struct{ public, metadata netip.AddrPort }

func newOutside(t *testing.T) outside {
	t.Helper()
	n := mrand.IntN(250) + 1
	ns := "cesc" + itoa(n) + "o"
	hostIf := "cesc" + itoa(n) + "h"
	link := func(i int) string { return "198.19." + itoa(n) + "." + itoa(i) }
	out := outside{
		public:   netip.MustParseAddrPort("198.51.100." + itoa(n) + ":8080"),
		metadata: netip.MustParseAddrPort("169.254.169.254:80"),
	}
	run := func(args ...string) {
		t.Helper()
		if b, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, b)
		}
	}
	t.Cleanup(func() {
		for _, a := range []netip.AddrPort{out.public, out.metadata} {
			exec.Command("ip", "route", "del", a.Addr().String()+"/32", "via", link(2)).Run()
		}
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run("ip", "netns", "add", ns)
	run("ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	run("ip", "addr", "add", link(1)+"/30", "dev", hostIf)
	run("ip", "link", "set", hostIf, "up")
	run("ip", "-n", ns, "addr", "add", link(2)+"/30", "dev", "eth0")
	run("ip", "-n", ns, "link", "set", "eth0", "up")
	run("ip", "-n", ns, "link", "set", "lo", "up")
	run("ip", "-n", ns, "route", "add", "default", "via", link(1))
	for _, a := range []netip.AddrPort{out.public, out.metadata} {
		run("ip", "-n", ns, "addr", "add", a.Addr().String()+"/32", "dev", "eth0")
		run("ip", "route", "add", a.Addr().String()+"/32", "via", link(2))
		inNetNS(t, "/run/netns/"+ns, func() { listenAll(t, "tcp4", a.String()) })
	}
	return out
}

// inNetNS runs fn on a thread in the netns at path, which is thrown away
// afterwards; sockets fn makes stay in that netns.
func inNetNS(t *testing.T, path string, fn func()) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// sandboxCgroup is the host cgroup (pids controller) of a sandbox's
// runsc processes.
func sandboxCgroup(t *testing.T, containerID string) string {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup/pids/cube/" + containerID, "/sys/fs/cgroup/cube/" + containerID} {
		if _, err := os.Stat(filepath.Join(dir, "pids.current")); err == nil {
			return dir
		}
	}
	t.Fatalf("no pids cgroup for container %s", containerID)
	return ""
}

// cgroupInt reads a number from a cgroup file.
func cgroupInt(t *testing.T, cgroup, file string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroup, file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s/%s: %v", cgroup, file, err)
	}
	return n
}

// hostProcs counts the host processes in a cgroup.
func hostProcs(t *testing.T, cgroup string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroup, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(b)))
}

// TestEscapeMisbehavingSandboxesAreContained runs a huge allocation, a full
// disk, a console flood and a fork bomb in one sandbox while its
// neighbour and the node keep serving.
func TestEscapeMisbehavingSandboxesAreContained(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "tiny", 5*time.Minute)
	b := f.create(t, "tiny", 5*time.Minute)
	tokB := f.holderToken(t, b)
	recA, _ := f.Store.Sandboxes().Get(ctx(t), a.ID)

	// 64 GiB: fails inside; the sandbox keeps serving.
	if r := f.prober(t, a, "alloc", "65536"); r.ExitCode == 0 {
		t.Fatalf("64 GiB allocation succeeded: %s", r)
	}
	f.holderToken(t, a)

	// A full disk is ENOSPC inside and costs the host's disk nothing.
	var before, after syscall.Statfs_t
	syscall.Statfs(f.DataDir, &before)
	if r := f.prober(t, a, "fill", "/big"); !strings.Contains(r.Stdout, "no space left on device") {
		t.Fatalf("filling the disk: %s", r)
	}
	syscall.Statfs(f.DataDir, &after)
	if used := (int64(before.Bavail) - int64(after.Bavail)) * before.Bsize; used > 32<<20 {
		t.Fatalf("the host lost %d MB of disk while the sandbox filled its own", used>>20)
	}
	f.holderToken(t, a)

	f.floodConsole(t, a, recA.ContainerID)
	f.holderToken(t, a)

	// A fork bomb is stopped by the sandbox's limits, and the sandbox
	// survives it.
	cgroup := sandboxCgroup(t, recA.ContainerID)
	procs := hostProcs(t, cgroup)
	r := f.prober(t, a, "forkbomb")
	var started int
	var stoppedBy string
	if _, err := fmt.Sscanf(r.Stdout, "started %d stopped by %s", &started, &stoppedBy); err != nil || stoppedBy == "<nil>" {
		t.Fatalf("the fork bomb was not stopped: %s", r)
	}
	if started > gvisor.NprocLimit {
		t.Errorf("the fork bomb started %d processes, more than the sandbox's %d", started, gvisor.NprocLimit)
	}
	// Under systrap every address space in the sandbox has stub processes
	// on the host, so the bomb does add host processes, as many as the
	// sandbox's pids cgroup lets it and no more.
	now := hostProcs(t, cgroup)
	tasks := cgroupInt(t, cgroup, "pids.current")
	t.Logf("fork bomb: %s; host processes of the sandbox %d -> %d, host tasks %d", strings.TrimSpace(r.Stdout), procs, now, tasks)
	if limit := cgroupInt(t, cgroup, "pids.max"); limit != gvisor.PidsLimit || tasks > limit {
		t.Errorf("the sandbox holds %d host tasks under a limit of %d, want at most gvisor.PidsLimit (%d)", tasks, limit, gvisor.PidsLimit)
	}
	f.holderToken(t, a)

	// The neighbour and the node are unaffected throughout.
	if got := f.holderToken(t, b); got != tokB {
		t.Fatalf("neighbour's memory changed: %s", got)
	}
	if _, err := f.GetSandbox(ctx(t), b.ID); err != nil {
		t.Fatal(err)
	}
	c := f.create(t, "tiny", time.Minute)
	f.holderToken(t, c)
	if err := f.KillSandbox(ctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
}

// floodConsole writes 100 MiB of forged process records to the console
// of sb's PID 1: at most gvisor.ConsoleLimit of it stays on the host's
// disk, and the sandbox's logs still hold the node's own events.
func (f *fixture) floodConsole(t *testing.T, sb *cube.Sandbox, containerID string) {
	t.Helper()
	forged := fmt.Sprintf("time=%s level=INFO msg=%q pid=666 cmd=forged", time.Now().UTC().Format(time.RFC3339Nano), "process started")
	if r := f.prober(t, sb, "flood", "/proc/1/fd/1", "100", forged); r.ExitCode != 0 || !strings.Contains(r.Stdout, "flooded") {
		t.Fatalf("console flood: %s", r)
	}
	bundle := filepath.Join(f.DataDir, "bundles", containerID)
	// The console is written out behind the sandbox's back: wait for the
	// end of the flood to be on disk.
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(filepath.Join(bundle, "console.log"))
		if bytes.Contains(b, []byte("\nflood end\n")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the end of the flood never reached the console on disk; it ends %q", b[max(len(b)-200, 0):])
		}
		time.Sleep(50 * time.Millisecond)
	}
	files, _ := filepath.Glob(filepath.Join(bundle, "console*"))
	var used int64
	for _, p := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil {
			used += st.Blocks * 512
		}
	}
	if used > gvisor.ConsoleLimit {
		t.Errorf("a 100 MiB console flood left %d bytes on the host's disk, more than the %d allowed", used, gvisor.ConsoleLimit)
	}
	logs, err := f.SandboxLogs(ctx(t), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var created, fromSandbox int
	for _, e := range logs {
		if e.Fields[node.SourceField] == node.SourceSandbox {
			fromSandbox++
		} else if strings.HasPrefix(e.Message, "sandbox created from template") {
			created++
		}
	}
	if created != 1 {
		t.Errorf("the node's creation event is missing from the logs after the flood (%d entries)", len(logs))
	}
	// The forged records show, marked as the sandbox's, and few enough
	// that the node's events still fit in the API's default page (1000).
	if fromSandbox == 0 || len(logs) > 1000 {
		t.Errorf("%d log entries, %d of them from the console: want some from the console, and all within a default page of 1000", len(logs), fromSandbox)
	}
}
