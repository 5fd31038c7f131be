package node

import (
	"context"
	"slices"
	"time"
)

// watchAlive looks every few seconds, until ctx is cancelled, for
// sandboxes whose container is gone (its PID 1 died, the host killed it
// for memory): they must not be listed as running.
func (h *host) watchAlive(ctx context.Context) { every(ctx, 5*time.Second, nil, h.checkAlive) }

// checkAlive removes the sandboxes whose container the runtime no longer
// lists. A container is only declared dead after a second listing under
// the sandbox's lock, so one started or replaced meanwhile is spared.
func (h *host) checkAlive(ctx context.Context) {
	ids, err := h.rt.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("check sandboxes alive: list containers", "err", err)
		}
		return
	}
	h.mu.Lock()
	var dead []*sandbox
	var keep []consoleKeeper
	for _, sb := range h.sandboxes {
		if sb.box == nil {
			continue
		}
		if !slices.Contains(ids, sb.box.sb.ID()) {
			dead = append(dead, sb)
		} else if k, ok := sb.box.sb.(consoleKeeper); ok {
			keep = append(keep, k)
		}
	}
	h.mu.Unlock()
	for _, sb := range dead {
		sb.removeDead(context.WithoutCancel(ctx))
	}
	for _, k := range keep {
		if err := k.KeepConsole(); err != nil {
			h.log.Warn("check sandboxes alive: console keeper", "err", err)
		}
	}
}

// consoleKeeper is a sandbox whose console needs a process of its own to
// drain it (gVisor's keeper); a keeper that died is replaced here.
type consoleKeeper interface{ KeepConsole() error }

// removeDead destroys a sandbox whose container is gone, if it still is.
func (s *sandbox) removeDead(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone || s.box == nil {
		return
	}
	cid := s.box.sb.ID()
	rec, err := s.h.record(ctx, s.id)
	if err != nil {
		if !isNotFound(err) {
			s.h.log.Warn("check sandbox alive: load sandbox", "sandbox", s.id, "err", err)
		}
		return
	}
	still, err := s.h.rt.List(ctx)
	if err != nil || slices.Contains(still, cid) {
		return
	}
	s.h.log.Warn("sandbox exited unexpectedly; removing it", "sandbox", s.id, "container", cid)
	if err := s.destroy(ctx, rec, "exited unexpectedly"); err != nil {
		s.h.log.Warn("remove exited sandbox", "sandbox", s.id, "err", err)
	}
}
