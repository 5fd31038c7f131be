package template

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"cube/internal/id"
	"cube/internal/node"
	"cube/internal/oci"
	"cube/internal/store"
)

// runStepBuild runs a started build under bctx, its own context
// (Builder.track), and records how it ended.
func (b *Builder) runStepBuild(bctx context.Context, sb *stepBuild) {
	defer b.wg.Done()
	ready := false
	defer func() {
		b.release(sb)
		b.untrack(sb.job.ID, ready)
	}()
	ctx, cancel := context.WithTimeoutCause(bctx, b.cfg.BuildTimeout, errBuildTimeout)
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
	if err == nil && wasCancelled(ctx) {
		// Cancelled once the snapshot was taken: it fails all the same.
		err = &stepError{"finalize", errCancelled}
	}
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
	ready = true
	sb.log.infof("finalize", fmt.Sprintf("Template %s ready in %s", tpl.ID, time.Since(start).Round(time.Millisecond)))
	// What the build replaced: the previous build's layers and tree.
	if err := b.CollectLayers(context.Background()); err != nil {
		b.log.Warn("collect build layers", "err", err)
	}
}

var errBuildTimeout = errors.New("build timeout")

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
	if ctx.Err() != nil {
		return nil, &stepError{"finalize", context.Cause(ctx)}
	}

	sb.log.infof("finalize", fmt.Sprintf("Flattening %d layers into the template's filesystem", len(st.layers)))
	rootfs, err := b.flattenInto(st, sb)
	if err != nil {
		return nil, &stepError{"finalize", fmt.Errorf("flatten layers: %w", err)}
	}
	tpl := &store.Template{
		ID: sb.job.TemplateID, Team: sb.job.Team, Status: store.TemplateReady, Rootfs: rootfs, Env: st.env, Cwd: st.workdir, User: st.user,
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
		// As StartBuild found it: the build's team's own or a public one.
		t := store.FindTemplate(all, sb.job.Team, baseName(sb.spec.FromTemplate))
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
