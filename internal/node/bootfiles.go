package node

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"cube/internal/runtime"
	"cube/internal/store"
)

// bootWithFiles starts rec afresh from its boot record in a new network
// slot, with the files image in dir as its writable layer, and hands its
// envd the sandbox's token and environment: the resume of a pause that
// kept files only. Nothing of the old memory comes back (a fresh kernel,
// a new boot ID, the template's start command run again), as E2B's
// filesystem-only pause promises. The fresh agent holds no token yet, so
// oldToken is not asked for. Its signature is launch's, so a resume can
// pick either.
func (h *host) bootWithFiles(ctx context.Context, rec *store.Sandbox, tpl *store.Template, dir, _ string) (*container, error) {
	start := time.Now()
	own := *tpl
	own.CPUCount, own.MemoryMB = rec.CPUCount, rec.MemoryMB
	slot, err := h.acquireSlot(ctx, true)
	if err != nil {
		return nil, err
	}
	var c cleanup
	defer h.cleanUp(&c, "boot with files", "sandbox", rec.ID)
	c.Add(func() error { return h.release(slot) })
	spec := Spec(&own, containerID(rec.ID), slot.NetNS)
	spec.Files = filepath.Join(dir, runtime.FilesImage)
	sb, err := h.rt.Boot(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("boot sandbox %s with its files: %w", rec.ID, err)
	}
	box := &container{sb: sb, slot: slot}
	c.Release()
	c.Add(func() error { return h.retire(box) })
	booted := h.tel.phase("boot-files", "boot", start)
	if err := h.ready(ctx, box, rec, ""); err != nil {
		return nil, err
	}
	h.tel.phase("boot-files", "init", booted)
	c.Release()
	return box, nil
}
