package gvisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/hoststat"
	"cube/internal/runtime"
	"cube/internal/testenv"
)

// These tests restore sandboxes whose memory is shared copy-on-write
// with their image (the runtime's default) and check the memory of each
// byte for byte with the pages workload.

func (f *fixture) pagesSpec(t *testing.T, id string, mib int) runtime.Spec {
	if _, err := os.Stat(filepath.Join(f.agent, "pages")); err != nil {
		testenv.BuildStatic(t, "./internal/runtime/gvisor/testdata/pages", f.agent, "pages")
	}
	s := f.spec(id)
	s.Args = []string{runtime.AgentMount + "/pages", "serve", fmt.Sprint(mib)}
	return s
}

// bootPages boots a sandbox of the pages workload with mib MiB filled.
func (f *fixture) bootPages(t *testing.T, id string, mib int) runtime.Sandbox {
	t.Helper()
	sb, err := f.rt.Boot(ctx(t), f.pagesSpec(t, id, mib))
	if err != nil {
		t.Fatal(err)
	}
	pages(t, sb, "verify")
	return sb
}

// restorePages restores image into a new sandbox of the pages workload.
func (f *fixture) restorePages(t *testing.T, image, id string, mib int) runtime.Sandbox {
	t.Helper()
	sb, err := f.rt.Restore(ctx(t), image, f.pagesSpec(t, id, mib))
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func checkpoint(t *testing.T, sb runtime.Sandbox, image string, leaveRunning bool) {
	t.Helper()
	if err := sb.Checkpoint(ctx(t), image, leaveRunning); err != nil {
		t.Fatal(err)
	}
}

// pages runs one pages command in sb and fails the test unless it
// answers "ok"; PID 1 may still be filling its memory right after boot.
func pages(t *testing.T, sb runtime.Sandbox, args ...string) {
	t.Helper()
	var out []byte
	var err error
	for i := 0; i < 100; i++ {
		out, err = sb.Exec(ctx(t), append([]string{runtime.AgentMount + "/pages"}, args...)...)
		if err == nil || !strings.Contains(string(out), "connect") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || !strings.HasPrefix(string(out), "ok ") {
		t.Fatalf("pages %v in %s: %v: %s", args, sb.ID(), err, out)
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// dropCache asks the host to forget path's cached pages, so that what a
// sandbox reads next comes from the file, not from a copy in memory.
func dropCache(t *testing.T, path string) {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

func TestSharedMemoryRestoresExactly(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a := f.bootPages(t, "sma", 48)
	// Every third page at a second version: the image holds a mix.
	pages(t, a, "write", "3")
	img := filepath.Join(t.TempDir(), "img")
	checkpoint(t, a, img, true)
	sum := fileSum(t, filepath.Join(img, "pages.img"))

	b := f.restorePages(t, img, "smb", 48)
	p, err := f.rt.Prepare(c, img, f.pagesSpec(t, "smc", 48))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := p.Restore(c, img)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []runtime.Sandbox{a, b, cc} {
		pages(t, sb, "verify")
	}
	// One sandbox writes every page: its copies are its own.
	pages(t, b, "write", "1")
	pages(t, cc, "verify")
	pages(t, a, "verify")
	// A fork shares the restored pages with its child, which rewrites
	// all of them; the parent still sees its own.
	pages(t, cc, "fork")
	pages(t, b, "fork")
	if got := fileSum(t, filepath.Join(img, "pages.img")); got != sum {
		t.Fatal("a sandbox's writes reached the image it shares")
	}
}

func TestSharedMemorySnapshotChain(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a := f.bootPages(t, "sca", 32)
	dir := t.TempDir()
	img1 := filepath.Join(dir, "1")
	checkpoint(t, a, img1, false)
	// Each link restores the last image, changes some pages and is saved
	// again; every restore along the chain is exact.
	prev, sb := img1, runtime.Sandbox(nil)
	for i, stride := range []string{"5", "7", "2"} {
		sb = f.restorePages(t, prev, fmt.Sprintf("scb%d", i), 32)
		pages(t, sb, "verify")
		pages(t, sb, "write", stride)
		next := filepath.Join(dir, fmt.Sprint(i+2))
		if err := sb.Checkpoint(c, next, true); err != nil {
			t.Fatal(err)
		}
		// Saved while running: it goes on with the same memory.
		pages(t, sb, "verify")
		prev = next
	}
	last := f.restorePages(t, prev, "scz", 32)
	pages(t, last, "verify")
	pages(t, last, "write", "1")
	pages(t, sb, "verify")
}

func TestSharedMemoryOutlivesItsImage(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a, err := f.rt.Boot(c, f.pagesSpec(t, "soa", 32))
	if err != nil {
		t.Fatal(err)
	}
	pages(t, a, "write", "4")
	img := filepath.Join(t.TempDir(), "img")
	checkpoint(t, a, img, false)
	b := f.restorePages(t, img, "sob", 32)
	// The template is deleted and its pages leave the cache: the sandbox
	// holds the file open and reads it back from disk.
	dropCache(t, filepath.Join(img, "pages.img"))
	if err := os.RemoveAll(img); err != nil {
		t.Fatal(err)
	}
	pages(t, b, "verify")
	pages(t, b, "fork")
	pages(t, b, "write", "3")
	// A snapshot of it copies what it still shares into the new image.
	img2 := filepath.Join(t.TempDir(), "img2")
	checkpoint(t, b, img2, true)
	d := f.restorePages(t, img2, "sod", 32)
	pages(t, d, "verify")
	pages(t, b, "write", "1")
}

func TestSharedMemorySurvivesAKillMidWrite(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a := f.bootPages(t, "ska", 64)
	img := filepath.Join(t.TempDir(), "img")
	checkpoint(t, a, img, false)
	sum := fileSum(t, filepath.Join(img, "pages.img"))
	b := f.restorePages(t, img, "skb", 64)
	s := f.restorePages(t, img, "sks", 64)
	pages(t, b, "verify")
	// b is killed while it copies pages away from the image, and s is
	// being saved when its save is cut short.
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Exec(context.Background(), runtime.AgentMount+"/pages", "write", "1")
	}()
	cut, cancel := context.WithTimeout(c, 150*time.Millisecond)
	err := s.Checkpoint(cut, filepath.Join(t.TempDir(), "cut"), true)
	cancel()
	t.Logf("save cut short: %v", err)
	time.Sleep(200 * time.Millisecond)
	if err := b.Kill(c); err != nil {
		t.Fatal(err)
	}
	<-done
	pages(t, s, "verify")
	pages(t, s, "write", "2")
	if got := fileSum(t, filepath.Join(img, "pages.img")); got != sum {
		t.Fatal("the image changed")
	}
	d := f.restorePages(t, img, "skd", 64)
	pages(t, d, "verify")
}

// Fifty sandboxes restored from one image hold one copy of its memory
// between them, not fifty.
func TestSharedMemoryFiftySandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("restores fifty sandboxes")
	}
	const n, mib = 50, 64
	f := newFixture(t)
	c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := f.bootPages(t, "sfa", mib)
	img := filepath.Join(t.TempDir(), "img")
	checkpoint(t, a, img, false)
	before := hoststat.Read("/proc")
	var sbs []runtime.Sandbox
	for i := 0; i < n; i++ {
		sb, err := f.rt.Restore(c, img, f.pagesSpec(t, fmt.Sprintf("sf%02d", i), mib))
		if err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		sbs = append(sbs, sb)
	}
	// Every sandbox reads every page of its memory.
	for _, sb := range sbs {
		pages(t, sb, "verify")
	}
	kib, procs, err := hoststat.RunscPSS("/proc", f.rt.cfg.Root)
	if err != nil {
		t.Fatal(err)
	}
	after := hoststat.Read("/proc")
	perMiB := float64(kib) / 1024 / n
	t.Logf("%d sandboxes of a %d MiB image: runsc PSS %.0f MiB over %d processes (%.1f MiB per sandbox); host memory available fell %.0f MiB",
		n, mib, float64(kib)/1024, procs, perMiB, (float64(before.MemAvailableBytes)-float64(after.MemAvailableBytes))/(1<<20))
	// A private copy each would be at least n × mib.
	if perMiB >= mib/2 {
		t.Fatalf("%.1f MiB per sandbox: the image's %d MiB are not shared", perMiB, mib)
	}
	// One writes all its pages; the rest still read theirs exactly.
	pages(t, sbs[0], "write", "1")
	pages(t, sbs[n-1], "verify")
}

// A stock runsc, which lacks --cow-restore, is refused at start with what
// to do, unless private memory was asked for.
func TestStockRunscNeedsPrivateMemory(t *testing.T) {
	dir := t.TempDir()
	stock := filepath.Join(dir, "runsc")
	script := "#!/bin/sh\nfor a; do [ \"$a\" = --cow-restore=false ] && { echo 'flag provided but not defined: -cow-restore' >&2; echo usage >&2; exit 2; }; done\nexit 0\n"
	if err := os.WriteFile(stock, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Runsc: stock, Root: filepath.Join(dir, "root"), Bundles: filepath.Join(dir, "bundles")}
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), "-cow-restore") || !strings.Contains(err.Error(), "--private-memory") || !strings.Contains(err.Error(), "make bin/runsc") {
		t.Fatalf("New with a stock runsc: %v", err)
	}
	cfg.PrivateMemory = true
	if _, err := New(cfg); err != nil {
		t.Fatalf("New with a stock runsc and private memory: %v", err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	ia, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(ia, ib)
}

// A snapshot of a sandbox that shares its image's memory writes only the
// pages it has of its own, and carries the images it needs hard-linked:
// deleting them elsewhere loses nothing; past four images it is full.
func TestIncrementalSnapshots(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	dir := t.TempDir()
	img := func(name string) string { return filepath.Join(dir, name) }
	a := f.bootPages(t, "ina", 48)
	checkpoint(t, a, img("t"), false)
	tID, err := readImageID(img("t"))
	if err != nil {
		t.Fatalf("a template image has no ID: %v", err)
	}
	full := fileSize(t, filepath.Join(img("t"), "pages.img"))

	// One page in eight changes: the snapshot holds about that much.
	b := f.restorePages(t, img("t"), "inb", 48)
	pages(t, b, "write", "8")
	checkpoint(t, b, img("s1"), true)
	if got := fileSize(t, filepath.Join(img("s1"), "pages.img")); got > full/3 {
		t.Fatalf("incremental pages.img is %d bytes of the template's %d", got, full)
	}
	if !sameFile(t, filepath.Join(img("s1"), "parents", tID, "pages.img"), filepath.Join(img("t"), "pages.img")) {
		t.Fatal("the snapshot does not carry its template's pages as a link")
	}
	pages(t, b, "verify")

	// The template goes; the snapshot still restores, into a prepared
	// container as into a new one.
	if err := os.RemoveAll(img("t")); err != nil {
		t.Fatal(err)
	}
	p, err := f.rt.Prepare(c, img("s1"), f.pagesSpec(t, "inc", 48))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := p.Restore(c, img("s1"))
	if err != nil {
		t.Fatal(err)
	}
	pages(t, cc, "verify")
	pages(t, cc, "write", "5")
	checkpoint(t, cc, img("s2"), false)
	_, chain, err := imageChain(img("s2"))
	if err != nil || len(chain) != 3 {
		t.Fatalf("s2's chain %v, %v: want itself, s1 and the template", chain, err)
	}
	d := f.restorePages(t, img("s2"), "ind", 48)
	pages(t, d, "verify")
	pages(t, d, "fork")
	pages(t, d, "write", "3")
	checkpoint(t, d, img("s3"), true)
	// Restored from a chain of four, a sandbox's snapshot is whole again.
	e := f.restorePages(t, img("s3"), "ine", 48)
	pages(t, e, "verify")
	checkpoint(t, e, img("s4"), true)
	if _, err := os.Stat(filepath.Join(img("s4"), "parents")); !os.IsNotExist(err) {
		t.Fatalf("a snapshot past the chain's length has parents: %v", err)
	}
	if got := fileSize(t, filepath.Join(img("s4"), "pages.img")); got < full*3/4 {
		t.Fatalf("a flattened pages.img is %d bytes of %d", got, full)
	}
	for _, name := range []string{"s1", "s2", "s3"} {
		os.RemoveAll(img(name))
	}
	g := f.restorePages(t, img("s4"), "ing", 48)
	pages(t, g, "verify")
	for _, sb := range []runtime.Sandbox{b, d, e} {
		pages(t, sb, "verify")
	}
}

// An image whose parent is missing is refused with the parent's ID, not
// restored with holes.
func TestIncrementalImageNeedsItsParents(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	dir := t.TempDir()
	a := f.bootPages(t, "ipa", 16)
	tpl := filepath.Join(dir, "t")
	checkpoint(t, a, tpl, false)
	b := f.restorePages(t, tpl, "ipb", 16)
	snap := filepath.Join(dir, "s")
	checkpoint(t, b, snap, true)
	id, _ := readImageID(tpl)
	if err := os.RemoveAll(filepath.Join(snap, "parents")); err != nil {
		t.Fatal(err)
	}
	_, err := f.rt.Restore(c, snap, f.pagesSpec(t, "ipc", 16))
	if err == nil || !strings.Contains(err.Error(), id) {
		t.Fatalf("restore without the parent: %v, want an error naming %s", err, id)
	}
	pages(t, b, "verify")
}
