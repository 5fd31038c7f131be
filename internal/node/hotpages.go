package node

import (
	"context"
	"os"
	"time"

	"cube/internal/id"
	"cube/internal/runtime"
	"cube/internal/store"
)

// learnHotPages finds the pages of a template's new image (image, still
// under its temporary name) that a sandbox restored from it writes first,
// and records them in the image (runtime.HotPageLearner), so that restores
// of it copy them at once rather than one page fault each: it restores the
// image in a slot of its own (runsc takes the addresses of a slot's
// interfaces for its sandbox, so the build's is spent), makes the agent requests a create makes (its
// /init, then a metrics read as the warm pool's warmUp does), and
// checkpoints that sandbox into a probe image, whose record of the pages
// it copied is kept. Best effort: an image without hot pages restores as
// before.
func (n *Node) learnHotPages(ctx context.Context, tpl *store.Template, image string) {
	learner, ok := n.rt.(runtime.HotPageLearner)
	if !ok {
		return
	}
	start := time.Now()
	// An agent that does not answer would otherwise hold the build for
	// the whole /init timeout.
	ctx, cancel := context.WithTimeout(ctx, learnHotTimeout)
	defer cancel()
	bytes, err := n.probeHotPages(ctx, learner, tpl, image)
	if err != nil {
		n.log.Warn("template hot pages not learnt; its restores share every page", "template", tpl.ID, "err", err)
		return
	}
	n.log.Info("template hot pages learnt", "template", tpl.ID, "bytes", bytes, "took", time.Since(start).Round(time.Millisecond))
}

// learnHotTimeout bounds learnHotPages; a restore and an agent's first
// requests take well under a second on an idle host.
const learnHotTimeout = 15 * time.Second

func (n *Node) probeHotPages(ctx context.Context, learner runtime.HotPageLearner, tpl *store.Template, image string) (int64, error) {
	slot, err := n.acquireSlot(ctx, true)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err := n.release(slot); err != nil {
			n.log.Warn("learn hot pages: release network slot", "template", tpl.ID, "slot", slot.Index, "err", err)
		}
	}()
	cid := "hot-" + tpl.ID + "-" + id.New("", 6)
	sb, err := n.rt.Restore(ctx, image, Spec(tpl, cid, slot.NetNS))
	if err != nil {
		return 0, err
	}
	defer sb.Kill(context.Background())
	// The /init a create sends (ready), for a sandbox of this template
	// with no settings of its own: the pages learnt are the ones a
	// create's first request writes.
	rec := &store.Sandbox{ID: cid, TemplateID: tpl.ID, EnvdToken: id.Token(32), Slot: slot.Index, Boot: tpl}
	if err := n.ready(ctx, &container{sb: sb, slot: slot}, rec, tpl.EnvdToken); err != nil {
		return 0, err
	}
	if _, err := n.agentAt(slot.HostAddr).Metrics(ctx, rec.EnvdToken); err != nil {
		return 0, err
	}
	probe := image + ".hot"
	os.RemoveAll(probe)
	defer os.RemoveAll(probe)
	if err := sb.Checkpoint(ctx, probe, false); err != nil {
		return 0, err
	}
	return learner.LearnHotPages(image, probe)
}
