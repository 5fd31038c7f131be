package template

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/store"
)

// jobPhase waits until the job is in phase, and fails the test if it
// ends in another.
func (f *fixture) jobPhase(t *testing.T, jobID string, phase store.JobPhase) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := f.st.Jobs().Get(context.Background(), jobID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Phase == phase {
			return
		}
		if j.Phase == store.PhaseFailed || j.Phase == store.PhaseReady || time.Now().After(deadline) {
			t.Fatalf("job %s is %s (%s), want %s", jobID, j.Phase, j.Error, phase)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantCancelled checks that a job ended FAILED with CancelReason, and its
// template (the build being its first) too.
func (f *fixture) wantCancelled(t *testing.T, jobID string) *store.Template {
	t.Helper()
	j, err := f.st.Jobs().Get(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Phase != store.PhaseFailed || j.Error != CancelReason {
		t.Errorf("cancelled job %s: %s %q, want FAILED %q", jobID, j.Phase, j.Error, CancelReason)
	}
	tpl := f.template(t, j.TemplateID)
	if tpl.Status != store.TemplateFailed || tpl.Error != CancelReason {
		t.Errorf("template %s of cancelled job %s: %s %q, want failed %q", tpl.ID, jobID, tpl.Status, tpl.Error, CancelReason)
	}
	return tpl
}

func (f *fixture) wantPhase(t *testing.T, jobID string, phase store.JobPhase) {
	t.Helper()
	j, err := f.st.Jobs().Get(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Phase != phase {
		t.Errorf("job %s: %s (%s), want %s", jobID, j.Phase, j.Error, phase)
	}
}

// TestCancelBuilds: with the one build slot taken by team B's image build,
// team A's builds all wait: one requested and never started, one started
// and waiting for the slot, an image build waiting for it. Cancelling team
// A's builds ends those three FAILED at once ("cancelled by the admin"),
// leaves team B's alone, and a second cancel counts nothing. Then team B's
// running image build is cancelled: it stops, FAILED, its template failed
// and its directory gone, as a failed build leaves them.
func TestCancelBuilds(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Snapshotter = stepSnap{c.Snapshotter.(*fakeSnap)}
		c.Concurrency = 1
	})
	f.snap.block = true
	b, ctx := f.b, context.Background()
	img := "oci:" + f.writeLayout(t, testImage(t))

	running := f.build(t, cube.BuildRequest{Team: teamB, Image: img, TemplateID: "b-running"})
	f.jobPhase(t, running.ID, store.PhaseBooting)
	bRequested, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamB, Name: "b-requested"})
	if err != nil {
		t.Fatal(err)
	}

	requested, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "requested"})
	if err != nil {
		t.Fatal(err)
	}
	seedTemplate(t, f, teamA, "abase00000", "abase", false)
	started, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "started"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.StartBuild(ctx, teamA, started.TemplateID, started.BuildID, cube.BuildSpec{FromTemplate: "abase"}); err != nil {
		t.Fatal(err)
	}
	f.jobPhase(t, started.BuildID, store.PhaseWaiting)
	imgWaiting := f.build(t, cube.BuildRequest{Team: teamA, Image: img, TemplateID: "a-image"})
	time.Sleep(50 * time.Millisecond)
	f.wantPhase(t, imgWaiting.ID, store.PhasePulling)

	c, failed, err := b.CancelBuilds(ctx, teamA)
	if err != nil || c != 3 || failed != 0 {
		t.Fatalf("CancelBuilds(A) = %d cancelled, %d failed, %v; want 3, 0", c, failed, err)
	}
	for _, id := range []string{requested.BuildID, started.BuildID, imgWaiting.ID} {
		f.wantCancelled(t, id)
	}
	st, err := b.BuildStatus(ctx, teamA, started.TemplateID, started.BuildID, 0)
	if err != nil || st.Status != cube.BuildError || !strings.Contains(logLines(st.Logs), CancelReason) {
		t.Errorf("status of the cancelled build: %+v %v", st, err)
	}
	err = b.StartBuild(ctx, teamA, requested.TemplateID, requested.BuildID, cube.BuildSpec{FromTemplate: "abase"})
	wantKind(t, "starting a cancelled build", err, cube.Conflict)

	// Team B's builds: untouched.
	f.wantPhase(t, running.ID, store.PhaseBooting)
	f.wantPhase(t, bRequested.BuildID, store.PhaseRequested)
	if tpl := f.template(t, "b-running"); tpl.Status != store.TemplateBuilding {
		t.Errorf("team B's template: %s", tpl.Status)
	}

	if c, failed, err := b.CancelBuilds(ctx, teamA); err != nil || c != 0 || failed != 0 {
		t.Errorf("second CancelBuilds(A) = %d, %d, %v; want nothing", c, failed, err)
	}

	// Team B's running image build, and its requested one.
	dir := filepath.Join(f.dataDir, "templates", "b-running")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the running build has no directory: %v", err)
	}
	c, failed, err = b.CancelBuilds(ctx, teamB)
	if err != nil || c != 2 || failed != 0 {
		t.Fatalf("CancelBuilds(B) = %d cancelled, %d failed, %v; want 2, 0", c, failed, err)
	}
	tpl := f.wantCancelled(t, running.ID)
	f.wantCancelled(t, bRequested.BuildID)
	if tpl.Checkpoint != "" || tpl.SizeBytes != 0 {
		t.Errorf("cancelled template keeps a checkpoint: %+v", tpl)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cancelled build left its directory: %v", err)
	}
	b.mu.Lock()
	left := len(b.active) + len(b.builds)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d builds still tracked after every one ended", left)
	}

	// The slot is free again: a new build of team A runs (and blocks).
	f.snap.block = false
	if j := f.wait(t, f.build(t, cube.BuildRequest{Team: teamA, Image: img, TemplateID: "a-again"}).ID); j.Phase != "READY" {
		t.Errorf("a build after the cancel: %+v", j)
	}
}

// blockingBox is the fixture's node with build boxes that run until their
// context ends; entered is told of each.
type blockingBox struct {
	*fakeSnap
	entered chan struct{}
}

func (r blockingBox) WithBuildBox(ctx context.Context, _ node.BuildBox, _ func(context.Context, netip.Addr) error) error {
	select {
	case r.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

func (blockingBox) RetireBuild(*store.Template) {}

// TestCancelRunningStepBuild: a build by steps whose step runs is
// cancelled: the step's box ends, and the build ends FAILED at that step
// with CancelReason, its template (the build was its first) failed, its
// build directory and the step's scratch layer gone.
func TestCancelRunningStepBuild(t *testing.T) {
	entered := make(chan struct{}, 1)
	f := newFixture(t, func(c *Config) { c.Snapshotter = blockingBox{c.Snapshotter.(*fakeSnap), entered} })
	b, ctx := f.b, context.Background()
	seedTemplate(t, f, teamA, "abase00000", "abase", false)
	tk, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "stepper"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamB, Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.StartBuild(ctx, teamA, tk.TemplateID, tk.BuildID, cube.BuildSpec{FromTemplate: "abase",
		Steps: []cube.BuildStep{{Type: cube.StepRun, Args: []string{"sleep 1000"}}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		j, _ := f.st.Jobs().Get(ctx, tk.BuildID)
		if j != nil && j.Phase == store.PhaseFailed && strings.Contains(j.Error, "overlay") {
			t.Skipf("no overlay mounts here: %s", j.Error)
		}
		t.Fatalf("the build's step never ran: %+v", j)
	}

	c, failed, err := b.CancelBuilds(ctx, teamA)
	if err != nil || c != 1 || failed != 0 {
		t.Fatalf("CancelBuilds = %d cancelled, %d failed, %v; want 1, 0", c, failed, err)
	}
	f.wantCancelled(t, tk.BuildID)
	if j, _ := f.st.Jobs().Get(ctx, tk.BuildID); j.FailedStep != "base" {
		t.Errorf("failed step %q, want base (the step that ran)", j.FailedStep)
	}
	if _, err := os.Stat(b.buildDir(tk.TemplateID, tk.BuildID)); !os.IsNotExist(err) {
		t.Errorf("cancelled build left its build directory: %v", err)
	}
	ents, _ := os.ReadDir(b.layersDir())
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("cancelled step left its scratch layer %s", e.Name())
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mounts), f.dataDir) {
		t.Errorf("cancelled step left a mount under %s", f.dataDir)
	}
	f.wantPhase(t, other.BuildID, store.PhaseRequested)
}
