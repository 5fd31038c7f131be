package template

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/quota"
	"cube/internal/store"
)

const (
	teamA = "team-a"
	teamB = "team-b"
)

// stepSnap is the fixture's node as a StepRunner, so that StartBuild
// takes builds: it has no build boxes, so a started build fails at its
// first step, after finding its base.
type stepSnap struct{ *fakeSnap }

func (stepSnap) WithBuildBox(context.Context, node.BuildBox, func(context.Context, netip.Addr) error) error {
	return errors.New("no build boxes in this test")
}

func (stepSnap) RetireBuild(*store.Template) {}

// seedTemplate records a ready template of team named name, built by a
// job of the team's (ID "job-"+id) and tagged v1.
func seedTemplate(t *testing.T, f *fixture, team, id, name string, public bool) *store.Template {
	t.Helper()
	ctx := context.Background()
	rootfs := filepath.Join(f.dataDir, "rootfs", "seed-"+id)
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	tpl := &store.Template{ID: id, Team: team, Aliases: []string{name}, Status: store.TemplateReady, Public: public,
		Rootfs: rootfs, BuildJob: "job-" + id, CreatedAt: now, UpdatedAt: now,
		Tags: []store.TemplateTag{{Tag: "v1", BuildID: "job-" + id, CreatedAt: now}}}
	if err := f.st.Templates().Put(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	job := &store.Job{ID: "job-" + id, Team: team, TemplateID: id, Phase: store.PhaseReady, Progress: 100, CreatedAt: now, UpdatedAt: now}
	if err := f.st.Jobs().Put(ctx, job); err != nil {
		t.Fatal(err)
	}
	return tpl
}

func wantKind(t *testing.T, what string, err error, kind cube.Kind) {
	t.Helper()
	if cube.KindOf(err) != kind {
		t.Errorf("%s: %v, want %s", what, err, kind)
	}
}

// TestTeamsBuildApart: two teams each build a template called py, and
// each sees its own; neither reads nor touches the other's builds, its
// private template is not found (as one that does not exist), and a
// public one is used and not changed.
func TestTeamsBuildApart(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Snapshotter = stepSnap{c.Snapshotter.(*fakeSnap)} })
	b, ctx := f.b, context.Background()

	ta, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "py"})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamB, Name: "py"})
	if err != nil {
		t.Fatalf("team B's py clashed with team A's: %v", err)
	}
	if ta.TemplateID == tb.TemplateID {
		t.Fatalf("both teams' py are template %s", ta.TemplateID)
	}
	for tk, team := range map[*cube.BuildTicket]string{ta: teamA, tb: teamB} {
		if tpl := f.template(t, tk.TemplateID); tpl.Team != team || tpl.Public {
			t.Errorf("template %s: team %q public %v, want %s's, private", tk.TemplateID, tpl.Team, tpl.Public, team)
		}
		if j, err := f.st.Jobs().Get(ctx, tk.BuildID); err != nil || j.Team != team {
			t.Errorf("build %s: %+v %v, want %s's", tk.BuildID, j, err, team)
		}
	}
	// A's second request for py is a new build of A's py, not of B's.
	ta2, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "py:v2"})
	if err != nil || ta2.TemplateID != ta.TemplateID {
		t.Fatalf("team A's second py: %+v %v, want template %s", ta2, err, ta.TemplateID)
	}

	// Builds: another team's is not found, with the message of one that
	// does not exist.
	_, errB := b.BuildStatus(ctx, teamB, ta2.TemplateID, ta2.BuildID, 0)
	_, errNone := b.BuildStatus(ctx, teamB, ta2.TemplateID, "nosuchbuild", 0)
	wantKind(t, "B's status of A's build", errB, cube.NotFound)
	if errB != nil && errNone != nil && strings.ReplaceAll(errB.Error(), ta2.BuildID, "X") != strings.ReplaceAll(errNone.Error(), "nosuchbuild", "X") {
		t.Errorf("another team's build answers %q, a missing one %q", errB, errNone)
	}
	if st, err := b.BuildStatus(ctx, teamA, ta2.TemplateID, ta2.BuildID, 0); err != nil || st.Status != cube.BuildWaiting {
		t.Errorf("A's status of its build: %+v %v", st, err)
	}
	_, err = b.BuildLogs(ctx, teamB, ta2.TemplateID, ta2.BuildID, cube.BuildLogQuery{})
	wantKind(t, "B's logs of A's build", err, cube.NotFound)
	hash := strings.Repeat("ab", 32)
	_, err = b.FilesPresent(ctx, teamB, ta2.TemplateID, hash)
	wantKind(t, "B's files of A's template", err, cube.NotFound)
	if _, err := b.FilesPresent(ctx, teamA, ta2.TemplateID, hash); err != nil {
		t.Errorf("A's files of its template: %v", err)
	}
	err = b.StartBuild(ctx, teamB, ta2.TemplateID, ta2.BuildID, cube.BuildSpec{FromImage: "busybox"})
	wantKind(t, "B starting A's build", err, cube.NotFound)

	// Tags, public: A's private template is not found by B; its public
	// one is found, and refused for a change.
	secret := seedTemplate(t, f, teamA, "secret0000", "secret", false)
	shared := seedTemplate(t, f, teamA, "shared0000", "shared", true)
	for _, name := range []string{"secret", secret.ID} {
		_, err := b.TemplateTags(ctx, teamB, name)
		wantKind(t, "B's tags of "+name, err, cube.NotFound)
		_, err = b.AssignTags(ctx, teamB, name, []string{"x"})
		wantKind(t, "B tagging "+name, err, cube.NotFound)
		wantKind(t, "B untagging "+name, b.RemoveTags(ctx, teamB, name, []string{"v1"}), cube.NotFound)
		_, err = b.SetPublic(ctx, teamB, name, true)
		wantKind(t, "B publishing "+name, err, cube.NotFound)
	}
	_, err = b.BuildJob(ctx, teamB, "job-"+secret.ID)
	wantKind(t, "B's job of A's template", err, cube.NotFound)
	if j, err := b.BuildJob(ctx, teamA, "job-"+secret.ID); err != nil || j.TemplateID != secret.ID {
		t.Errorf("A's job: %+v %v", j, err)
	}
	if tags, err := b.TemplateTags(ctx, teamB, "shared"); err != nil || len(tags) != 1 || tags[0].Tag != "v1" {
		t.Errorf("B's tags of a public template: %+v %v", tags, err)
	}
	_, err = b.AssignTags(ctx, teamB, "shared", []string{"x"})
	wantKind(t, "B tagging a public template", err, cube.Forbidden)
	wantKind(t, "B untagging a public template", b.RemoveTags(ctx, teamB, "shared", []string{"v1"}), cube.Forbidden)
	_, err = b.SetPublic(ctx, teamB, "shared", false)
	wantKind(t, "B making A's public template private", err, cube.Forbidden)
	_, err = b.FilesPresent(ctx, teamB, shared.ID, hash)
	wantKind(t, "B's files of a public template", err, cube.Forbidden)
	if tpl := f.template(t, shared.ID); !tpl.Public || len(tpl.Tags) != 1 {
		t.Errorf("B changed A's public template: %+v", tpl)
	}
	if _, err := b.AssignTags(ctx, teamA, "secret", []string{"prod"}); err != nil {
		t.Errorf("A tagging its template: %v", err)
	}

	// FROM another team's private template: not found; from a public one
	// (or its own) the build starts, and runs from it.
	err = b.StartBuild(ctx, teamB, tb.TemplateID, tb.BuildID, cube.BuildSpec{FromTemplate: "secret"})
	wantKind(t, "B building from A's private template", err, cube.Invalid)
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("B building from A's private template: %v, want it not found", err)
	}
	err = b.StartBuild(ctx, teamB, tb.TemplateID, tb.BuildID, cube.BuildSpec{FromTemplate: secret.ID + ":v1"})
	wantKind(t, "B building from A's private template by ID", err, cube.Invalid)
	if err := b.StartBuild(ctx, teamB, tb.TemplateID, tb.BuildID, cube.BuildSpec{FromTemplate: "shared:v1"}); err != nil {
		t.Fatalf("B building from A's public template: %v", err)
	}
	var st *cube.BuildStatus
	waitFor(t, func() bool {
		st, err = b.BuildStatus(ctx, teamB, tb.TemplateID, tb.BuildID, 0)
		return err == nil && st.Status == cube.BuildError
	})
	if text := logLines(st.Logs); !strings.Contains(text, "FROM template shared:v1 ("+shared.ID+")") {
		t.Errorf("B's build from a public template did not start from it:\n%s", text)
	}
}

func logLines(logs []cube.BuildLogEntry) string {
	var s strings.Builder
	for _, e := range logs {
		s.WriteString(e.Message + "\n")
	}
	return s.String()
}

// TestTeamsImageBuildNames: a build from an image claims names within its
// team; a template ID is unique across teams, and taking another team's
// says nothing of it.
func TestTeamsImageBuildNames(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	img := "oci:" + f.writeLayout(t, testImage(t))
	seedTemplate(t, f, teamA, "secret0000", "secret", false)

	j := f.wait(t, f.build(t, cube.BuildRequest{Team: teamB, Image: img, TemplateID: "b-one", Aliases: []string{"secret"}}).ID)
	if j.Phase != "READY" {
		t.Fatalf("team B's build named like team A's template: %+v", j)
	}
	if tpl := f.template(t, "b-one"); tpl.Team != teamB || tpl.Public {
		t.Errorf("B's template: team %q public %v", tpl.Team, tpl.Public)
	}
	if _, err := f.b.BuildJob(ctx, teamA, j.ID); cube.KindOf(err) != cube.NotFound {
		t.Errorf("A reads B's job: %v", err)
	}
	if _, err := f.b.BuildJob(ctx, teamB, j.ID); err != nil {
		t.Errorf("B reads its job: %v", err)
	}
	_, err := f.b.BuildTemplate(ctx, cube.BuildRequest{Team: teamB, Image: img, TemplateID: "secret0000", ProbePort: f.port})
	if cube.KindOf(err) != cube.Conflict || !strings.Contains(err.Error(), "taken") || strings.Contains(err.Error(), "ready") {
		t.Errorf("B taking A's template ID: %v, want a Conflict that says nothing of it", err)
	}
	_, err = f.b.BuildTemplate(ctx, cube.BuildRequest{Team: teamB, Image: img, TemplateID: "b-two", Aliases: []string{"secret"}, ProbePort: f.port})
	if cube.KindOf(err) != cube.Conflict || !strings.Contains(err.Error(), "b-one") {
		t.Errorf("B reusing its own alias: %v, want a Conflict naming b-one", err)
	}
}

// TestDefaultTemplateIsPublic: the first team's template named base is
// public when built, made public at start when an install from before
// teams left it private, and stays public.
func TestDefaultTemplateIsPublic(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	img := "oci:" + f.writeLayout(t, testImage(t))
	j := f.wait(t, f.build(t, cube.BuildRequest{Team: cube.FirstTeam, Image: img, TemplateID: "code-interpreter",
		Aliases: []string{DefaultAlias, "code-interpreter-v1"}}).ID)
	if j.Phase != "READY" {
		t.Fatal(j)
	}
	if tpl := f.template(t, "code-interpreter"); !tpl.Public || tpl.Team != cube.FirstTeam {
		t.Errorf("default template: team %q public %v, want the first team's, public", tpl.Team, tpl.Public)
	}
	_, err := f.b.SetPublic(ctx, cube.FirstTeam, DefaultAlias, false)
	if cube.KindOf(err) != cube.Conflict || !f.template(t, "code-interpreter").Public {
		t.Errorf("making the default template private: %v", err)
	}
	// Another team's base is its own, and private.
	tk, err := f.b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: DefaultAlias})
	if err != nil || tk.Public || tk.TemplateID == "code-interpreter" {
		t.Errorf("team A's base: %+v %v, want a private template of its own", tk, err)
	}

	// Before teams: built without a team, given to the first team at
	// start, private; Recover makes it public.
	g := newFixture(t)
	old := seedTemplate(t, g, cube.FirstTeam, "code-interpreter", DefaultAlias, false)
	seedTemplate(t, g, teamA, "other0000", "other", false)
	if err := g.b.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if !g.template(t, old.ID).Public {
		t.Error("Recover left the default template private")
	}
	if g.template(t, "other0000").Public {
		t.Error("Recover made another template public")
	}
	// A new install's first step build of base is public too.
	h := newFixture(t)
	if tk, err := h.b.RequestBuild(ctx, cube.BuildIntent{Team: cube.FirstTeam, Name: DefaultAlias}); err != nil || !tk.Public {
		t.Errorf("the first team's step build of base: %+v %v, want public", tk, err)
	}
}

// TestBuildQuota: a team with a quota of one build at once gets its
// second build refused (Capacity, naming the quota) while the first is in
// progress, and may build again once it is over; another team is not
// held back.
func TestBuildQuota(t *testing.T) {
	var f *fixture
	f = newFixture(t, func(c *Config) {
		c.Snapshotter = stepSnap{c.Snapshotter.(*fakeSnap)}
		c.Quota = quota.New(c.Store, func(_ context.Context, team string) (cube.Quotas, error) {
			if team == teamA {
				return cube.Quotas{Builds: 1}, nil
			}
			return cube.Quotas{}, nil
		})
	})
	b, ctx := f.b, context.Background()
	first, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "two"})
	wantKind(t, "a second build at once", err, cube.Capacity)
	if err == nil || !strings.Contains(err.Error(), "builds") {
		t.Errorf("the refusal does not name the quota: %v", err)
	}
	if _, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamB, Name: "two"}); err != nil {
		t.Fatalf("team B held back by team A's quota: %v", err)
	}
	// The first build over (failed), a new one is admitted.
	if err := f.st.Jobs().Update(ctx, first.BuildID, func(j *store.Job) error { j.Phase = store.PhaseFailed; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RequestBuild(ctx, cube.BuildIntent{Team: teamA, Name: "two"}); err != nil {
		t.Fatalf("a build after the first ended: %v", err)
	}
}
