package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/node/nodefake"
	"cube/internal/store"
	"cube/internal/testenv"
)

// copyPair is node a, which builds templates, and node b, which copies
// them from a to run them.
type copyPair struct {
	a, b *nodefake.Node
	log  *testenv.LogBuffer // b's log
}

func newCopyPair(t *testing.T) *copyPair {
	a := nodefake.New(t, nodefake.Options{NodeID: "a"})
	fetch := func(ctx context.Context, from, id string) (io.ReadCloser, error) {
		if from != "a" {
			return nil, errors.New("no such node")
		}
		return piped(false, func(w io.Writer) error { return a.ExportTemplate(ctx, id, w) }), nil
	}
	log := &testenv.LogBuffer{}
	b := nodefake.New(t, nodefake.Options{NodeID: "b", Store: a.Store, FetchTemplate: fetch,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	return &copyPair{a: a, b: b, log: log}
}

// buildTemplate builds tplID on a from a small root filesystem: files,
// an executable, a symbolic link, a FIFO and a nested directory.
func (p *copyPair) buildTemplate(t *testing.T, tplID string) *store.Template {
	t.Helper()
	root := p.a.Rootfs(tplID)
	for _, d := range []string{"etc", "bin", "usr/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "etc", "hostname"), "template\n", 0o644)
	writeFile(t, filepath.Join(root, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\n", 0o644)
	writeFile(t, filepath.Join(root, "bin", "sh"), "#!fake shell\n", 0o755)
	if err := os.Symlink("sh", filepath.Join(root, "bin", "ls")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "usr", "lib", "initctl"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p.a.AddTemplate(t, tplID)
}

// refused checks that b's create of tplID failed for the copy differing
// from the manifest as want says, and that b kept nothing of it.
func (p *copyPair) refused(t *testing.T, tplID string, err error, want string) {
	t.Helper()
	ctx := fctx(t)
	if cube.KindOf(err) != cube.Unavailable || !strings.Contains(err.Error(), "from node a: the copy differs from the template's manifest") || !strings.Contains(err.Error(), want) {
		t.Fatalf("create from a forged copy: %v; want it refused naming %q", err, want)
	}
	if left, _ := os.ReadDir(filepath.Join(p.b.DataDir, "copies")); len(left) != 0 {
		t.Fatalf("a refused copy left %v", left)
	}
	if got, _ := p.a.Store.Templates().Get(ctx, tplID); len(got.Copies) != 0 {
		t.Fatalf("a refused copy is recorded: Copies = %v", got.Copies)
	}
	if c := p.b.Runtime.Containers(); len(c) != 0 {
		t.Fatalf("b runs %v from a refused copy", c)
	}
	if agent, err := os.ReadFile(filepath.Join(p.b.AgentDir(), "cube-envd")); err != nil || string(agent) != "fake cube-envd\n" {
		t.Fatalf("b's agent after a refused copy: %q %v", agent, err)
	}
}

// A node copying a template checks every file the sending node gave it
// against the manifest the builder recorded (covered by the template's
// checksum), whatever the archive's own digest says: a changed file, an
// extra one, a missing one, a changed mode or owner, a retargeted link
// and a swapped agent are each refused, and nothing of the copy is kept.
// The same files as built are kept.
func TestForgedTemplateCopyRefused(t *testing.T) {
	p := newCopyPair(t)
	tpl := p.buildTemplate(t, "tpl")
	root := tpl.Rootfs
	agent := filepath.Join(tpl.Envd, "cube-envd")
	for _, c := range []struct {
		name        string
		forge, undo func() error
		want        string
	}{
		{"changed content, same size",
			func() error { return os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("forged!!\n"), 0o644) },
			func() error { return os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("template\n"), 0o644) },
			"rootfs/etc/hostname: content SHA-256"},
		{"extra file",
			func() error {
				return os.WriteFile(filepath.Join(root, "etc", "ld.so.preload"), []byte("/x.so\n"), 0o644)
			},
			func() error { return os.Remove(filepath.Join(root, "etc", "ld.so.preload")) },
			"rootfs/etc/ld.so.preload is not in the template's manifest"},
		{"extra directory",
			func() error { return os.MkdirAll(filepath.Join(root, "etc", "cron.d"), 0o755) },
			func() error { return os.Remove(filepath.Join(root, "etc", "cron.d")) },
			"rootfs/etc/cron.d is not in the template's manifest"},
		{"missing file",
			func() error { return os.Remove(filepath.Join(root, "etc", "passwd")) },
			func() error {
				return os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
			},
			"rootfs/etc/passwd is missing"},
		{"changed mode",
			// Raw modes: os.Chmod takes setuid as a FileMode bit.
			func() error { return syscall.Chmod(filepath.Join(root, "bin", "sh"), 0o4755) },
			func() error { return syscall.Chmod(filepath.Join(root, "bin", "sh"), 0o755) },
			"rootfs/bin/sh: mode 4755, not 0755"},
		{"changed owner",
			func() error { return os.Lchown(filepath.Join(root, "etc"), 1000, 1000) },
			func() error { return os.Lchown(filepath.Join(root, "etc"), os.Getuid(), os.Getgid()) },
			"rootfs/etc: owner 1000:1000"},
		{"retargeted link",
			func() error {
				os.Remove(filepath.Join(root, "bin", "ls"))
				return os.Symlink("/proc/self/root/evil", filepath.Join(root, "bin", "ls"))
			},
			func() error {
				os.Remove(filepath.Join(root, "bin", "ls"))
				return os.Symlink("sh", filepath.Join(root, "bin", "ls"))
			},
			`rootfs/bin/ls: links to "/proc/self/root/evil", not "sh"`},
		{"swapped agent",
			func() error { return os.WriteFile(agent, []byte("forged cube-envd\n"), 0o755) },
			func() error { return os.WriteFile(agent, []byte("fake cube-envd\n"), 0o755) },
			"envd/cube-envd: 17 bytes, not 15"},
		{"swapped agent, same size",
			func() error { return os.WriteFile(agent, []byte("evil cube-envd\n"), 0o755) },
			func() error { return os.WriteFile(agent, []byte("fake cube-envd\n"), 0o755) },
			"envd/cube-envd: content SHA-256"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.forge(); err != nil {
				t.Fatal(err)
			}
			_, err := p.b.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
			if uerr := c.undo(); uerr != nil {
				t.Fatal(uerr)
			}
			p.refused(t, "tpl", err, c.want)
		})
	}

	if _, err := p.b.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tpl", Timeout: time.Minute}); err != nil {
		t.Fatalf("create from a true copy: %v", err)
	}
	if got, _ := p.a.Store.Templates().Get(fctx(t), "tpl"); len(got.Copies) != 1 || got.Copies[0] != "b" {
		t.Fatalf("Copies = %v", got.Copies)
	}
	if strings.Contains(p.log.String(), "unverified by manifest") {
		t.Fatalf("a copy with a manifest was logged as unverified:\n%s", p.log)
	}
}

// A snapshot lists its template's rootfs and agent and its own
// checkpoint: a copy of it is checked the same way.
func TestForgedSnapshotCopyRefused(t *testing.T) {
	ctx := fctx(t)
	p := newCopyPair(t)
	tpl := p.buildTemplate(t, "tpl")
	sb, err := p.a.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := p.a.CreateSnapshot(ctx, sb.ID, "snap")
	if err != nil {
		t.Fatal(err)
	}
	hostname := filepath.Join(tpl.Rootfs, "etc", "hostname")
	writeFile(t, hostname, "forged!!\n", 0o644)
	_, err = p.b.CreateSandbox(ctx, cube.CreateRequest{Template: "snap", Timeout: time.Minute})
	writeFile(t, hostname, "template\n", 0o644)
	p.refused(t, snap.ID, err, "rootfs/etc/hostname: content SHA-256")

	if _, err := p.b.CreateSandbox(ctx, cube.CreateRequest{Template: "snap", Timeout: time.Minute}); err != nil {
		t.Fatalf("create from a true copy of the snapshot: %v", err)
	}
	if got, _ := p.a.Store.Templates().Get(ctx, snap.ID); len(got.Copies) != 1 || got.Copies[0] != "b" {
		t.Fatalf("the snapshot's Copies = %v", got.Copies)
	}
}

// A template built before manifests has none in its checkpoint: a copy
// of it is checked against the checksum as before, kept, and logged as
// not verified by a manifest.
func TestTemplateWithoutManifestCopied(t *testing.T) {
	ctx := fctx(t)
	p := newCopyPair(t)
	tpl := p.buildTemplate(t, "old")
	// As an older build left it: no manifest, the checksum without one.
	for _, name := range node.ManifestFiles {
		if err := os.Remove(filepath.Join(tpl.Checkpoint, name)); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := node.ImageChecksum(tpl.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.a.Store.Templates().Update(ctx, "old", func(t *store.Template) error { t.Checksum = sum; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.CreateSandbox(ctx, cube.CreateRequest{Template: "old", Timeout: time.Minute}); err != nil {
		t.Fatalf("create from a copy of a template without a manifest: %v", err)
	}
	if got, _ := p.a.Store.Templates().Get(ctx, "old"); len(got.Copies) != 1 {
		t.Fatalf("Copies = %v", got.Copies)
	}
	if log := p.log.String(); !strings.Contains(log, "template copy unverified by manifest") || !strings.Contains(log, "template=old") {
		t.Fatalf("the unverified copy was not logged as such:\n%s", log)
	}
}

// A manifest cannot be dropped to pass a forged copy off as an old
// template's: the checksum covers it.
func TestCopyWithoutItsManifestRefused(t *testing.T) {
	p := newCopyPair(t)
	tpl := p.buildTemplate(t, "tpl")
	for _, name := range node.ManifestFiles {
		if err := os.Remove(filepath.Join(tpl.Checkpoint, name)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.b.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
	if cube.KindOf(err) != cube.Unavailable || !strings.Contains(err.Error(), "does not match the template's checksum") {
		t.Fatalf("create from a copy without its manifest: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(p.b.DataDir, "copies")); len(left) != 0 {
		t.Fatalf("a refused copy left %v", left)
	}
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
