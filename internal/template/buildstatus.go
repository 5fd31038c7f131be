package template

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"cube/internal/cube"
	"cube/internal/id"
	"cube/internal/store"
)

// reasonLines is how many of its last log lines a failed build reports.
const reasonLines = 20

// buildEntries returns a build's job and its log. Another team's build is
// not found, whatever its template.
func (b *Builder) buildEntries(ctx context.Context, team, templateID, buildID string) (*store.Job, []cube.BuildLogEntry, int, error) {
	b.mu.Lock()
	sb := b.builds[buildID]
	pos := slices.Index(b.waiting, buildID)
	b.mu.Unlock()
	j, err := b.st.Jobs().Get(ctx, buildID)
	if err != nil || j.TemplateID != templateID || !ownsJob(team, j) {
		return nil, nil, 0, cube.Errorf(cube.NotFound, "build %q of template %q not found", buildID, templateID)
	}
	if sb != nil {
		return j, sb.log.snapshot(), pos, nil
	}
	return j, b.readLog(buildID), pos, nil
}

// BuildStatus implements cube.StepBuilder.
func (b *Builder) BuildStatus(ctx context.Context, team, templateID, buildID string, logsOffset int) (*cube.BuildStatus, error) {
	j, logs, pos, err := b.buildEntries(ctx, team, templateID, buildID)
	if err != nil {
		return nil, err
	}
	out := &cube.BuildStatus{TemplateID: templateID, BuildID: buildID, Status: buildStatus(j.Phase), QueuePosition: max(pos, 0)}
	if logsOffset < len(logs) {
		out.Logs = logs[max(logsOffset, 0):]
	}
	if j.Phase == store.PhaseFailed {
		out.Reason = &cube.BuildReason{Message: j.Error, Step: j.FailedStep, Logs: logs[max(len(logs)-reasonLines, 0):]}
	}
	return out, nil
}

func buildStatus(p store.JobPhase) string {
	switch p {
	case store.PhaseRequested, store.PhaseWaiting:
		return cube.BuildWaiting
	case store.PhaseReady:
		return cube.BuildReady
	case store.PhaseFailed:
		return cube.BuildError
	}
	return cube.BuildBuilding
}

// BuildLogs implements cube.StepBuilder.
func (b *Builder) BuildLogs(ctx context.Context, team, templateID, buildID string, q cube.BuildLogQuery) ([]cube.BuildLogEntry, error) {
	_, logs, _, err := b.buildEntries(ctx, team, templateID, buildID)
	if err != nil {
		return nil, err
	}
	min := logLevels[q.Level]
	var out []cube.BuildLogEntry
	for _, e := range logs {
		if logLevels[e.Level] < min {
			continue
		}
		ms := e.Time.UnixMilli()
		if q.Cursor != 0 && ((!q.Backward && ms < q.Cursor) || (q.Backward && ms > q.Cursor)) {
			continue
		}
		out = append(out, e)
	}
	if q.Limit > 0 && len(out) > q.Limit {
		if q.Backward {
			out = out[len(out)-q.Limit:]
		} else {
			out = out[:q.Limit]
		}
	}
	return out, nil
}

// templateByName returns the template a name (ID or alias) names to
// team: its own, or a public one (store.FindTemplate). Another team's
// private template is not found, as one that does not exist.
func (b *Builder) templateByName(ctx context.Context, team, name string) (*store.Template, error) {
	all, err := b.st.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	t := store.FindTemplate(all, team, name)
	if t == nil || t.Status == store.TemplateDeleting {
		return nil, cube.Errorf(cube.NotFound, "template %q not found", name)
	}
	return t, nil
}

// templateToChange returns the template name names to team for a change
// (tags, public): templateByName's, which must be the team's own. Another
// team's public template → Forbidden, as node.DeleteTemplate answers: the
// team sees it, and may use it, not change it.
func (b *Builder) templateToChange(ctx context.Context, team, name string) (*store.Template, error) {
	t, err := b.templateByName(ctx, team, name)
	if err != nil {
		return nil, err
	}
	if !owns(team, t) {
		return nil, cube.Errorf(cube.Forbidden, "template %q is another team's public template: it can be used, not changed", name)
	}
	return t, nil
}

// AssignTags implements cube.StepBuilder.
func (b *Builder) AssignTags(ctx context.Context, team, target string, tags []string) (string, error) {
	name, from := splitName(target)
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.templateToChange(ctx, team, name)
	if err != nil {
		return "", err
	}
	build := t.BuildJob
	if from != "" {
		i := slices.IndexFunc(t.Tags, func(x store.TemplateTag) bool { return x.Tag == from })
		if i < 0 {
			return "", cube.Errorf(cube.NotFound, "template %q has no tag %q", name, from)
		}
		build = t.Tags[i].BuildID
	}
	if build == "" || t.Status != store.TemplateReady {
		return "", cube.Errorf(cube.Conflict, "template %q has no finished build to tag", name)
	}
	now := time.Now().UTC()
	for _, tag := range tags {
		t.Tags = slices.DeleteFunc(t.Tags, func(x store.TemplateTag) bool { return x.Tag == tag })
		t.Tags = append(t.Tags, store.TemplateTag{Tag: tag, BuildID: build, CreatedAt: now})
	}
	t.UpdatedAt = now
	return build, b.st.Templates().Put(ctx, t)
}

// RemoveTags implements cube.StepBuilder.
func (b *Builder) RemoveTags(ctx context.Context, team, name string, tags []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.templateToChange(ctx, team, name)
	if err != nil {
		return err
	}
	for _, tag := range tags {
		if !slices.ContainsFunc(t.Tags, func(x store.TemplateTag) bool { return x.Tag == tag }) {
			return cube.Errorf(cube.NotFound, "template %q has no tag %q", name, tag)
		}
	}
	t.Tags = slices.DeleteFunc(t.Tags, func(x store.TemplateTag) bool { return slices.Contains(tags, x.Tag) })
	t.UpdatedAt = time.Now().UTC()
	return b.st.Templates().Put(ctx, t)
}

// TemplateTags implements cube.StepBuilder: the tags of the team's own
// template or of a public one, which "name:tag" may create sandboxes
// from.
func (b *Builder) TemplateTags(ctx context.Context, team, idOrName string) ([]cube.TemplateTag, error) {
	t, err := b.templateByName(ctx, team, idOrName)
	if err != nil {
		return nil, err
	}
	out := make([]cube.TemplateTag, 0, len(t.Tags))
	for _, x := range t.Tags {
		out = append(out, cube.TemplateTag{Tag: x.Tag, BuildID: x.BuildID, CreatedAt: x.CreatedAt})
	}
	return out, nil
}

// SetPublic implements cube.StepBuilder. The install's default template
// stays public (see isDefault).
func (b *Builder) SetPublic(ctx context.Context, team, idOrName string, public bool) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.templateToChange(ctx, team, idOrName)
	if err != nil {
		return nil, err
	}
	if !public && isDefault(t.Team, t.ID, t.Aliases) {
		return nil, cube.Errorf(cube.Conflict, "template %q is the default template (%s), which every team creates sandboxes from: it stays public", idOrName, DefaultAlias)
	}
	t.Public, t.UpdatedAt = public, time.Now().UTC()
	return slices.Clone(t.Aliases), b.st.Templates().Put(ctx, t)
}

// CollectLayers removes the build layers no template names and no build
// uses, the rootfs trees flattened from layers that neither a template
// nor a sandbox uses any more, and the uploaded files of templates that
// are gone. What goes is renamed aside under the locks and removed after,
// so builds and status reads never wait for a large delete.
func (b *Builder) CollectLayers(ctx context.Context) error {
	var trash []string
	defer func() {
		for _, d := range trash {
			os.RemoveAll(d)
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	tpls, err := b.st.Templates().List(ctx)
	if err != nil {
		return err
	}
	boxes, err := b.st.Sandboxes().List(ctx)
	if err != nil {
		return err
	}
	layers, rootfs, ids := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, t := range tpls {
		for _, k := range t.Layers {
			layers[k] = true
		}
		rootfs[filepath.Base(t.Rootfs)] = true
		ids[t.ID] = true
	}
	for _, s := range boxes {
		if s.Boot != nil {
			rootfs[filepath.Base(s.Boot.Rootfs)] = true
		}
	}
	for _, sb := range b.builds {
		rootfs[filepath.Base(sb.rootfs)] = true
	}
	aside := func(dir, name string) {
		to := filepath.Join(dir, ".tmp-trash-"+id.New("", 8))
		if os.Rename(filepath.Join(dir, name), to) == nil {
			trash = append(trash, to)
		}
	}
	b.layerMu.Lock()
	for k := range b.layerUse {
		layers[k] = true
	}
	ents, _ := os.ReadDir(b.layersDir())
	for _, e := range ents {
		if !strings.Contains(e.Name(), ".tmp-") && !layers[e.Name()] {
			aside(b.layersDir(), e.Name())
		}
	}
	b.layerMu.Unlock()
	root := filepath.Join(b.cfg.DataDir, "rootfs")
	ents, _ = os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "b-") && !rootfs[e.Name()] {
			aside(root, e.Name())
		}
	}
	ents, _ = os.ReadDir(b.filesDir())
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".tmp-") && !ids[e.Name()] {
			aside(b.filesDir(), e.Name())
		}
	}
	return nil
}

// recoverSteps removes what builds by steps an earlier process ran left:
// overlay mounts, half-made layers, half-received uploads, and the
// checkpoints of builds that are no template's current one.
func (b *Builder) recoverSteps(ctx context.Context) {
	unmountStale(b.layersDir())
	ents, _ := os.ReadDir(b.layersDir())
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			os.RemoveAll(filepath.Join(b.layersDir(), e.Name()))
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(b.filesDir(), "*", ".upload-*"))
	trash, _ := filepath.Glob(filepath.Join(b.filesDir(), ".tmp-*"))
	for _, d := range append(dirs, trash...) {
		os.RemoveAll(d)
	}
	tpls, err := b.st.Templates().List(ctx)
	if err != nil {
		return
	}
	for _, t := range tpls {
		builds, _ := filepath.Glob(filepath.Join(b.cfg.DataDir, "templates", t.ID, "builds", "*"))
		for _, d := range builds {
			if t.Checkpoint == "" || filepath.Dir(t.Checkpoint) != d {
				os.RemoveAll(d)
			}
		}
	}
}
