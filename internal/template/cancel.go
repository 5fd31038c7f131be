package template

import (
	"context"
	"errors"
	"time"

	"cube/internal/cube"
)

// CancelReason is the error of a build the admin cancelled (CancelBuilds).
const CancelReason = "cancelled by the admin"

// errCancelled is the cause of a cancelled build's context.
var errCancelled = errors.New(CancelReason)

// cancelWait bounds how long CancelBuilds waits for a cancelled build to
// end; one that takes longer still ends FAILED, its context being done.
const cancelWait = 30 * time.Second

var _ cube.BuildCanceller = (*Builder)(nil)

// activeBuild is a build under way: an image build from its request, a
// build by steps from its start, until its outcome is recorded.
type activeBuild struct {
	team   string
	cancel context.CancelCauseFunc
	// cancelling is set (under Builder.mu) once CancelBuilds cancelled it.
	cancelling bool
	// done is closed once the build's outcome is recorded; ready, set
	// before, says whether the build made its template.
	done  chan struct{}
	ready bool
}

// track records a build of team's as under way and returns its context,
// derived from the builder's. Call with b.mu held, and untrack when the
// build has recorded its outcome.
func (b *Builder) track(jobID, team string) context.Context {
	ctx, cancel := context.WithCancelCause(b.ctx)
	b.active[jobID] = &activeBuild{team: team, cancel: cancel, done: make(chan struct{})}
	return ctx
}

// untrack forgets a build that ended, ready or not.
func (b *Builder) untrack(jobID string, ready bool) {
	b.mu.Lock()
	a := b.active[jobID]
	delete(b.active, jobID)
	b.mu.Unlock()
	if a == nil {
		return
	}
	a.ready = ready
	a.cancel(nil)
	close(a.done)
}

// wasCancelled reports whether ctx, a build's, was cancelled by CancelBuilds.
func wasCancelled(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errCancelled)
}

// CancelBuilds implements cube.BuildCanceller: it stops every build of
// team's that has not ended, and leaves other teams' alone. A build
// requested and never started ends FAILED with CancelReason at once; one
// under way (waiting for a build slot, or running) has its context
// cancelled, so that it stops at its next step and fails the way any
// failed build does (its template failed if the build was its first, its
// checkpoint and build box gone), with CancelReason. CancelBuilds waits
// for those to end, up to ctx and cancelWait: one that made its template
// all the same counts as failed to cancel; one still ending when the wait
// is over counts as cancelled. A build already cancelled by an earlier
// call is not counted again.
func (b *Builder) CancelBuilds(ctx context.Context, team string) (cancelled, failed int, err error) {
	b.mu.Lock()
	var requested []*stepBuild
	for id, sb := range b.builds {
		if sb.job.Team != team || sb.started || sb.done {
			continue
		}
		// As a superseded request: gone from builds, StartBuild finds it
		// ended.
		delete(b.builds, id)
		requested = append(requested, sb)
	}
	var under []*activeBuild
	var ids []string
	for id, a := range b.active {
		if a.team != team || a.cancelling {
			continue
		}
		a.cancelling = true
		a.cancel(errCancelled)
		under = append(under, a)
		ids = append(ids, id)
	}
	b.mu.Unlock()

	for _, sb := range requested {
		b.fail(sb, CancelReason, "base")
		sb.log.close()
		cancelled++
	}
	timer := time.NewTimer(cancelWait)
	defer timer.Stop()
	waiting := true
	for i, a := range under {
		if waiting {
			select {
			case <-a.done:
			case <-ctx.Done():
				waiting = false
			case <-timer.C:
				waiting = false
			}
		}
		select {
		case <-a.done:
			if a.ready {
				b.log.Warn("template build made its template before its cancel took hold", "build", ids[i], "team", team)
				failed++
				continue
			}
		default:
			b.log.Warn("cancelled template build still ending", "build", ids[i], "team", team)
		}
		cancelled++
	}
	if cancelled+failed > 0 {
		b.log.Info("template builds cancelled", "team", team, "cancelled", cancelled, "failed", failed)
	}
	return cancelled, failed, nil
}
