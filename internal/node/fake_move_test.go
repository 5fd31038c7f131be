package node_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
	"cube/internal/store"
)

// A sandbox paused on disk on node a resumes on node b: a hand-over cut
// short leaves it a's, paused, with its files; a whole one makes it b's,
// resumed there, and a lets go of it and its files.
func TestPausedSandboxMovesToAnotherNode(t *testing.T) {
	ctx := fctx(t)
	a := nodefake.New(t, nodefake.Options{NodeID: "a", PauseWriteDelay: time.Hour})
	var cut atomic.Bool
	fetch := func(ctx context.Context, from, id string, withTemplate bool) (io.ReadCloser, error) {
		if from != "a" {
			return nil, errors.New("no such node")
		}
		return piped(cut.Load(), func(w io.Writer) error { return a.HandOver(ctx, id, withTemplate, w) }), nil
	}
	moved := func(ctx context.Context, from, id string) { a.HandedOver(ctx, id) }
	b := nodefake.New(t, nodefake.Options{NodeID: "b", Store: a.Store, FetchSandbox: fetch, SandboxMoved: moved})
	tpl := a.AddTemplate(t, "tpl")
	os.MkdirAll(tpl.Rootfs, 0o755)
	sb, err := a.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PauseSandbox(ctx, sb.ID, false); err != nil { // files only: on disk at once
		t.Fatal(err)
	}
	dir := filepath.Join(a.DataDir, "sandboxes", sb.ID)

	cut.Store(true)
	if _, _, err := b.ConnectSandbox(ctx, sb.ID, cube.ConnectRequest{Timeout: time.Minute, MoveFrom: "a"}); err == nil {
		t.Fatal("a resume with its hand-over cut short succeeded")
	}
	if rec, _ := a.Store.Sandboxes().Get(ctx, sb.ID); rec.Node != "a" || !a.Holds(sb.ID) || b.Holds(sb.ID) {
		t.Fatalf("after a cut hand-over: record on %q, a holds %v, b holds %v", rec.Node, a.Holds(sb.ID), b.Holds(sb.ID))
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a lost the sandbox's files: %v", err)
	}
	// Still a's and paused on disk: it may be killed there, and moved.
	if err := a.SetTimeout(ctx, sb.ID, time.Minute, false); err != nil {
		t.Fatalf("a's sandbox after the failed move: %v", err)
	}

	cut.Store(false)
	got, resumed, err := b.ConnectSandbox(ctx, sb.ID, cube.ConnectRequest{Timeout: time.Minute, MoveFrom: "a"})
	if err != nil || !resumed || got.State != cube.StateRunning {
		t.Fatalf("resume on b: %+v, resumed %v, %v", got, resumed, err)
	}
	rec, _ := a.Store.Sandboxes().Get(ctx, sb.ID)
	if rec.Node != "b" || !strings.HasPrefix(rec.Boot.Rootfs, b.DataDir) || a.Holds(sb.ID) || !b.Holds(sb.ID) {
		t.Fatalf("after the move: record on %q (boot %s), a holds %v, b holds %v", rec.Node, rec.Boot.Rootfs, a.Holds(sb.ID), b.Holds(sb.ID))
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a kept the files of the sandbox it handed over: %v", err)
	}
	if err := b.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// Asked of a node that no longer has it, nothing moves.
	wantKind(t, "move a sandbox that is gone", func() error {
		_, _, err := b.ConnectSandbox(ctx, sb.ID, cube.ConnectRequest{Timeout: time.Minute, MoveFrom: "a"})
		return err
	}(), cube.NotFound)
}

// The children of a fork start on another node from the image the
// sandbox's node offers, which goes once they run; a fork of a sandbox
// the named node does not have is refused.
func TestForkStartsChildrenOnAnotherNode(t *testing.T) {
	ctx := fctx(t)
	a := nodefake.New(t, nodefake.Options{NodeID: "a"})
	fetchImage := func(ctx context.Context, from, image string) (io.ReadCloser, error) {
		return piped(false, func(w io.Writer) error { return a.ExportForkImage(ctx, image, w) }), nil
	}
	fetchTemplate := func(ctx context.Context, from, id string) (io.ReadCloser, error) {
		return piped(false, func(w io.Writer) error { return a.ExportTemplate(ctx, id, w) }), nil
	}
	b := nodefake.New(t, nodefake.Options{NodeID: "b", Store: a.Store, FetchForkImage: fetchImage, FetchTemplate: fetchTemplate})
	tpl := a.AddTemplate(t, "tpl")
	os.MkdirAll(tpl.Rootfs, 0o755)
	parent, err := a.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	image, err := a.OfferForkImage(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := len(a.Runtime.Restores())
	results, err := b.ForkFrom(ctx, "a", parent.ID, image, cube.ForkRequest{Count: 2, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil || r.Sandbox.Node != "b" || r.Sandbox.State != cube.StateRunning || !b.Holds(r.Sandbox.ID) {
			t.Fatalf("child: %+v %v", r.Sandbox, r.Err)
		}
	}
	if got := len(a.Runtime.Restores()) - before; got != 0 {
		t.Fatalf("node a restored %d containers for b's children", got)
	}
	if got := len(b.Runtime.Restores()); got != 2 {
		t.Fatalf("node b restored %d containers for 2 children", got)
	}
	a.DropForkImage(image)
	if err := a.ExportForkImage(ctx, image, io.Discard); cube.KindOf(err) != cube.NotFound {
		t.Fatalf("a dropped fork image is still offered: %v", err)
	}
	_, err = b.ForkFrom(ctx, "c", parent.ID, image, cube.ForkRequest{Count: 1})
	wantKind(t, "fork from a node that does not hold the sandbox", err, cube.Conflict)
}

// blockedWriter fails its first write once released, as the pipe of a
// hand-over whose receiver went away fails, late, on a busy node.
type blockedWriter struct {
	writing chan struct{} // closed at the first write
	release chan struct{}
	once    *sync.Once
}

func (w blockedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	<-w.release
	return 0, errors.New("the receiver went away")
}

// A hand-over whose write fails only after the receiver has asked for a
// second one must not end the second: the sandbox is the receiver's once
// the record says so, and the first node lets it go.
func TestLateFailureOfAnEarlierHandOver(t *testing.T) {
	ctx := fctx(t)
	a := nodefake.New(t, nodefake.Options{NodeID: "a", PauseWriteDelay: time.Hour})
	tpl := a.AddTemplate(t, "tpl")
	os.MkdirAll(tpl.Rootfs, 0o755)
	sb, err := a.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PauseSandbox(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	first := blockedWriter{writing: make(chan struct{}), release: make(chan struct{}), once: new(sync.Once)}
	firstDone := make(chan error, 1)
	go func() { firstDone <- a.HandOver(ctx, sb.ID, false, first) }()
	<-first.writing
	if a.HandOver(ctx, sb.ID, false, io.Discard) == nil {
		t.Fatal("a second hand-over began while the first was under way")
	}
	// The receiver gives up on it (the record is still a's) ...
	a.HandedOver(ctx, sb.ID)
	// ... and asks again, and this time takes the record.
	if err := a.HandOver(ctx, sb.ID, false, io.Discard); err != nil {
		t.Fatalf("the second hand-over: %v", err)
	}
	close(first.release)
	if err := <-firstDone; err == nil {
		t.Fatal("the first hand-over's write did not fail")
	}
	if err := a.Store.Sandboxes().Update(ctx, sb.ID, func(r *store.Sandbox) error { r.Node = "b"; return nil }); err != nil {
		t.Fatal(err)
	}
	a.HandedOver(ctx, sb.ID)
	if a.Holds(sb.ID) {
		t.Fatal("the first node still holds the sandbox the record gives to another")
	}
}
