package node_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/api"
	"cube/internal/node"
	"cube/internal/nodetest"
)

// prober runs the holder test program inside a sandbox.
func (f *fixture) prober(t *testing.T, sb *api.Sandbox, args ...string) nodetest.Result {
	t.Helper()
	target, err := f.Resolve(ctx(t), sb.ID, node.EnvdPort)
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

	// A service on the host listening on every address (as the control
	// plane would with --listen 0.0.0.0:...) is unreachable.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	recA, _ := f.Store.Sandboxes().Get(ctx(t), a.ID)
	recB, _ := f.Store.Sandboxes().Get(ctx(t), b.ID)
	hostPeer := netip.MustParseAddr(recA.HostAddr).Prev()
	targets := map[string]string{
		"host on the slot link":    net.JoinHostPort(hostPeer.String(), itoa(port)),
		"host's own address":       net.JoinHostPort(hostIP(t), itoa(port)),
		"host loopback":            net.JoinHostPort("127.0.0.1", itoa(port)),
		"another sandbox":          net.JoinHostPort(recB.HostAddr, itoa(nodetest.HolderPort)),
		"another sandbox's envd":   net.JoinHostPort(recB.HostAddr, "49983"),
		"cloud metadata":           "169.254.169.254:80",
		"another slot's host side": net.JoinHostPort(netip.MustParseAddr(recB.HostAddr).Prev().String(), itoa(port)),
	}
	for what, addr := range targets {
		if r := f.prober(t, a, "dial", addr); r.ExitCode == 0 {
			t.Errorf("sandbox reached %s at %s", what, addr)
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

// TestMisbehavingSandboxesAreContained runs a huge allocation, a full
// disk and a fork bomb in one sandbox while its neighbour and the node
// keep serving.
func TestMisbehavingSandboxesAreContained(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "tiny", 5*time.Minute)
	b := f.create(t, "tiny", 5*time.Minute)
	tokB := f.holderToken(t, b)

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

	// A fork bomb is stopped by the sandbox's limits.
	if r := f.prober(t, a, "forkbomb"); !strings.Contains(r.Stdout, "stopped by") {
		t.Logf("fork bomb: %s", r)
	}
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
