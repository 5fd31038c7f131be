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
	"cube/internal/fault"
	"cube/internal/node/nodefake"
	"cube/internal/runtime"
)

// The fault points a node of a cluster passes while it takes files from
// another are driven here, on fakes: a crash of one node is its
// operation's goroutine stopped at the point (fault.Hang) and the node
// started again on the same store and data directory, while the other
// node runs on. internal/server's TestCrashAtEveryFaultPoint drives the
// others with a real server and SIGKILL. These tests must not run in
// parallel: a point is armed for the whole process.

// pointsOf lists the fault points named prefix*.
func pointsOf(t *testing.T, prefix string) []string {
	t.Helper()
	var out []string
	for _, p := range fault.Points {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no fault point starts with %q", prefix)
	}
	return out
}

// crashAt runs op with point armed, and waits until op has stopped there
// for good.
func crashAt(t *testing.T, point string, op func()) {
	t.Helper()
	reached, err := fault.Hang(point)
	if err != nil {
		t.Fatal(err)
	}
	defer fault.Arm("")
	ended := make(chan struct{})
	go func() {
		op()
		close(ended)
	}()
	select {
	case <-reached:
	case <-ended:
		t.Fatalf("the operation ended without passing %s", point)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not reached", point)
	}
}

// names lists the names in dir.
func names(dir string) []string {
	var out []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A node that crashes while it copies another node's template, for a
// create, keeps either nothing of the copy or all of it, and the
// template's Copies names it only once it has all of it. After the
// restart nothing of the create is left, and the next create uses the
// whole copy or copies again.
func TestCrashDuringTemplateCopy(t *testing.T) {
	for _, point := range pointsOf(t, "template.copy.") {
		t.Run(point, func(t *testing.T) {
			ctx := fctx(t)
			a := nodefake.New(t, nodefake.Options{NodeID: "a"})
			var fetches atomic.Int32
			fetch := func(ctx context.Context, from, id string) (io.ReadCloser, error) {
				fetches.Add(1)
				return piped(false, func(w io.Writer) error { return a.ExportTemplate(ctx, id, w) }), nil
			}
			b := nodefake.New(t, nodefake.Options{NodeID: "b", Store: a.Store, FetchTemplate: fetch})
			rootfs := filepath.Join(a.DataDir, "rootfs-tpl")
			os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
			os.WriteFile(filepath.Join(rootfs, "etc", "hostname"), []byte("template\n"), 0o644)
			a.AddTemplate(t, "tpl")

			crashAt(t, point, func() { b.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute}) })
			b = b.Restart(t)

			copies := filepath.Join(b.DataDir, "copies")
			kept := names(copies)
			whole := point != fault.TemplateCopyAfterExtract
			if len(kept) != map[bool]int{true: 1, false: 0}[whole] {
				t.Fatalf("copies after a crash at %s: %v", point, kept)
			}
			if whole {
				got, err := os.ReadFile(filepath.Join(copies, kept[0], "rootfs", "etc", "hostname"))
				if err != nil || string(got) != "template\n" {
					t.Fatalf("the copy's rootfs: %q %v", got, err)
				}
			}
			tpl, _ := a.Store.Templates().Get(ctx, "tpl")
			if recorded := slices.Contains(tpl.Copies, "b"); recorded != (point == fault.TemplateCopyAfterRecord) {
				t.Fatalf("after a crash at %s the template's copies are %v", point, tpl.Copies)
			}
			if recs, _ := b.Store.Sandboxes().List(ctx); len(recs) != 0 {
				t.Fatalf("the crashed create left a record: %+v", recs[0])
			}
			wantHeld(t, b, nil, nil)

			before := fetches.Load()
			sb, err := b.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
			if err != nil {
				t.Fatalf("create after the crash: %v", err)
			}
			if again := fetches.Load() - before; again != map[bool]int32{true: 0, false: 1}[whole] {
				t.Fatalf("after a crash at %s the create copied the template %d times", point, again)
			}
			cid, _ := served(t, b, sb.ID)
			if img := b.Runtime.Container(cid).Image(); !strings.HasPrefix(img, copies+string(filepath.Separator)) {
				t.Fatalf("restored from %s, not from the node's copy", img)
			}
		})
	}
}

// A node that crashes while it takes over a sandbox paused on another
// node leaves the record naming the node that holds the sandbox's image:
// the other one until its own record is written, this one from then on.
// Once the other node stops waiting, exactly the node the record names
// holds the sandbox and its files, and the sandbox resumes with its image.
func TestCrashDuringHandOver(t *testing.T) {
	for _, point := range pointsOf(t, "sandbox.move.") {
		t.Run(point, func(t *testing.T) {
			ctx := fctx(t)
			a := nodefake.New(t, nodefake.Options{NodeID: "a", PauseWriteDelay: time.Hour})
			fetch := func(ctx context.Context, from, id string, withTemplate bool) (io.ReadCloser, error) {
				return piped(false, func(w io.Writer) error { return a.HandOver(ctx, id, withTemplate, w) }), nil
			}
			moved := func(ctx context.Context, from, id string) { a.HandedOver(ctx, id) }
			b := nodefake.New(t, nodefake.Options{NodeID: "b", Store: a.Store, FetchSandbox: fetch, SandboxMoved: moved})
			os.MkdirAll(filepath.Join(a.DataDir, "rootfs-tpl"), 0o755)
			a.AddTemplate(t, "tpl")
			sb, err := a.CreateSandbox(ctx, cube.CreateRequest{Template: "tpl", Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.PauseSandbox(ctx, sb.ID, false); err != nil { // files only: on disk at once
				t.Fatal(err)
			}
			image, err := os.ReadFile(filepath.Join(a.DataDir, "sandboxes", sb.ID, "pause", runtime.FilesImage))
			if err != nil {
				t.Fatal(err)
			}
			crashAt(t, point, func() { b.ConnectSandbox(ctx, sb.ID, cube.ConnectRequest{Timeout: time.Minute, MoveFrom: "a"}) })
			b = b.Restart(t)
			// The crashed node never tells a how it went: a's wait ends.
			a.HandedOver(ctx, sb.ID)

			rec, err := a.Store.Sandboxes().Get(ctx, sb.ID)
			if err != nil {
				t.Fatalf("the sandbox's record after a crash at %s: %v", point, err)
			}
			want := map[bool]string{true: "b", false: "a"}[point == fault.SandboxMoveAfterRecord]
			if rec.Node != want || rec.State != "paused" {
				t.Fatalf("after a crash at %s the record says %s on %q, want paused on %q", point, rec.State, rec.Node, want)
			}
			holder, other := a, b
			if want == "b" {
				holder, other = b, a
			}
			if !holder.Holds(sb.ID) || other.Holds(sb.ID) {
				t.Fatalf("node %s holds it %v, the other %v", want, holder.Holds(sb.ID), other.Holds(sb.ID))
			}
			if !strings.HasPrefix(rec.PauseImage, holder.DataDir+string(filepath.Separator)) {
				t.Fatalf("the record names image %s, not node %s's", rec.PauseImage, want)
			}
			if got, err := os.ReadFile(filepath.Join(rec.PauseImage, runtime.FilesImage)); err != nil || string(got) != string(image) {
				t.Fatalf("the image the record names: %q %v, want %q", got, err, image)
			}
			if got := names(filepath.Join(holder.DataDir, "sandboxes", sb.ID)); !slices.Equal(got, []string{"pause"}) {
				t.Fatalf("node %s's directory of the sandbox holds %v", want, got)
			}
			if _, err := os.Stat(filepath.Join(other.DataDir, "sandboxes", sb.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the node the record does not name kept the sandbox's files: %v", err)
			}
			for _, c := range names(filepath.Join(b.DataDir, "copies")) {
				if strings.HasPrefix(c, ".") {
					t.Fatalf("a partial template copy is left: %s", c)
				}
			}

			// b resumes it, taking it over again when a still has it.
			if _, resumed, err := b.ConnectSandbox(ctx, sb.ID, cube.ConnectRequest{Timeout: time.Minute, MoveFrom: "a"}); err != nil || !resumed {
				t.Fatalf("resume on b after the crash: %v %v", resumed, err)
			}
			wantState(t, b, sb.ID, cube.StateRunning)
			if a.Holds(sb.ID) {
				t.Fatal("a still holds the sandbox b resumed")
			}
		})
	}
}
