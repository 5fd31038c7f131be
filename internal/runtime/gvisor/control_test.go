package gvisor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The server reads a sandbox's stats itself; with Debug, runsc's CLI does.
// Read both ways, one running sandbox's stats agree on what does not move,
// and a sandbox runsc does not know has none.
func TestStatsInProcessMatchTheCLI(t *testing.T) {
	f := newFixture(t)
	cli := f.with(t, func(c *Config) { c.Debug = true }) // every operation through runsc's CLI
	c := ctx(t)
	a, err := f.rt.Boot(c, f.spec("cst"))
	if err != nil {
		t.Fatal(err)
	}
	token(t, a)
	viaCLI := &sandbox{r: cli.rt, id: a.ID(), spec: a.(*sandbox).spec}
	in, err := a.Stats(c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := viaCLI.Stats(c)
	if err != nil {
		t.Fatal(err)
	}
	if in.Pids == 0 || in.Pids != out.Pids || in.MemoryBytes == 0 || out.MemoryBytes == 0 || in.CPUTime == 0 {
		t.Fatalf("stats in-process %+v, CLI %+v", in, out)
	}
	missing := &sandbox{r: f.rt, id: "missing"}
	if _, err := missing.Stats(c); err == nil {
		t.Fatal("stats of a missing sandbox succeeded")
	}
	// Asking leaves runsc's root as it was (no lock file for it).
	if left, _ := filepath.Glob(filepath.Join(f.rt.cfg.Root, "missing_sandbox:*")); len(left) > 0 {
		t.Fatalf("stats of a missing sandbox left %v", left)
	}
}

// The server checkpoints containers itself; with Debug, runsc's CLI
// does. An incremental checkpoint of one sandbox made each way holds the
// same files (runsc's image ID, parents and copied pages among them), and
// each restores exactly; a delete after it leaves nothing.
func TestCheckpointInProcessWritesWhatTheCLIWrites(t *testing.T) {
	f := newFixture(t)
	cli := f.with(t, func(c *Config) { c.Debug = true }) // every operation through runsc's CLI
	dir := t.TempDir()
	img := func(name string) string { return filepath.Join(dir, name) }
	a := f.bootPages(t, "cpa", 16)
	pages(t, a, "write", "3")
	checkpoint(t, a, img("t"), false)

	b := f.restorePages(t, img("t"), "cpb", 16)
	pages(t, b, "write", "4")
	checkpoint(t, b, img("in"), true)
	viaCLI := &sandbox{r: cli.rt, id: b.ID(), spec: b.(*sandbox).spec}
	checkpoint(t, viaCLI, img("cli"), true)

	in, out := imageFiles(t, img("in")), imageFiles(t, img("cli"))
	if !slices.Equal(in, out) {
		t.Fatalf("in-process checkpoint wrote %v, runsc's CLI %v", in, out)
	}
	for _, name := range []string{imageParentsFile, copiedFile} {
		if !slices.Contains(in, name) {
			t.Fatalf("incremental checkpoint has no %s: %v", name, in)
		}
		x, _ := os.ReadFile(filepath.Join(img("in"), name))
		y, _ := os.ReadFile(filepath.Join(img("cli"), name))
		if string(x) != string(y) {
			t.Fatalf("%s: in-process %q, CLI %q", name, x, y)
		}
	}
	idIn, err := readImageID(img("in"))
	if err != nil {
		t.Fatal(err)
	}
	if idCLI, _ := readImageID(img("cli")); idIn == idCLI {
		t.Fatalf("two images share the ID %s", idIn)
	}
	for _, name := range []string{"in", "cli"} {
		sb := f.restorePages(t, img(name), "cpr"+name, 16)
		pages(t, sb, "verify")
	}

	// Deleted, the container and its processes are gone, and a second
	// delete of it is no error and leaves no file of it in runsc's root.
	if err := b.Kill(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Remove(ctx(t), b.ID()); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	ids, err := f.rt.List(ctx(t))
	if err != nil || slices.Contains(ids, b.ID()) {
		t.Fatalf("after delete, containers %v (%v)", ids, err)
	}
	if left, _ := filepath.Glob(filepath.Join(f.rt.cfg.Root, b.ID()+"_sandbox:*")); len(left) > 0 {
		t.Fatalf("after two deletes, runsc's root still has %v", left)
	}
}

// imageFiles lists the files of an image directory, sorted.
func imageFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}
