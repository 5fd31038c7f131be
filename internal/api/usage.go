package api

import (
	"net/http"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// A team's usage: E2B's /teams/{teamID}/metrics and /metrics/max, and
// Cube's /teams/{teamID}/usage with the totals. The interval is start and
// end in Unix seconds, by default the last 7 days, as E2B's.

// defaultUsageRange is the interval asked without start: E2B's.
const defaultUsageRange = 7 * 24 * time.Hour

// maxUnixSeconds bounds start and end (the year 2242): beyond it times in
// nanoseconds overflow.
const maxUnixSeconds = 1<<33 - 1

// maxSeriesSteps is the most steps a series is given: a wider interval
// gets longer steps.
const maxSeriesSteps = 1000

// usageTeam is the team a usage route names: another team's, for a key
// that is not an admin's, or one that does not exist is 404.
func (s *Server) usageTeam(r *http.Request) (string, error) {
	id, err := teamID(r)
	if err != nil {
		return "", err
	}
	if callerOf(r).Admin {
		if _, err := s.cfg.Teams.GetTeam(r.Context(), id); err != nil {
			return "", err
		}
	}
	return id, nil
}

// usageInterval reads start and end (Unix seconds): by default the end is
// now and the start 7 days before the end (E2B's: the last 7 days); a
// start after the end is 400.
func usageInterval(r *http.Request, now time.Time) (time.Time, time.Time, error) {
	startUnix, err := queryInt(r, "start", -1, 0, maxUnixSeconds)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	endUnix, err := queryInt(r, "end", -1, 0, maxUnixSeconds)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return unixInterval(startUnix, endUnix, now)
}

// unixInterval is [start, end] from Unix seconds, each -1 when not given.
func unixInterval(startUnix, endUnix int64, now time.Time) (time.Time, time.Time, error) {
	end := now
	if endUnix >= 0 {
		end = time.Unix(endUnix, 0)
	}
	start := end.Add(-defaultUsageRange)
	if startUnix >= 0 {
		start = time.Unix(startUnix, 0)
	}
	if start.After(end) {
		return start, end, badRequest("start time cannot be after end time")
	}
	return start.UTC(), end.UTC(), nil
}

// seriesStep is E2B's step for an interval (fewer than 1000 points up to
// a week), longer still for intervals wider than that allows.
func seriesStep(start, end time.Time) time.Duration {
	d := end.Sub(start)
	var step time.Duration
	switch {
	case d < time.Hour:
		step = 5 * time.Second
	case d < 6*time.Hour:
		step = 30 * time.Second
	case d < 12*time.Hour:
		step = time.Minute
	case d < 24*time.Hour:
		step = 2 * time.Minute
	case d < 7*24*time.Hour:
		step = 5 * time.Minute
	default:
		step = 15 * time.Minute
	}
	if d/step >= maxSeriesSteps {
		unit := 15 * time.Minute
		step = (d/maxSeriesSteps/unit + 1) * unit
	}
	return step
}

func (s *Server) teamMetrics(w http.ResponseWriter, r *http.Request) error {
	u, team, start, end, err := s.usageQuery(r, "team metrics are")
	if err != nil {
		return err
	}
	ms, err := u.TeamMetrics(r.Context(), team, start, end, seriesStep(start, end))
	if err != nil {
		return err
	}
	out := make([]wire.TeamMetric, 0, len(ms))
	for _, m := range ms {
		out = append(out, wire.TeamMetric{Timestamp: m.Timestamp.UTC(), TimestampUnix: m.Timestamp.Unix(),
			ConcurrentSandboxes: int32(m.ConcurrentSandboxes), SandboxStartRate: float32(m.SandboxStartRate)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) teamMetricsMax(w http.ResponseWriter, r *http.Request) error {
	team, err := s.usageTeam(r)
	if err != nil {
		return err
	}
	start, end, err := usageInterval(r, time.Now())
	if err != nil {
		return err
	}
	metric := r.URL.Query().Get("metric")
	switch metric {
	case cube.MetricConcurrentSandboxes, cube.MetricSandboxStartRate:
	case "":
		return badRequest("query parameter metric is required: %s or %s", cube.MetricConcurrentSandboxes, cube.MetricSandboxStartRate)
	default:
		return badRequest("invalid metric: %q (%s or %s)", metric, cube.MetricConcurrentSandboxes, cube.MetricSandboxStartRate)
	}
	u, err := capability[cube.Usage](s, "team metrics are")
	if err != nil {
		return err
	}
	m, err := u.MaxTeamMetric(r.Context(), team, start, end, metric)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.MaxTeamMetric{Timestamp: m.Timestamp.UTC(), TimestampUnix: m.Timestamp.Unix(), Value: m.Value})
	return nil
}

func (s *Server) teamUsage(w http.ResponseWriter, r *http.Request) error {
	u, team, start, end, err := s.usageQuery(r, "team usage is")
	if err != nil {
		return err
	}
	t, err := u.TeamUsage(r.Context(), team, start, end)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.TeamUsage{TeamID: team, Start: t.Start.UTC(), End: t.End.UTC(),
		SandboxSeconds: t.SandboxSeconds, VCPUSeconds: t.VCPUSeconds, MemoryMiBSeconds: t.MemoryMiBSeconds,
		SandboxesStarted: t.SandboxesStarted, RunningSandboxes: t.RunningNow,
		SnapshotBytes: t.SnapshotBytes, VolumeBytes: t.VolumeBytes})
	return nil
}

// usageQuery reads what every usage route asks first, in this order: the
// team (the caller's own, or any for the admin), the interval, and the
// backend's usage, which it answers 501 without.
func (s *Server) usageQuery(r *http.Request, what string) (u cube.Usage, team string, start, end time.Time, err error) {
	if team, err = s.usageTeam(r); err != nil {
		return nil, "", start, end, err
	}
	if start, end, err = usageInterval(r, time.Now()); err != nil {
		return nil, "", start, end, err
	}
	u, err = capability[cube.Usage](s, what)
	return u, team, start, end, err
}
