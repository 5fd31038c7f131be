package template

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/node"
	"cube/internal/oci"
	"cube/internal/store"
)

// Each phase owns a slice of the job's percentage. Pulling and unpacking
// report bytes; the gVisor phases are steps.
var phaseRange = map[store.JobPhase][2]int{
	store.PhasePulling:      {0, 40},
	store.PhaseUnpacking:    {40, 70},
	store.PhaseBooting:      {70, 75},
	store.PhaseProbing:      {75, 90},
	store.PhaseSnapshotting: {90, 99},
	store.PhaseReady:        {100, 100},
}

// tracker writes a job's phase and progress to the store. Progress within
// a phase is written when the percentage changes, at most a few times a
// second, so a fast download does not turn into a write per block.
type tracker struct {
	b       *Builder
	job     *store.Job
	written time.Time
}

func (t *tracker) phase(p store.JobPhase) {
	t.job.Phase = p
	t.job.Progress = phaseRange[p][0]
	t.save()
}

func (t *tracker) progress(done, total int64) {
	r := phaseRange[t.job.Phase]
	pct := r[0]
	if total > 0 {
		pct = r[0] + int(int64(r[1]-r[0])*min(done, total)/total)
	}
	if pct == t.job.Progress || (done < total && time.Since(t.written) < 200*time.Millisecond) {
		return
	}
	t.job.Progress = pct
	t.save()
}

func (t *tracker) save() {
	t.job.UpdatedAt = time.Now().UTC()
	t.written = time.Now()
	if err := t.b.st.Jobs().Put(context.Background(), t.job); err != nil {
		t.b.log.Warn("record build progress", "job", t.job.ID, "err", err)
	}
}

// run builds tpl in the background under ctx, the build's own context
// (Builder.track), and records the outcome.
func (b *Builder) run(ctx context.Context, job *store.Job, tpl *store.Template, src oci.Source, req cube.BuildRequest) {
	defer b.wg.Done()
	ready := false
	defer func() { b.untrack(job.ID, ready) }()
	t := &tracker{b: b, job: job}
	err := b.build(ctx, t, tpl, src, req)
	if err == nil && wasCancelled(ctx) {
		// Cancelled once the snapshot was taken: it fails all the same.
		err = errCancelled
	}
	if b.isUpload(src.Path) {
		// An upload serves the one build it was sent for, and is gone
		// before the build's outcome is recorded: whoever sees the job
		// end sees its upload gone too.
		b.mu.Lock()
		if b.uploadsInUse[src.Path]--; b.uploadsInUse[src.Path] <= 0 {
			delete(b.uploadsInUse, src.Path)
			os.Remove(src.Path)
		}
		b.mu.Unlock()
	}
	defer func() { buildEnded(job.CreatedAt, err) }()
	bg := context.Background()
	now := time.Now().UTC()
	if err == nil {
		tpl.Status, tpl.Error, tpl.UpdatedAt = store.TemplateReady, "", now
		if err = b.st.Templates().Put(bg, tpl); err == nil {
			ready = true
			fault.Point(fault.BuildAfterReady)
			t.phase(store.PhaseReady)
			b.log.Info("template ready", "job", job.ID, "template", tpl.ID, "took", now.Sub(job.CreatedAt).Round(time.Millisecond), "bytes", tpl.SizeBytes)
			return
		}
	}
	reason := err.Error()
	switch {
	case wasCancelled(ctx):
		reason = CancelReason
	case b.ctx.Err() != nil:
		reason = ShutdownReason
	}
	b.removeTemplateDir(tpl.ID)
	tpl.Status, tpl.Error, tpl.UpdatedAt = store.TemplateFailed, reason, now
	tpl.Checkpoint, tpl.SizeBytes = "", 0
	if err := b.st.Templates().Put(bg, tpl); err != nil {
		b.log.Warn("record failed template", "template", tpl.ID, "err", err)
	}
	job.Error = reason
	t.phase(store.PhaseFailed)
	b.log.Warn("template build failed", "job", job.ID, "template", tpl.ID, "reason", reason)
}

func (b *Builder) build(ctx context.Context, t *tracker, tpl *store.Template, src oci.Source, req cube.BuildRequest) error {
	select {
	case b.sem <- struct{}{}:
		defer func() { <-b.sem }()
	case <-ctx.Done():
		return ctx.Err()
	}

	if src.Kind != oci.KindRegistry {
		// Again: what the path names may have changed since the request.
		p, err := b.localPath(src)
		if err != nil {
			return pullError(src, err)
		}
		src.Path = p
	}
	img, err := oci.Open(ctx, src, oci.PullOptions{
		Username: req.RegistryUsername, Password: req.RegistryPassword,
		InsecureRegistries: b.cfg.InsecureRegistries,
		CacheDir:           filepath.Join(b.cfg.DataDir, "images"),
	})
	if err != nil {
		return pullError(src, err)
	}
	// A registry says how large each layer is, and no more is read of it:
	// refuse before downloading what could not be unpacked anyway.
	if m, err := img.Manifest(); err == nil {
		var n int64
		for _, l := range m.Layers {
			n += max(l.Size, 0)
		}
		if n > b.cfg.Limits.MaxBytes {
			return fmt.Errorf("pull %s: its layers take %s compressed, more than the %s an image may unpack to (raise the limit with cube-server %s, or make the image smaller)",
				src, oci.HumanBytes(n), oci.HumanBytes(b.cfg.Limits.MaxBytes), FlagMaxImageBytes)
		}
	}
	if err := oci.Fetch(ctx, img, t.progress); err != nil {
		return pullError(src, err)
	}

	t.phase(store.PhaseUnpacking)
	rf, err := oci.UnpackLimited(ctx, img, filepath.Join(b.cfg.DataDir, "rootfs"), b.cfg.Limits, t.progress)
	if err != nil {
		return unpackError(src, err)
	}
	tpl.Rootfs = rf.Dir
	tpl.ImageDigest = rf.Digest.String()
	tpl.StartCmd = startCommand(rf.Config, req.Cmd, req.Args)
	tpl.Env = mergeEnv(rf.Config.Env, req.Env)
	tpl.Cwd = rf.Config.WorkingDir
	if req.Cwd != "" {
		tpl.Cwd = req.Cwd
	}
	tpl.User = rf.Config.User
	if req.User != "" {
		tpl.User = req.User
	}
	if len(tpl.ExposedPorts) == 0 {
		tpl.ExposedPorts = rf.Config.ExposedPorts
	}
	tpl.UpdatedAt = time.Now().UTC()
	if err := b.st.Templates().Put(ctx, tpl); err != nil {
		return err
	}

	phases := map[node.Phase]store.JobPhase{
		node.PhaseBooting: store.PhaseBooting, node.PhaseProbing: store.PhaseProbing,
		node.PhaseSnapshotting: store.PhaseSnapshotting,
	}
	probe := Probe(tpl.ProbePort, tpl.ProbePath, b.cfg.ProbeTimeout)
	return b.cfg.Snapshotter.BuildSnapshot(ctx, tpl, probe, func(p node.Phase) {
		if jp, ok := phases[p]; ok {
			t.phase(jp)
		}
	})
}

// pullError says what to fix when an image cannot be read.
func pullError(src oci.Source, err error) error {
	switch {
	case errors.Is(err, oci.ErrInsecureRegistry):
		return fmt.Errorf("pull %s: %w", src, err)
	case errors.Is(err, oci.ErrUnreachable):
		return fmt.Errorf("pull %s: %w (check the registry address and that it is running; use --insecure-registry for a plain-HTTP registry)", src, err)
	case errors.Is(err, oci.ErrCorrupt):
		return fmt.Errorf("pull %s: %w (the image's content does not match its digests: push or save it again)", src, err)
	case errors.Is(err, oci.ErrNotFound), errors.Is(err, oci.ErrUnauthorized):
		return fmt.Errorf("pull %s: %w", src, err)
	}
	return fmt.Errorf("pull %s: %w", src, err)
}

// Flags of cube-server that raise the unpack limits, named by errors.
const (
	FlagMaxImageBytes = "--max-image-bytes"
	FlagMaxFileBytes  = "--max-file-bytes"
)

func unpackError(src oci.Source, err error) error {
	var le *oci.LimitError
	switch {
	case errors.As(err, &le):
		flag := FlagMaxImageBytes
		if le.Limit == oci.LimitFile {
			flag = FlagMaxFileBytes
		}
		return fmt.Errorf("unpack %s: %w (raise the limit with cube-server %s, or make the image smaller)", src, err, flag)
	case errors.Is(err, oci.ErrCorrupt):
		return fmt.Errorf("unpack %s: %w (the image's layers do not match their digests: push or save the image again)", src, err)
	case errors.Is(err, oci.ErrUnsafeLayer):
		return fmt.Errorf("unpack %s: %w (the image has a layer entry Cube refuses to unpack; rebuild it)", src, err)
	}
	return fmt.Errorf("unpack %s: %w", src, err)
}
