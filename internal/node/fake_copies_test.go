package node_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
)

// A node runs a sandbox of another node's template by copying its files
// once: a transfer cut short keeps nothing and says why; a whole one is
// verified, kept, recorded in the template's Copies and restored from;
// the copy goes once its template is gone and no sandbox boots from it.
func TestTemplateCopiedToAnotherNode(t *testing.T) {
	ctx := context.Background()
	a := nodefake.New(t, nodefake.Options{NodeID: "a"})
	var cut atomic.Bool
	var fetches atomic.Int32
	fetch := func(ctx context.Context, from, id string) (io.ReadCloser, error) {
		if from != "a" {
			return nil, errors.New("no such node")
		}
		fetches.Add(1)
		return piped(cut.Load(), func(w io.Writer) error { return a.ExportTemplate(ctx, id, w) }), nil
	}
	b := nodefake.New(t, nodefake.Options{NodeID: "b", Store: a.Store, FetchTemplate: fetch})
	// The rootfs is filled before the build, which lists it in the
	// template's manifest: a copy is checked against that.
	if err := os.MkdirAll(filepath.Join(a.Rootfs("tpl"), "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(a.Rootfs("tpl"), "etc", "hostname"), []byte("template\n"), 0o644)
	a.AddTemplate(t, "tpl")
	copies := filepath.Join(b.DataDir, "copies")

	cut.Store(true)
	_, err := b.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
	if cube.KindOf(err) != cube.Unavailable || !strings.Contains(err.Error(), "from node a") {
		t.Fatalf("create with the transfer cut short: %v", err)
	}
	if left, _ := os.ReadDir(copies); len(left) != 0 {
		t.Fatalf("a cut transfer left %v", left)
	}
	if got, _ := a.Store.Templates().Get(ctx, "tpl"); len(got.Copies) != 0 {
		t.Fatalf("a cut transfer is recorded as a copy: %v", got.Copies)
	}

	cut.Store(false)
	for range 2 {
		if _, err := b.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d transfers for a failed and two good creates; want 2", n)
	}
	got, _ := a.Store.Templates().Get(ctx, "tpl")
	if !slices.Equal(got.Copies, []string{"b"}) {
		t.Fatalf("Copies = %v", got.Copies)
	}
	dirs, _ := os.ReadDir(copies)
	if len(dirs) != 1 {
		t.Fatalf("copies: %v", dirs)
	}
	copyDir := filepath.Join(copies, dirs[0].Name())
	if b, err := os.ReadFile(filepath.Join(copyDir, "rootfs", "etc", "hostname")); err != nil || string(b) != "template\n" {
		t.Fatalf("the copy's rootfs: %q %v", b, err)
	}
	for _, r := range b.Runtime.Restores() {
		if !strings.HasPrefix(r.Image, copyDir) || !strings.HasPrefix(r.Spec.Rootfs, copyDir) {
			t.Fatalf("node b restored from %s with rootfs %s, not from its copy", r.Image, r.Spec.Rootfs)
		}
	}

	// The template goes: the copy stays while b's sandboxes boot from it.
	if err := a.Store.Templates().Delete(ctx, "tpl"); err != nil {
		t.Fatal(err)
	}
	if err := b.DropStaleCopies(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(copyDir); err != nil {
		t.Fatalf("a copy sandboxes boot from was removed: %v", err)
	}
	list, _ := b.ListSandboxes(ctx, cube.ListFilter{})
	for _, sb := range list {
		if err := b.KillSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DropStaleCopies(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(copyDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the copy of a deleted template stayed: %v", err)
	}
}

// piped is what write writes, as a peer's answer reads: cut short after
// 700 bytes when cut is set.
func piped(cut bool, write func(io.Writer) error) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	if cut {
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(pr, 700), pr}
	}
	return pr
}
