package gvisor

import (
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
}
