package template

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"cube/internal/cube"
	"cube/internal/envdclient"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/node"
	"cube/internal/oci"
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

var hashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

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

// findTemplate returns the template with ID or alias name, or nil.
func findTemplate(all []*store.Template, name string) *store.Template {
	for _, t := range all {
		if t.ID == name || slices.Contains(t.Aliases, name) {
			return t
		}
	}
	return nil
}

// RequestBuild implements cube.StepBuilder.
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
	t := findTemplate(all, name)
	switch {
	case t == nil:
		t = &store.Template{ID: id.New("", 20), Aliases: []string{name}, Status: store.TemplateBuilding, Node: b.cfg.NodeID,
			CreatedAt: now, UpdatedAt: now, CPUCount: or(req.CPUCount, DefaultCPUCount), MemoryMB: or(req.MemoryMB, DefaultMemoryMB),
			DiskSizeMB: DefaultDiskSizeMB}
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
	job := &store.Job{ID: id.New("", 20), TemplateID: t.ID, Phase: store.PhaseRequested, CreatedAt: now, UpdatedAt: now, Node: b.cfg.NodeID,
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

func (b *Builder) filesDir() string { return filepath.Join(b.cfg.DataDir, "buildfiles") }

// filesPath is where the files of a COPY step are kept: per template, so
// that an upload can serve only builds of the template it was made for.
func (b *Builder) filesPath(templateID, hash string) string {
	return filepath.Join(b.filesDir(), templateID, hash+".tar")
}

// FilesPresent implements cube.StepBuilder.
func (b *Builder) FilesPresent(ctx context.Context, templateID, hash string) (bool, error) {
	if !hashPattern.MatchString(hash) {
		return false, cube.Errorf(cube.Invalid, "invalid files hash %q: want 64 hex digits", hash)
	}
	if !id.ValidName(templateID) {
		return false, cube.Errorf(cube.NotFound, "template %q not found", templateID)
	}
	if _, err := b.st.Templates().Get(ctx, templateID); err != nil {
		return false, notFound(err, "template %q not found", templateID)
	}
	_, err := os.Stat(b.filesPath(templateID, hash))
	return err == nil, nil
}

// MaxFilesBytes implements cube.StepBuilder.
func (b *Builder) MaxFilesBytes() int64 { return b.cfg.MaxFilesBytes }

// PutFiles implements cube.StepBuilder. The archive is stored as a plain
// tar (a gzipped one is unpacked on the way in), checked entry by entry,
// and published under its hash only once complete (and, with verify, only
// if the tar's SHA-256 is the hash). Files already published under the
// hash stay: the first complete upload is the one builds use, so a later
// upload under the same name, from whatever link, cannot swap them.
func (b *Builder) PutFiles(ctx context.Context, templateID, hash string, body io.Reader, verify bool) error {
	if _, err := b.FilesPresent(ctx, templateID, hash); err != nil {
		return err
	}
	dir := filepath.Dir(b.filesPath(templateID, hash))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	br := bufio.NewReader(body)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return cube.Errorf(cube.Invalid, "the files are not a valid gzip archive: %v", err)
		}
		src = zr
	}
	limited := &io.LimitedReader{R: src, N: b.cfg.MaxFilesBytes + 1}
	sum := sha256.New()
	tee := io.TeeReader(limited, io.MultiWriter(tmp, sum))
	tr := tar.NewReader(tee)
	for {
		_, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if limited.N <= 0 {
			return cube.Errorf(cube.TooLarge, "the files are larger than %s unpacked, the most a copy step takes", oci.HumanBytes(b.cfg.MaxFilesBytes))
		}
		if err != nil {
			return cube.Errorf(cube.Invalid, "the files are not a tar archive: %v", err)
		}
	}
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return err
	}
	if limited.N <= 0 {
		return cube.Errorf(cube.TooLarge, "the files are larger than %s unpacked, the most a copy step takes", oci.HumanBytes(b.cfg.MaxFilesBytes))
	}
	if got := hex.EncodeToString(sum.Sum(nil)); verify && got != strings.ToLower(hash) {
		return cube.Errorf(cube.Invalid, "the files' SHA-256 is %s, which does not match %s, the hash the upload link names: the upload is discarded", got, hash)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	// A hard link publishes the files only where none are: unlike a
	// rename, it never replaces what an earlier upload stored.
	if err := os.Link(tmp.Name(), b.filesPath(templateID, hash)); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// StartBuild implements cube.StepBuilder.
func (b *Builder) StartBuild(ctx context.Context, templateID, buildID string, spec cube.BuildSpec) error {
	if _, ok := b.cfg.Snapshotter.(StepRunner); !ok {
		return cube.ErrNotSupported
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sb := b.builds[buildID]
	if sb == nil || sb.job.TemplateID != templateID {
		if j, err := b.st.Jobs().Get(ctx, buildID); err == nil && j.TemplateID == templateID {
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
		base := findTemplate(all, baseName(spec.FromTemplate))
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
	go b.runStepBuild(sb)
	return nil
}

// runStepBuild runs a started build and records how it ended.
func (b *Builder) runStepBuild(sb *stepBuild) {
	defer b.wg.Done()
	defer b.release(sb)
	ctx, cancel := context.WithTimeoutCause(b.ctx, b.cfg.BuildTimeout, errBuildTimeout)
	defer cancel()
	select {
	case b.sem <- struct{}{}:
		defer func() { <-b.sem }()
	case <-ctx.Done():
		b.fail(sb, b.reason(ctx, ctx.Err()), "base")
		return
	}
	b.mu.Lock()
	b.waiting = slices.DeleteFunc(b.waiting, func(s string) bool { return s == sb.job.ID })
	b.mu.Unlock()
	sb.job.Phase, sb.job.UpdatedAt = store.PhaseSteps, time.Now().UTC()
	b.st.Jobs().Put(context.Background(), sb.job)

	start := time.Now()
	tpl, err := b.buildSteps(ctx, sb)
	if err == nil {
		err = b.publish(sb, tpl)
	}
	buildEnded(sb.job.CreatedAt, err)
	if err != nil {
		step := "finalize"
		var se *stepError
		if errors.As(err, &se) {
			step = se.step
		}
		b.fail(sb, b.reason(ctx, err), step)
		return
	}
	sb.log.infof("finalize", fmt.Sprintf("Template %s ready in %s", tpl.ID, time.Since(start).Round(time.Millisecond)))
	// What the build replaced: the previous build's layers and tree.
	if err := b.CollectLayers(context.Background()); err != nil {
		b.log.Warn("collect build layers", "err", err)
	}
}

var errBuildTimeout = errors.New("build timeout")

// reason is the message a failed build reports.
func (b *Builder) reason(ctx context.Context, err error) string {
	switch {
	case errors.Is(context.Cause(ctx), errBuildTimeout):
		return fmt.Sprintf("the build took longer than %s, the most a build may (raise it with cube-server %s)", b.cfg.BuildTimeout, FlagBuildTimeout)
	case b.ctx.Err() != nil:
		return ShutdownReason
	}
	var se *stepError
	if errors.As(err, &se) && se.step != "base" && se.step != "finalize" {
		var ee *envdclient.ExitError
		if errors.As(err, &ee) {
			return fmt.Sprintf("step %s failed: the command exited with code %d", se.step, ee.Code)
		}
		return fmt.Sprintf("step %s failed: %v", se.step, se.err)
	}
	return err.Error()
}

// release forgets a build that ended and lets its layers be collected.
func (b *Builder) release(sb *stepBuild) {
	sb.log.close()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.builds, sb.job.ID)
	b.waiting = slices.DeleteFunc(b.waiting, func(s string) bool { return s == sb.job.ID })
	for _, k := range sb.held {
		b.dropLayer(k)
	}
}

// holdLayer counts one more running build of a layer, which keeps it
// from collection, and reports whether the layer is finished.
func (b *Builder) holdLayer(key string) bool {
	b.layerMu.Lock()
	defer b.layerMu.Unlock()
	b.layerUse[key]++
	return b.haveLayer(key)
}

// dropLayer counts one less running build of a layer.
func (b *Builder) dropLayer(key string) {
	b.layerMu.Lock()
	defer b.layerMu.Unlock()
	if b.layerUse[key]--; b.layerUse[key] <= 0 {
		delete(b.layerUse, key)
	}
}

// fail records a build that failed, and its template when the build was
// its first.
func (b *Builder) fail(sb *stepBuild, reason, step string) {
	b.mu.Lock()
	sb.done = true
	b.mu.Unlock()
	sb.log.add("error", step, reason)
	ctx := context.Background()
	now := time.Now().UTC()
	sb.job.Phase, sb.job.Error, sb.job.FailedStep, sb.job.UpdatedAt = store.PhaseFailed, reason, step, now
	if err := b.st.Jobs().Put(ctx, sb.job); err != nil {
		b.log.Warn("record failed build", "build", sb.job.ID, "err", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, err := b.st.Templates().Get(ctx, sb.job.TemplateID); err == nil && t.Status == store.TemplateBuilding && t.BuildJob == sb.job.ID {
		t.Status, t.Error, t.UpdatedAt = store.TemplateFailed, reason, now
		b.st.Templates().Put(ctx, t)
	}
	os.RemoveAll(b.buildDir(sb.job.TemplateID, sb.job.ID))
	b.log.Warn("template build failed", "build", sb.job.ID, "template", sb.job.TemplateID, "step", step, "reason", reason)
}

// buildDir holds the checkpoint of one build of a template.
func (b *Builder) buildDir(tplID, buildID string) string {
	return filepath.Join(b.cfg.DataDir, "templates", tplID, "builds", buildID)
}

// buildSteps runs the build up to its template's snapshot and returns the
// template as the build makes it (not yet stored).
func (b *Builder) buildSteps(ctx context.Context, sb *stepBuild) (*store.Template, error) {
	st, err := b.base(ctx, sb)
	if err != nil {
		return nil, &stepError{"base", err}
	}
	if err := b.runSteps(ctx, sb, st); err != nil {
		return nil, err
	}

	sb.log.infof("finalize", fmt.Sprintf("Flattening %d layers into the template's filesystem", len(st.layers)))
	rootfs, err := b.flattenInto(st, sb)
	if err != nil {
		return nil, &stepError{"finalize", fmt.Errorf("flatten layers: %w", err)}
	}
	tpl := &store.Template{
		ID: sb.job.TemplateID, Status: store.TemplateReady, Rootfs: rootfs, Env: st.env, Cwd: st.workdir, User: st.user,
		CPUCount: sb.cpu, MemoryMB: sb.mem, DiskSizeMB: DefaultDiskSizeMB, ProbePort: DefaultProbePort, ProbePath: DefaultProbePath,
		Layers: st.layers, BuildJob: sb.job.ID, Image: sb.spec.FromImage, Node: b.cfg.NodeID,
	}
	if sb.spec.FromTemplate != "" {
		tpl.Image = "template:" + sb.spec.FromTemplate
	}
	if sb.spec.StartCmd != "" {
		tpl.StartCmd = []string{"/bin/sh", "-c", sb.spec.StartCmd}
	}
	dir := b.buildDir(tpl.ID, sb.job.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tpl.Checkpoint = filepath.Join(dir, "checkpoint")
	if sb.spec.StartCmd != "" {
		sb.log.infof("finalize", "Starting: "+sb.spec.StartCmd)
	}
	if sb.spec.ReadyCmd != "" {
		sb.log.infof("finalize", "Waiting for: "+sb.spec.ReadyCmd)
	}
	probe := readiness(sb.spec.ReadyCmd, st, b.cfg.ReadyTimeout, b.cfg.ProbeTimeout)
	err = b.cfg.Snapshotter.BuildSnapshot(ctx, tpl, probe, func(p node.Phase) {
		if p == node.PhaseSnapshotting {
			sb.log.infof("finalize", "Snapshotting the running template")
		}
	})
	if err != nil {
		return nil, &stepError{"finalize", err}
	}
	return tpl, nil
}

// base unpacks or finds the build's base and returns the state the steps
// start from.
func (b *Builder) base(ctx context.Context, sb *stepBuild) (*stepState, error) {
	st := &stepState{user: stepUser, workdir: "/home/" + stepUser, cached: true}
	if sb.spec.FromTemplate != "" {
		all, err := b.st.Templates().List(ctx)
		if err != nil {
			return nil, err
		}
		t := findTemplate(all, baseName(sb.spec.FromTemplate))
		if t == nil || t.Status != store.TemplateReady || t.Rootfs == "" {
			return nil, fmt.Errorf("base template %q is gone or not ready", sb.spec.FromTemplate)
		}
		sb.log.infof("base", fmt.Sprintf("FROM template %s (%s)", sb.spec.FromTemplate, t.ID))
		st.key, st.lower, st.env = baseKey(t.Rootfs), []string{t.Rootfs}, slices.Clone(t.Env)
		if t.User != "" {
			st.user = t.User
		}
		if t.Cwd != "" {
			st.workdir = t.Cwd
		}
		return st, nil
	}
	src, err := oci.ParseSource(sb.spec.FromImage)
	if err != nil {
		return nil, err
	}
	if src.Kind != oci.KindRegistry {
		if src.Path, err = b.localPath(src); err != nil {
			return nil, pullError(src, err)
		}
	}
	sb.log.infof("base", "FROM "+sb.spec.FromImage)
	img, err := oci.Open(ctx, src, oci.PullOptions{
		Username: sb.spec.RegistryUsername, Password: sb.spec.RegistryPassword,
		InsecureRegistries: b.cfg.InsecureRegistries, CacheDir: filepath.Join(b.cfg.DataDir, "images"),
	})
	if err != nil {
		return nil, pullError(src, err)
	}
	if err := oci.Fetch(ctx, img, nil); err != nil {
		return nil, pullError(src, err)
	}
	rf, err := oci.UnpackLimited(ctx, img, filepath.Join(b.cfg.DataDir, "rootfs"), b.cfg.Limits, nil)
	if err != nil {
		return nil, unpackError(src, err)
	}
	sb.log.infof("base", "Image "+rf.Digest.String()+" unpacked")
	st.key, st.lower, st.env = baseKey(rf.Dir), []string{rf.Dir}, slices.Clone(rf.Config.Env)
	if rf.Config.WorkingDir != "" {
		st.workdir = rf.Config.WorkingDir
	}
	return st, nil
}

// flattenInto makes the template's rootfs from st's layers, once per
// distinct result: <DataDir>/rootfs/b-<key>.
func (b *Builder) flattenInto(st *stepState, sb *stepBuild) (string, error) {
	root := filepath.Join(b.cfg.DataDir, "rootfs")
	final := filepath.Join(root, "b-"+st.key)
	// Held before it exists: collection leaves it alone from here on.
	b.mu.Lock()
	sb.rootfs = final
	b.mu.Unlock()
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	tmp := filepath.Join(root, ".tmp-"+id.New("", 8))
	defer os.RemoveAll(tmp)
	base := st.lower[len(st.lower)-1]
	var layers []string
	for i := len(st.lower) - 2; i >= 0; i-- {
		layers = append(layers, st.lower[i])
	}
	if err := flatten(tmp, base, layers); err != nil {
		return "", fmt.Errorf("%w (the data directory's rootfs/ and layers/ must be on one filesystem)", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another build made the same tree meanwhile: it serves both.
		if _, serr := os.Stat(final); serr == nil {
			return final, nil
		}
		return "", err
	}
	return final, nil
}

// readiness is the probe of a build's template: envd answers, then the
// ready command, if any, exits 0.
func readiness(readyCmd string, st *stepState, timeout, envdTimeout time.Duration) func(ctx context.Context, addr netip.Addr) error {
	envd := Probe(DefaultProbePort, DefaultProbePath, envdTimeout)
	env := envMap(st.env)
	return func(ctx context.Context, addr netip.Addr) error {
		if err := envd(ctx, addr); err != nil {
			return err
		}
		if readyCmd == "" {
			return nil
		}
		deadline := time.Now().Add(timeout)
		for {
			var out strings.Builder
			actx, cancel := context.WithDeadline(ctx, deadline)
			err := runIn(actx, addr, st.user, st.workdir, env, readyCmd, &out)
			cancel()
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !time.Now().Before(deadline) {
				return fmt.Errorf("the ready command %q did not succeed within %s (last: %v %s)", readyCmd, timeout, err, strings.TrimSpace(out.String()))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// publish makes a finished build the template's current one.
func (b *Builder) publish(sb *stepBuild, tpl *store.Template) error {
	ctx := context.Background()
	b.mu.Lock()
	cur, err := b.st.Templates().Get(ctx, tpl.ID)
	if err != nil || cur.Status == store.TemplateDeleting {
		b.mu.Unlock()
		return &stepError{"finalize", errors.New("the template was deleted during its build")}
	}
	now := time.Now().UTC()
	tpl.Aliases, tpl.CreatedAt, tpl.UpdatedAt, tpl.Public = cur.Aliases, cur.CreatedAt, now, cur.Public
	if tpl.CreatedAt.IsZero() {
		tpl.CreatedAt = now
	}
	for _, tag := range sb.job.Tags {
		tpl.Tags = append(tpl.Tags, store.TemplateTag{Tag: tag, BuildID: sb.job.ID, CreatedAt: now})
	}
	err = b.st.Templates().Put(ctx, tpl)
	sb.done = err == nil
	b.mu.Unlock()
	if err != nil {
		return err
	}
	fault.Point(fault.BuildAfterReady)
	if cur.Status == store.TemplateReady && cur.Checkpoint != "" && cur.Checkpoint != tpl.Checkpoint {
		b.cfg.Snapshotter.(StepRunner).RetireBuild(cur)
	}
	sb.job.Phase, sb.job.Progress, sb.job.UpdatedAt = store.PhaseReady, 100, now
	if err := b.st.Jobs().Put(ctx, sb.job); err != nil {
		b.log.Warn("record finished build", "build", sb.job.ID, "err", err)
	}
	b.log.Info("template build ready", "template", tpl.ID, "build", sb.job.ID, "layers", len(tpl.Layers))
	return nil
}

// notFound turns the store's ErrNotFound into a NotFound error.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return cube.Errorf(cube.NotFound, format, args...)
	}
	return err
}
