package template

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"cube/internal/cube"
	"cube/internal/id"
	"cube/internal/store"
)

// A build by steps is what E2B's SDK template builder asks for: a
// template's base (an image or another template), steps (RUN, COPY, ENV,
// WORKDIR, USER), a start command and a ready command. The steps run in
// gVisor sandboxes on the node; each one's changes are kept as a layer
// (layers.go), the layers flattened into the template's rootfs, and the
// template booted, awaited and snapshotted like any other.

var _ cube.StepBuilder = (*Builder)(nil)

// Defaults of the limits of builds by steps.
const (
	DefaultBuildTimeout  = time.Hour
	DefaultMaxLayerBytes = 8 << 30
	DefaultMaxFilesBytes = 1 << 30
	DefaultReadyTimeout  = 2 * time.Minute
	// requestedTTL is how long a requested build may wait for its start.
	requestedTTL = time.Hour
)

// Flags of cube-server that set the limits of builds by steps.
const (
	FlagBuildTimeout  = "--build-timeout"
	FlagMaxLayerBytes = "--max-layer-bytes"
)

// stepBuild is a build by steps this process knows of, from its request
// until it ends.
type stepBuild struct {
	job      *store.Job
	spec     cube.BuildSpec
	log      *buildLog
	cpu, mem int
	started  bool
	// done is set (under Builder.mu) once the build's outcome is being
	// recorded: a new build of the template may be requested from then.
	done bool
	// prepare, when set, readies the next step's layer before its
	// sandbox starts (a COPY step stages its files).
	prepare func(upper string) error
	// held are the layers the build uses, kept from collection, and rootfs
	// the tree it flattened them into.
	held   []string
	rootfs string
}

// splitName splits "name:tag".
func splitName(s string) (name, tag string) {
	name, tag, _ = strings.Cut(s, ":")
	return name, tag
}

// baseName is the template a fromTemplate names: a tag names the current
// build, the only one kept.
func baseName(s string) string {
	name, _ := splitName(s)
	return name
}

// owns reports whether team owns t, and so may build it, tag it or
// change it: the empty team is the node, which owns every one.
func owns(team string, t *store.Template) bool { return team == "" || t.Team == team }

// ownsJob reports whether team owns the build j.
func ownsJob(team string, j *store.Job) bool { return team == "" || j.Team == team }

// RequestBuild implements cube.StepBuilder. The name is looked up among
// req.Team's own templates only (store.OwnTemplate): another team's
// template of that name, public or not, is another template, and a new
// one is made for the team.
func (b *Builder) RequestBuild(ctx context.Context, req cube.BuildIntent) (*cube.BuildTicket, error) {
	name, tag := splitName(req.Name)
	if !id.ValidName(name) || strings.HasPrefix(name, "snap-") {
		return nil, cube.Errorf(cube.Invalid, "invalid template name %q", req.Name).WithField("name")
	}
	tags := slices.Clone(req.Tags)
	if tag != "" && !slices.Contains(tags, tag) {
		tags = append(tags, tag)
	}
	if len(tags) == 0 {
		tags = []string{"default"}
	}
	if err := b.admitBuild(ctx, req.Team); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, cube.Errorf(cube.Unavailable, "the server is shutting down")
	}
	all, err := b.st.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	t := store.OwnTemplate(all, req.Team, name)
	switch {
	case t == nil:
		t = &store.Template{ID: id.New("", 20), Team: req.Team, Aliases: []string{name}, Status: store.TemplateBuilding, Node: b.cfg.NodeID,
			CreatedAt: now, UpdatedAt: now, CPUCount: or(req.CPUCount, DefaultCPUCount), MemoryMB: or(req.MemoryMB, DefaultMemoryMB),
			DiskSizeMB: DefaultDiskSizeMB, Public: isDefault(req.Team, "", []string{name})}
	case t.SourceSandbox != "":
		return nil, cube.Errorf(cube.Conflict, "%q names a snapshot: choose another template name", name)
	case t.Status == store.TemplateDeleting:
		return nil, cube.Errorf(cube.Conflict, "template %q is being deleted: try again in a moment", name)
	case t.Status == store.TemplateBuilding && t.BuildJob != "" && b.builds[t.BuildJob] == nil:
		return nil, cube.Errorf(cube.Conflict, "template %q is building from an image (job %s): wait until it is done", name, t.BuildJob)
	}
	for _, sb := range b.builds {
		if sb.job.TemplateID != t.ID || sb.done {
			continue
		}
		if sb.started {
			return nil, cube.Errorf(cube.Conflict, "template %q has a build in progress (%s): wait for it to end, or follow it with GET /templates/%s/builds/%s/status", name, sb.job.ID, t.ID, sb.job.ID)
		}
		// Requested but never started (a client that died while
		// uploading): the new request takes its place.
		delete(b.builds, sb.job.ID)
		go func() {
			b.fail(sb, "superseded by a newer build of the template before it started", "base")
			sb.log.close()
		}()
	}
	job := &store.Job{ID: id.New("", 20), Team: t.Team, TemplateID: t.ID, Phase: store.PhaseRequested, CreatedAt: now, UpdatedAt: now, Node: b.cfg.NodeID,
		Steps: true, Tags: tags, CPUCount: req.CPUCount, MemoryMB: req.MemoryMB}
	if err := b.st.Jobs().Put(ctx, job); err != nil {
		return nil, err
	}
	if t.Status == store.TemplateBuilding || t.Status == store.TemplateFailed {
		// No build serves the template yet: this one is its first.
		t.Status, t.Error, t.BuildJob, t.UpdatedAt = store.TemplateBuilding, "", job.ID, now
		if err := b.st.Templates().Put(ctx, t); err != nil {
			return nil, err
		}
	}
	sb := &stepBuild{job: job, log: b.newBuildLog(job.ID), cpu: or(req.CPUCount, t.CPUCount), mem: or(req.MemoryMB, t.MemoryMB)}
	b.builds[job.ID] = sb
	b.expireRequested(job.ID)
	b.log.Info("template build requested", "template", t.ID, "name", name, "build", job.ID)
	return &cube.BuildTicket{TemplateID: t.ID, BuildID: job.ID, Names: slices.Clone(t.Aliases), Tags: tags, Public: t.Public}, nil
}

// expireRequested ends a requested build whose start never comes.
func (b *Builder) expireRequested(buildID string) {
	time.AfterFunc(requestedTTL, func() {
		b.mu.Lock()
		sb := b.builds[buildID]
		if sb == nil || sb.started {
			b.mu.Unlock()
			return
		}
		delete(b.builds, buildID)
		b.mu.Unlock()
		b.fail(sb, "the build was requested but never started within an hour", "base")
		sb.log.close()
	})
}

// StartBuild implements cube.StepBuilder. Another team's build is not
// found; the template it builds from (FromTemplate) is the team's own or a
// public one (store.FindTemplate), and any other is not found either.
func (b *Builder) StartBuild(ctx context.Context, team, templateID, buildID string, spec cube.BuildSpec) error {
	if _, ok := b.cfg.Snapshotter.(StepRunner); !ok {
		return cube.ErrNotSupported
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sb := b.builds[buildID]
	if sb == nil || sb.job.TemplateID != templateID || !ownsJob(team, sb.job) {
		if j, err := b.st.Jobs().Get(ctx, buildID); err == nil && j.TemplateID == templateID && ownsJob(team, j) {
			return cube.Errorf(cube.Conflict, "build %q of template %q has already run (%s): request a new build", buildID, templateID, strings.ToLower(string(j.Phase)))
		}
		return cube.Errorf(cube.NotFound, "build %q of template %q not found: request one with POST /v3/templates", buildID, templateID)
	}
	if sb.started {
		return cube.Errorf(cube.Conflict, "build %q has already started", buildID)
	}
	for i, s := range spec.Steps {
		if s.Type == cube.StepCopy {
			if _, err := os.Stat(b.filesPath(templateID, s.FilesHash)); err != nil {
				return cube.Errorf(cube.Invalid, "the files of step %d (COPY %s) were not uploaded: upload them first (GET /templates/%s/files/%s)", i+1, s.Args[0], templateID, s.FilesHash)
			}
		}
	}
	if spec.FromTemplate != "" {
		all, err := b.st.Templates().List(ctx)
		if err != nil {
			return err
		}
		base := store.FindTemplate(all, sb.job.Team, baseName(spec.FromTemplate))
		if base == nil || base.Status != store.TemplateReady {
			return cube.Errorf(cube.Invalid, "base template %q not found or not ready", spec.FromTemplate).WithField("fromTemplate")
		}
		if base.SourceSandbox != "" {
			return cube.Errorf(cube.Invalid, "%q is a snapshot, whose files live in its memory image: build from a template, or create sandboxes from the snapshot itself", spec.FromTemplate).WithField("fromTemplate")
		}
		if base.ID == templateID {
			return cube.Errorf(cube.Invalid, "a template cannot be built from itself").WithField("fromTemplate")
		}
	}
	sb.started, sb.spec = true, spec
	sb.job.Phase, sb.job.UpdatedAt = store.PhaseWaiting, time.Now().UTC()
	if err := b.st.Jobs().Put(ctx, sb.job); err != nil {
		return err
	}
	if ahead := len(b.waiting); ahead > 0 || len(b.sem) == cap(b.sem) {
		sb.log.infof("base", fmt.Sprintf("Waiting for a build slot: %d running, %d waiting before this build", len(b.sem), ahead))
	}
	b.waiting = append(b.waiting, buildID)
	b.wg.Add(1)
	go b.runStepBuild(b.track(buildID, sb.job.Team), sb)
	return nil
}
