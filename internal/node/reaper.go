package node

import (
	"context"
	"time"

	"cube/internal/store"
)

// reaper ends sandboxes at their end time until ctx is cancelled.
func (h *host) reaper(ctx context.Context) { every(ctx, 500*time.Millisecond, nil, h.reap) }

// every calls f each interval, and at once whenever wake receives (nil:
// never), until ctx is cancelled.
func every(ctx context.Context, interval time.Duration, wake <-chan struct{}, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.C:
		}
		f(ctx)
	}
}

// nudge wakes a loop that waits on ch (see every) without blocking: a
// wake-up already pending covers this one.
func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// deadlinesEvery is how often the reaper reads its sandboxes' end times
// from the store. Between reads it goes by the end times the node saved
// itself (sandbox.endAt): every change of a sandbox's end time is saved by
// the node holding it, so the read only catches what that missed, and a
// reap costs no query.
const deadlinesEvery = 10 * time.Second

// reap kills (or pauses, when the sandbox asks for it) every running
// sandbox past its end time, each on its own goroutine so one slow kill
// does not hold up the others.
func (h *host) reap(ctx context.Context) {
	now := time.Now()
	if now.Sub(h.deadlinesRead) >= deadlinesEvery {
		h.readDeadlines(ctx, now)
	}
	var due []string
	h.mu.Lock()
	for id, sb := range h.sandboxes {
		if sb.state.running() && !sb.endAt.IsZero() && !sb.endAt.After(now) {
			due = append(due, id)
		}
	}
	h.mu.Unlock()
	for _, id := range due {
		// A kill or pause begun is finished even when Close comes: it
		// only takes a moment and leaves nothing half-way.
		h.background(func() { h.expire(context.WithoutCancel(ctx), id) })
	}
}

// readDeadlines refreshes the end times of the node's running sandboxes
// from their records (read through the store's index by node: this
// node's rows alone). One that cannot be read is due now: expire reads
// its record and decides.
func (h *host) readDeadlines(ctx context.Context, now time.Time) {
	ds, err := h.store.NodeDeadlines(ctx, h.cfg.NodeID)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("reaper: read end times", "err", err)
		}
		return
	}
	h.deadlinesRead = now
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range ds {
		if sb := h.sandboxes[d.ID]; sb != nil {
			sb.endAt = d.EndAt
			if d.EndAt.IsZero() {
				sb.endAt = now
			}
		}
	}
}

// expire ends one sandbox whose end time has passed, unless it changed
// meanwhile.
func (h *host) expire(ctx context.Context, sandboxID string) {
	sb, rec, err := h.open(ctx, sandboxID)
	if err != nil {
		if !isNotFound(err) {
			h.log.Warn("reaper: load sandbox", "sandbox", sandboxID, "err", err)
		}
		return
	}
	defer sb.mu.Unlock()
	sb.expire(ctx, rec)
}

// expire pauses the sandbox when it asks for that at its end time, and
// kills it otherwise (or when the pause fails). The caller holds its
// lock; a sandbox no longer running, or given more time meanwhile, is
// left as it is.
func (s *sandbox) expire(ctx context.Context, rec *store.Sandbox) {
	if !s.state.running() || rec.EndAt.After(time.Now()) {
		s.h.mu.Lock()
		s.endAt = rec.EndAt // changed meanwhile: the reaper goes by the record
		s.h.mu.Unlock()
		return
	}
	if rec.AutoPause {
		err := s.pauseAs(ctx, rec, rec.AutoPauseFilesOnly)
		switch {
		case err == nil || !rec.AutoPauseFilesOnly:
		case s.state.running():
			// Its files could not be saved alone: keeping its memory too
			// loses less than the kill below.
			s.h.log.Warn("auto-pause without memory failed; pausing with memory", "sandbox", s.id, "err", err)
			err = s.pause(ctx, rec)
		case s.state.paused():
			// It could not be thawed either: it stays paused in memory,
			// to be written out as such.
			s.h.log.Warn("auto-pause without memory failed; the sandbox stays paused with its memory", "sandbox", s.id, "err", err)
			err = nil
		}
		if err != nil {
			s.h.log.Warn("auto-pause failed; killing", "sandbox", s.id, "err", err)
		} else {
			s.h.event(s.id, "info", "paused at end of timeout")
			return
		}
	}
	if err := s.destroy(ctx, rec, "timeout"); err != nil {
		s.h.log.Warn("reaper: kill", "sandbox", s.id, "err", err)
	}
}
