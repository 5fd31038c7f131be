// Package usage reads what each team's sandboxes used from the state
// store: the stretches they ran (the usage table, one row per stretch that
// ended) and the stretches under way (running sandboxes' RunningSince).
// The store is shared by a cluster's nodes, so the answers cover the
// cluster.
package usage

import (
	"context"
	"slices"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// MaxSteps bounds the steps of one series.
const MaxSteps = 10000

// Reader answers cube.Usage from a store.
type Reader struct {
	st  *store.Store
	now func() time.Time
}

var _ cube.Usage = (*Reader)(nil)

// New returns the usage kept in st.
func New(st *store.Store) *Reader { return &Reader{st: st, now: time.Now} }

// stretch is a time a sandbox ran: [start, end), with its size.
type stretch struct {
	start, end time.Time
	vcpus, mem int
}

// since is when a running sandbox's current stretch began: a record from
// before stretches were kept counts from the sandbox's start (as the node
// does when it ends such a stretch).
func since(rec *store.Sandbox) time.Time {
	if rec.RunningSince.IsZero() {
		return rec.StartedAt
	}
	return rec.RunningSince
}

// stretches returns the team's stretches that overlap [start, end] (not
// clipped), those under way ending at now, and how many run now.
func (r *Reader) stretches(ctx context.Context, team string, start, end, now time.Time) ([]stretch, int, error) {
	rows, err := r.st.ListUsage(ctx, store.UsageFilter{Team: team, From: start, To: end})
	if err != nil {
		return nil, 0, err
	}
	out := make([]stretch, 0, len(rows))
	for _, u := range rows {
		out = append(out, stretch{u.Start, u.End, u.VCPUs, u.MemoryMB})
	}
	recs, err := r.st.Sandboxes().List(ctx, string(store.Running))
	if err != nil {
		return nil, 0, err
	}
	running := 0
	for _, rec := range recs {
		if rec.Team != team {
			continue
		}
		running++
		s := since(rec)
		if s.After(end) {
			continue
		}
		out = append(out, stretch{s, later(s, now), max(rec.CPUCount, 1), rec.MemoryMB})
	}
	return out, running, nil
}

// interval checks [start, end] and stops it at now (an interval that
// begins later is empty: [start, start]).
func interval(start, end, now time.Time) (time.Time, time.Time, error) {
	if end.Before(start) {
		return start, end, cube.Errorf(cube.Invalid, "start time cannot be after end time")
	}
	if end.After(now) {
		end = later(now, start)
	}
	return start, end, nil
}

// align is t rounded down to a multiple of step since the Unix epoch.
func align(t time.Time, step time.Duration) time.Time {
	ns, d := t.UnixNano(), int64(step)
	q := ns / d
	if ns%d < 0 {
		q--
	}
	return time.Unix(0, q*d).UTC()
}

// TeamUsage adds up what team used over [start, end].
func (r *Reader) TeamUsage(ctx context.Context, team string, start, end time.Time) (cube.UsageTotals, error) {
	now := r.now()
	start, end, err := interval(start, end, now)
	if err != nil {
		return cube.UsageTotals{}, err
	}
	out := cube.UsageTotals{Start: start, End: end}
	all, running, err := r.stretches(ctx, team, start, end, now)
	if err != nil {
		return out, err
	}
	out.RunningNow = running
	for _, s := range all {
		if !s.start.Before(start) && !s.start.After(end) {
			out.SandboxesStarted++
		}
		from, to := later(s.start, start), earlier(s.end, end)
		if !to.After(from) {
			continue
		}
		secs := to.Sub(from).Seconds()
		out.SandboxSeconds += secs
		out.VCPUSeconds += secs * float64(s.vcpus)
		out.MemoryMiBSeconds += secs * float64(s.mem)
	}
	tpls, err := r.st.Templates().List(ctx)
	if err != nil {
		return out, err
	}
	for _, t := range tpls {
		if t.Team == team && t.SourceSandbox != "" && t.Status != store.TemplateDeleting {
			out.SnapshotBytes += t.SizeBytes
		}
	}
	vols, err := r.st.Volumes().List(ctx)
	if err != nil {
		return out, err
	}
	for _, v := range vols {
		if v.Team == team && v.State != store.VolumeDeleting {
			out.VolumeBytes += v.SizeBytes
		}
	}
	return out, nil
}

// event is a stretch starting (+1) or ending (-1).
type event struct {
	at    time.Time
	delta int
}

// events are the starts and ends of the stretches within [start, end],
// in time order, an end before a start at the same time (a sandbox that
// stops as another starts does not make two at once); starts counts the
// stretches that began within it.
func events(all []stretch, start, end time.Time) (evs []event, starts []time.Time) {
	for _, s := range all {
		if !s.start.Before(start) && !s.start.After(end) {
			starts = append(starts, s.start)
		}
		from, to := later(s.start, start), earlier(s.end, end)
		if !to.After(from) {
			continue
		}
		evs = append(evs, event{from, +1}, event{to, -1})
	}
	slices.SortFunc(evs, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	slices.SortFunc(starts, time.Time.Compare)
	return evs, starts
}

// TeamMetrics is team's series over [start, end] in steps of step, each
// step's timestamp its start (a multiple of step since the Unix epoch):
// the most sandboxes that ran at once within the step, and the
// sandboxes started in it per second.
func (r *Reader) TeamMetrics(ctx context.Context, team string, start, end time.Time, step time.Duration) ([]cube.TeamMetric, error) {
	if step < time.Second {
		return nil, cube.Errorf(cube.Invalid, "the step of a series is at least a second, not %s", step)
	}
	now := r.now()
	start, end, err := interval(start, end, now)
	if err != nil {
		return nil, err
	}
	out := []cube.TeamMetric{}
	first := align(start, step)
	if n := end.Sub(first)/step + 1; n > MaxSteps {
		return nil, cube.Errorf(cube.Invalid, "%d steps of %s asked; a series has at most %d: ask for a shorter interval or a longer step", n, step, MaxSteps)
	}
	all, _, err := r.stretches(ctx, team, start, end, now)
	if err != nil {
		return nil, err
	}
	evs, starts := events(all, start, end)
	level, e, k := 0, 0, 0
	for b := first; !b.After(end); b = b.Add(step) {
		from, to := later(b, start), b.Add(step)
		// The level at the step's start, then its highest within it.
		for e < len(evs) && !evs[e].at.After(from) {
			level += evs[e].delta
			e++
		}
		peak := level
		for e < len(evs) && evs[e].at.Before(to) {
			level += evs[e].delta
			peak = max(peak, level)
			e++
		}
		n := 0
		for k < len(starts) && starts[k].Before(to) {
			n++
			k++
		}
		out = append(out, cube.TeamMetric{Timestamp: b.UTC(), ConcurrentSandboxes: peak, SandboxStartRate: float64(n) / step.Seconds()})
	}
	return out, nil
}

// MaxTeamMetric is the highest value of metric over [start, end], and
// when it was first reached: the most sandboxes at once, or the most
// started in one step of cube.StartRateStep, per second. With nothing to
// count it is 0 at the start.
func (r *Reader) MaxTeamMetric(ctx context.Context, team string, start, end time.Time, metric string) (cube.MaxTeamMetric, error) {
	if metric != cube.MetricConcurrentSandboxes && metric != cube.MetricSandboxStartRate {
		return cube.MaxTeamMetric{}, cube.Errorf(cube.Invalid, "invalid metric: %s", metric)
	}
	now := r.now()
	start, end, err := interval(start, end, now)
	if err != nil {
		return cube.MaxTeamMetric{}, err
	}
	all, _, err := r.stretches(ctx, team, start, end, now)
	if err != nil {
		return cube.MaxTeamMetric{}, err
	}
	evs, starts := events(all, start, end)
	if metric == cube.MetricConcurrentSandboxes {
		out := cube.MaxTeamMetric{Timestamp: start.UTC()}
		level := 0
		for i, ev := range evs {
			level += ev.delta
			// Only the level once every event of this instant is in.
			if i+1 < len(evs) && evs[i+1].at.Equal(ev.at) {
				continue
			}
			if ev.at.Before(end) && float64(level) > out.Value {
				out = cube.MaxTeamMetric{Timestamp: ev.at.UTC(), Value: float64(level)}
			}
		}
		return out, nil
	}
	out := cube.MaxTeamMetric{Timestamp: align(start, cube.StartRateStep)}
	best := 0
	for i := 0; i < len(starts); {
		b := align(starts[i], cube.StartRateStep)
		n := 0
		for ; i < len(starts) && align(starts[i], cube.StartRateStep).Equal(b); i++ {
			n++
		}
		if n > best {
			best = n
			out = cube.MaxTeamMetric{Timestamp: b, Value: float64(n) / cube.StartRateStep.Seconds()}
		}
	}
	return out, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
