package template

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeUntil calls write(i) for i = 0, 1, … until ctx ends, and returns
// how many calls it made.
func writeUntil(ctx context.Context, t *testing.T, write func(i int) error) int {
	t.Helper()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return i
		default:
		}
		if err := write(i); err != nil {
			t.Fatal(err)
		}
		if i > 20000 {
			t.Fatalf("the step made %d entries and was not stopped", i)
		}
	}
}

// Symbolic links and directories take disk space no regular file shows:
// a step making links with long targets, and no file, is stopped once
// they pass the byte cap.
func TestWatchLayerCountsLinksAndDirectories(t *testing.T) {
	upper := t.TempDir()
	b := &Builder{cfg: Config{MaxLayerBytes: 1 << 20}}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go watchLayer(ctx, cancel, upper, b.layerLimits())
	target := strings.Repeat("x", 2000)
	deadline := time.AfterFunc(10*time.Second, func() { cancel(errors.New("not stopped within 10s")) })
	defer deadline.Stop()
	n := writeUntil(ctx, t, func(i int) error {
		if i%100 == 0 {
			if err := os.Mkdir(filepath.Join(upper, fmt.Sprint(i/100)), 0o755); err != nil {
				return err
			}
		}
		return os.Symlink(target, filepath.Join(upper, fmt.Sprint(i/100), fmt.Sprint(i)))
	})
	if cause := context.Cause(ctx); cause == nil || !strings.Contains(cause.Error(), "more than") {
		t.Fatalf("step ended by %v after %d links, want the layer cap", cause, n)
	}
}

// A step making empty files, which take no bytes, is stopped once their
// count passes the inode cap.
func TestWatchLayerStopsOnInodes(t *testing.T) {
	upper := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go watchLayer(ctx, cancel, upper, layerLimits{bytes: 1 << 40, inodes: 500})
	deadline := time.AfterFunc(10*time.Second, func() { cancel(errors.New("not stopped within 10s")) })
	defer deadline.Stop()
	n := writeUntil(ctx, t, func(i int) error {
		return os.WriteFile(filepath.Join(upper, fmt.Sprint(i)), nil, 0o644)
	})
	if cause := context.Cause(ctx); cause == nil || !strings.Contains(cause.Error(), "more than 500 files") {
		t.Fatalf("step ended by %v after %d files, want the inode cap", cause, n)
	}
}

// measureLayer counts every entry once and every entry's size, and
// stops at the first cap passed, saying which.
func TestMeasureLayer(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a/f"), make([]byte, 1000), 0o644))
	must(os.WriteFile(filepath.Join(dir, "a/b/empty"), nil, 0o644))
	must(os.Symlink(strings.Repeat("t", 300), filepath.Join(dir, "a/l")))
	must(os.Link(filepath.Join(dir, "a/f"), filepath.Join(dir, "a/b/f2")))

	bytes, inodes, err := measureLayer(dir, layerLimits{bytes: 1 << 30, inodes: 100})
	if err != nil {
		t.Fatal(err)
	}
	// dir, a, a/b, a/f, a/b/empty, a/l, a/b/f2
	if inodes != 7 {
		t.Errorf("%d entries, want 7", inodes)
	}
	if bytes < 2*1000+300 {
		t.Errorf("%d bytes, want at least the two names of the file and the link's target", bytes)
	}
	if _, _, err := measureLayer(dir, layerLimits{bytes: 1 << 30, inodes: 6}); err == nil || !strings.Contains(err.Error(), "more than 6 files") {
		t.Errorf("at 6 entries: %v", err)
	}
	if _, _, err := measureLayer(dir, layerLimits{bytes: 1000, inodes: 100}); err == nil || !strings.Contains(err.Error(), "more than") || !strings.Contains(err.Error(), FlagMaxLayerBytes) {
		t.Errorf("at 1000 bytes: %v", err)
	}
}
