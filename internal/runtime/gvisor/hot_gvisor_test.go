package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"cube/internal/runtime"
)

// A restore that copies its image's hot pages at once holds the same
// bytes as one that shares them, holds those pages as its own from the
// start (an incremental checkpoint of it, before it writes anything,
// carries them), and its writes to them copy nothing more from the image.
func TestEagerCopyHotPages(t *testing.T) {
	f := newFixture(t)
	ef := f.with(t, func(c *Config) { c.EagerCopy = true })
	c := ctx(t)
	dir := t.TempDir()
	img := func(name string) string { return filepath.Join(dir, name) }
	const mib = 48
	a := f.bootPages(t, "eha", mib)
	pages(t, a, "write", "3")
	checkpoint(t, a, img("t"), false)
	tplID, err := readImageID(img("t"))
	if err != nil {
		t.Fatal(err)
	}
	sum := fileSum(t, filepath.Join(img("t"), "pages.img"))

	// Learn: a shared restore writes every fourth page; its checkpoint
	// says which pages of the template it copied.
	b := f.restorePages(t, img("t"), "ehb", mib)
	pages(t, b, "write", "4")
	checkpoint(t, b, img("probe"), true)
	learnt, err := f.rt.LearnHotPages(img("t"), img("probe"))
	if err != nil {
		t.Fatal(err)
	}
	quarter := int64(mib << 20 / 4)
	if learnt < quarter || learnt > quarter+4<<20 {
		t.Fatalf("learnt %d hot bytes; the probe wrote %d bytes of pages and a little else", learnt, quarter)
	}
	if id, rs, err := readHot(img("t")); err != nil || id != tplID || hotBytes(rs) != learnt {
		t.Fatalf("pages.hot: id %q (want %q), %d bytes (want %d), %v", id, tplID, hotBytes(rs), learnt, err)
	}

	// Restored with the hot pages copied, new and into a prepared
	// container: exact.
	e := ef.restorePages(t, img("t"), "ehe", mib)
	p, err := ef.rt.Prepare(c, img("t"), ef.pagesSpec(t, "ehp", mib))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := p.Restore(c, img("t"))
	if err != nil {
		t.Fatal(err)
	}
	s := f.restorePages(t, img("t"), "ehs", mib) // shares every page
	for _, sb := range []runtime.Sandbox{e, ep, s} {
		pages(t, sb, "verify")
	}
	// The hot pages are e's own: an incremental checkpoint of it holds
	// them, one of the sandbox that shares them does not.
	checkpoint(t, e, img("e1"), true)
	checkpoint(t, s, img("s1"), true)
	t.Logf("hot %d bytes; own pages after restore: eager %d, shared %d", learnt, fileSize(t, filepath.Join(img("e1"), "pages.img")), fileSize(t, filepath.Join(img("s1"), "pages.img")))
	if got := fileSize(t, filepath.Join(img("e1"), "pages.img")); got < learnt {
		t.Fatalf("an eager restore's own pages are %d bytes, fewer than its %d hot bytes", got, learnt)
	}
	if got := fileSize(t, filepath.Join(img("s1"), "pages.img")); got > learnt/4 {
		t.Fatalf("a shared restore's own pages are %d bytes of %d hot", got, learnt)
	}
	// Writing the same pages again copies nothing from the template.
	pages(t, e, "write", "4")
	checkpoint(t, e, img("e2"), true)
	copied, err := readCopied(img("e2"), tplID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the eager restore's rewrite copied %d bytes from the template", hotBytes(copied))
	if n := hotBytes(copied); n > learnt/8 {
		t.Fatalf("the eager restore's writes to its hot pages copied %d bytes from the template", n)
	}
	pages(t, e, "fork")
	pages(t, ep, "write", "1")
	for _, sb := range []runtime.Sandbox{b, e, ep, s} {
		pages(t, sb, "verify")
	}

	// An incremental image lists its own pages as hot; restored eagerly
	// with its parent's list too, it is exact.
	if id, rs, err := readHot(img("e2")); err != nil || id == "" || len(rs) != 1 || rs[0].Off != 0 {
		t.Fatalf("incremental image's pages.hot: %q %v %v", id, rs, err)
	}
	if _, err := os.Stat(filepath.Join(img("e2"), "parents", tplID, hotFile)); err != nil {
		t.Fatalf("the snapshot's parent carries no hot list: %v", err)
	}
	g := ef.restorePages(t, img("e2"), "ehg", mib)
	pages(t, g, "verify")
	pages(t, g, "write", "2")

	// A list written for another image is ignored, not applied.
	if err := writeHot(img("t"), "someoneelse", []pageRange{{0, 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	h := ef.restorePages(t, img("t"), "ehh", mib)
	pages(t, h, "verify")
	pages(t, h, "write", "5")
	if got := fileSum(t, filepath.Join(img("t"), "pages.img")); got != sum {
		t.Fatal("a sandbox's writes reached the image it shares")
	}
}
