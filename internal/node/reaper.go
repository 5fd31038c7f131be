package node

import (
	"context"
	"time"

	"cube/internal/store"
)

// reaper ends sandboxes at their end time until ctx is cancelled.
func (n *Node) reaper(ctx context.Context) { every(ctx, 500*time.Millisecond, nil, n.reap) }

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

// reap kills (or pauses, when the sandbox asks for it) every running
// sandbox past its end time, each on its own goroutine so one slow kill
// does not hold up the others.
func (n *Node) reap(ctx context.Context) {
	recs, err := n.ownSandboxes(ctx, string(store.Running))
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("reaper: list sandboxes", "err", err)
		}
		return
	}
	now := time.Now()
	for _, rec := range recs {
		if rec.EndAt.After(now) {
			continue
		}
		// A kill or pause begun is finished even when Close comes: it
		// only takes a moment and leaves nothing half-way.
		n.background(func() { n.expire(context.WithoutCancel(ctx), rec.ID) })
	}
}

// expire ends one sandbox whose end time has passed, unless it changed
// meanwhile.
func (n *Node) expire(ctx context.Context, sandboxID string) {
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		if !isNotFound(err) {
			n.log.Warn("reaper: load sandbox", "sandbox", sandboxID, "err", err)
		}
		return
	}
	defer sb.mu.Unlock()
	if sb.state != stateRunning || rec.EndAt.After(time.Now()) {
		return // changed meanwhile
	}
	if rec.AutoPause {
		err := sb.pauseAs(ctx, rec, rec.AutoPauseFilesOnly)
		switch {
		case err == nil || !rec.AutoPauseFilesOnly:
		case sb.state == stateRunning:
			// Its files could not be saved alone: keeping its memory too
			// loses less than the kill below.
			n.log.Warn("auto-pause without memory failed; pausing with memory", "sandbox", sandboxID, "err", err)
			err = sb.pause(ctx, rec)
		case sb.state.paused():
			// It could not be thawed either: it stays paused in memory,
			// to be written out as such.
			n.log.Warn("auto-pause without memory failed; the sandbox stays paused with its memory", "sandbox", sandboxID, "err", err)
			err = nil
		}
		if err != nil {
			n.log.Warn("auto-pause failed; killing", "sandbox", sandboxID, "err", err)
		} else {
			n.event(sandboxID, "info", "paused at end of timeout")
			return
		}
	}
	if err := sb.destroy(ctx, rec, "timeout"); err != nil {
		n.log.Warn("reaper: kill", "sandbox", sandboxID, "err", err)
	}
}
