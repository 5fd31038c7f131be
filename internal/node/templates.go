package node

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/store"
)

// Template looks a template up by id or alias, either optionally with
// ":tag", as the node sees it: every team's.
func (n *Node) Template(ctx context.Context, idOrAlias string) (*store.Template, error) {
	return n.TeamTemplate(ctx, "", idOrAlias)
}

// TeamTemplate looks a template up by id or alias, either optionally with
// ":tag", as team sees it: its own or a public one (store.FindTemplate).
// A tag resolves only while it names the template's current build: a
// template keeps its newest build alone.
func (n *Node) TeamTemplate(ctx context.Context, team, idOrAlias string) (*store.Template, error) {
	if name, tag, ok := strings.Cut(idOrAlias, ":"); ok {
		t, err := n.TeamTemplate(ctx, team, name)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(t.Tags, func(x store.TemplateTag) bool { return x.Tag == tag })
		switch {
		case i >= 0 && t.Tags[i].BuildID == t.BuildJob:
			return t, nil
		case i >= 0:
			return nil, cube.Errorf(cube.NotFound, "tag %q of template %q names build %s, which a newer build replaced: Cube keeps a template's newest build only", tag, name, t.Tags[i].BuildID)
		case tag == "default" && len(t.Tags) == 0:
			return t, nil
		}
		return nil, cube.Errorf(cube.NotFound, "template %q has no tag %q: list its tags with GET /templates/%s/tags", name, tag, t.ID)
	}
	if t, err := n.store.Templates().Get(ctx, idOrAlias); err == nil && t.VisibleTo(team) {
		return t, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	all, err := n.store.TemplatesNamed(ctx, idOrAlias)
	if err != nil {
		return nil, err
	}
	if t := store.FindTemplate(all, team, idOrAlias); t != nil {
		return t, nil
	}
	return nil, cube.Errorf(cube.NotFound, "template %q not found: list templates with `cubemastercli tpl list`", idOrAlias)
}

func (h *host) templateView(t *store.Template) cube.Template {
	status := "ready"
	switch t.Status {
	case store.TemplateBuilding:
		status = "building"
	case store.TemplateFailed:
		status = "error"
	}
	return cube.Template{
		ID: t.ID, Team: t.Team, Aliases: t.Aliases, BuildID: cmp.Or(t.BuildJob, t.ID), BuildStatus: status, BuildCount: 1, Public: t.Public,
		CPUCount: max(t.CPUCount, 1), MemoryMB: t.MemoryMB, DiskSizeMB: t.DiskSizeMB,
		EnvdVersion: h.cfg.EnvdVersion, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
}

// ListTemplates returns the templates team may use, snapshots included.
func (n *Node) ListTemplates(ctx context.Context, team string) ([]cube.Template, error) {
	all, err := n.store.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cube.Template, 0, len(all))
	for _, t := range all {
		if t.VisibleTo(team) {
			out = append(out, n.templateView(t))
		}
	}
	return out, nil
}

// GetTemplate returns one template by id or alias.
func (n *Node) GetTemplate(ctx context.Context, team, idOrAlias string) (*cube.Template, error) {
	t, err := n.TeamTemplate(ctx, team, idOrAlias)
	if err != nil {
		return nil, err
	}
	v := n.templateView(t)
	return &v, nil
}

// DeleteTemplate removes a template or snapshot and frees its checkpoint.
// Sandboxes created from it keep running: they hold their own memory, and
// their rootfs is shared and kept while anything uses it. The template is
// recorded as deleting before anything is removed, so it can no longer be
// used, and the reconciler completes a delete a crash interrupted.
func (n *Node) DeleteTemplate(ctx context.Context, team, idOrAlias string) error {
	t, err := n.TeamTemplate(ctx, team, idOrAlias)
	if err != nil {
		return err
	}
	if team != "" && t.Team != team {
		return cube.Errorf(cube.Forbidden, "template %q is another team's public template: it can be used, not deleted", idOrAlias)
	}
	if t.Status == store.TemplateBuilding {
		return cube.Errorf(cube.Conflict, "template %q is still building", idOrAlias)
	}
	t.Status = store.TemplateDeleting
	if err := n.store.Templates().Put(ctx, t); err != nil {
		return err
	}
	snapshot := t.SourceSandbox != ""
	if snapshot {
		fault.Point(fault.SnapshotDeleteAfterIntent)
	} else {
		fault.Point(fault.TemplateDeleteAfterIntent)
	}
	n.releaseImage(t)
	n.tel.poolMisses.DeleteLabelValues(t.ID)
	n.removeOwnDir(t)
	if snapshot {
		fault.Point(fault.SnapshotDeleteAfterRemove)
	} else {
		fault.Point(fault.TemplateDeleteAfterRemove)
	}
	return n.store.Templates().Delete(ctx, t.ID)
}

// releaseImage lets go of a template's checkpoint image: warm and
// prepared sandboxes restored from it are discarded and the image removed.
// Sandboxes created from it keep running; they hold their own memory.
func (h *host) releaseImage(t *store.Template) {
	h.pools.drainWarm(t.ID)
	h.pools.dropPreparedOf(t)
	h.removeImage(t)
}

// removeImage removes a template's checkpoint image and what a write of
// it left half-done.
func (h *host) removeImage(t *store.Template) {
	if t.Checkpoint == "" {
		return
	}
	h.removeDir(t.Checkpoint)
	h.removeDir(t.Checkpoint + ".tmp")
}

// removeTemplateFiles removes a template's checkpoint image, and the
// template's own directory (every build of it) when the image is in one.
func (h *host) removeTemplateFiles(t *store.Template) {
	h.removeImage(t)
	h.removeOwnDir(t)
}

// removeOwnDir removes the template's own directory (every build of it)
// when its image is in one.
func (h *host) removeOwnDir(t *store.Template) {
	if own := filepath.Join(h.cfg.DataDir, "templates", t.ID); t.Checkpoint != "" && strings.HasPrefix(t.Checkpoint, own+string(os.PathSeparator)) {
		h.removeDir(own)
	}
}
