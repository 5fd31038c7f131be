package node

import (
	"context"
	"time"

	"cube/internal/store"
)

// A sandbox's running time is kept as stretches: while it runs, its record
// says since when (RunningSince); when it stops running, the stretch goes
// into the store's usage table and RunningSince is cleared. The two calls
// below go where a lifecycle method changes the state to or from running,
// before the record is saved, with their undo in the method's cleanup; the
// stretch is appended only once the record that ends it is saved. Usage
// that cannot be appended is logged: it never fails the operation.

// startRunning notes in rec, about to be saved as running, that the
// sandbox runs from now on. A sandbox already running (a rollback) runs
// on: its stretch goes on too. Call it before changeState.
func (s *sandbox) startRunning(rec *store.Sandbox, c *cleanup) {
	if s.state.running() {
		return
	}
	was := rec.RunningSince
	rec.RunningSince = time.Now().UTC()
	c.Add(func() error { rec.RunningSince = was; return nil })
}

// stopRunning takes the running stretch out of rec, about to be saved in a
// state other than running, and returns it for recordRun once the record
// is saved; nil when the sandbox was not running. Call it before
// changeState.
func (s *sandbox) stopRunning(rec *store.Sandbox, c *cleanup) *store.UsageRecord {
	if !s.state.running() {
		return nil
	}
	was := rec.RunningSince
	rec.RunningSince = time.Time{}
	c.Add(func() error { rec.RunningSince = was; return nil })
	return s.h.ran(rec, was, time.Now())
}

// ran is rec's stretch from since to end on this node. A record from
// before stretches were kept has no RunningSince: its stretch is counted
// from the sandbox's start.
func (h *host) ran(rec *store.Sandbox, since, end time.Time) *store.UsageRecord {
	if since.IsZero() {
		since = rec.StartedAt
	}
	if end.Before(since) {
		end = since
	}
	return &store.UsageRecord{Team: rec.Team, Sandbox: rec.ID, Node: h.cfg.NodeID,
		Start: since.UTC(), End: end.UTC(), VCPUs: max(rec.CPUCount, 1), MemoryMB: rec.MemoryMB}
}

// recordRun appends a stretch stopRunning returned (nil: nothing).
func (h *host) recordRun(ctx context.Context, u *store.UsageRecord) {
	if u == nil {
		return
	}
	if err := h.store.AppendUsage(context.WithoutCancel(ctx), *u); err != nil {
		h.log.Warn("record sandbox usage", "sandbox", u.Sandbox, "team", u.Team, "start", u.Start, "end", u.End, "err", err)
	}
}

// lostRun records the stretch of a sandbox recorded as running that the
// reconciler found gone (its container did not survive the server): when
// it stopped is unknown, so the stretch ends when the loss is found.
func (h *host) lostRun(ctx context.Context, rec *store.Sandbox) {
	h.recordRun(ctx, h.ran(rec, rec.RunningSince, time.Now()))
}
