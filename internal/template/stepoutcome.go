package template

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"cube/internal/envdclient"
	"cube/internal/fault"
	"cube/internal/store"
)

// reason is the message a failed build reports.
func (b *Builder) reason(ctx context.Context, err error) string {
	switch {
	case wasCancelled(ctx):
		return CancelReason
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
	tpl.Team, tpl.Aliases, tpl.CreatedAt, tpl.UpdatedAt, tpl.Public = cur.Team, cur.Aliases, cur.CreatedAt, now, cur.Public
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
