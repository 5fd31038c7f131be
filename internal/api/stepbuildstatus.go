package api

import (
	"net/http"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// logTimeLayout is RFC 3339 with milliseconds, as E2B's build logs carry.
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// buildStatus serves GET /templates/{templateID}/builds/{buildID}/status.
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request) error {
	tid, bid, err := buildPath(r)
	if err != nil {
		return err
	}
	offset, err := queryInt(r, "logsOffset", 0, 0, 1<<31-1)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	st, err := b.BuildStatus(r.Context(), callerOf(r).Team, tid, bid, int(offset))
	if err != nil {
		return err
	}
	out := wire.BuildStatusInfo{
		TemplateID: st.TemplateID, BuildID: st.BuildID, Status: st.Status,
		LogEntries: wireLogEntries(st.Logs), Logs: []string{},
	}
	if st.Reason != nil {
		out.Reason = &wire.BuildStatusReason{Message: st.Reason.Message, Step: st.Reason.Step, LogEntries: wireLogEntries(st.Reason.Logs)}
	}
	if st.Status == cube.BuildWaiting {
		out.QueuePosition = &st.QueuePosition
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// buildPath reads {templateID} and {buildID}, a 400 for bad ones.
func buildPath(r *http.Request) (tid, bid string, err error) {
	tid, err = templateID(r)
	if err == nil {
		bid, err = buildID(r)
	}
	if err != nil {
		return "", "", err
	}
	return tid, bid, nil
}

func wireLogEntries(logs []cube.BuildLogEntry) []wire.BuildLogEntry {
	out := make([]wire.BuildLogEntry, 0, len(logs))
	for _, l := range logs {
		out = append(out, wire.BuildLogEntry{Timestamp: l.Time.UTC().Format(logTimeLayout), Level: l.Level, Message: l.Message, Step: l.Step})
	}
	return out
}

// buildLogs serves GET /templates/{templateID}/builds/{buildID}/logs.
func (s *Server) buildLogs(w http.ResponseWriter, r *http.Request) error {
	tid, bid, err := buildPath(r)
	if err != nil {
		return err
	}
	q, err := buildLogQuery(r)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	logs, err := b.BuildLogs(r.Context(), callerOf(r).Team, tid, bid, q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.TemplateBuildLogsResponse{Logs: wireLogEntries(logs)})
	return nil
}

// buildLogQuery reads cursor, limit, direction, level and source (the
// last accepted and ignored: a build has one log).
func buildLogQuery(r *http.Request) (cube.BuildLogQuery, error) {
	var q cube.BuildLogQuery
	cursor, err := queryInt(r, "cursor", 0, 0, 1<<62)
	if err != nil {
		return q, err
	}
	limit, err := queryInt(r, "limit", 100, 1, MaxBuildLogLimit)
	if err != nil {
		return q, err
	}
	q.Cursor, q.Limit = cursor, int(limit)
	v := r.URL.Query()
	switch dir := v.Get("direction"); dir {
	case "", "forward":
	case "backward":
		q.Backward = true
	default:
		return q, badRequest("direction must be forward or backward, got %q", dir)
	}
	switch level := v.Get("level"); level {
	case "", "debug", "info", "warn", "error":
		q.Level = level
	default:
		return q, badRequest("level must be debug, info, warn or error, got %q", level)
	}
	switch src := v.Get("source"); src {
	case "", "temporary", "persistent":
	default:
		return q, badRequest("source must be temporary or persistent, got %q", src)
	}
	return q, nil
}
