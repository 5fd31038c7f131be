// Routes that read what a sandbox did: its resource metrics and its logs.

package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
)

func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	start, err := queryInt(r, "start", 0, 0, 1<<40)
	if err != nil {
		return err
	}
	end, err := queryInt(r, "end", 0, 0, 1<<40)
	if err != nil {
		return err
	}
	if start > 0 && end > 0 && end < start {
		return badRequest("end (%d) is before start (%d)", end, start)
	}
	var st, en time.Time
	if start > 0 {
		st = time.Unix(start, 0)
	}
	if end > 0 {
		en = time.Unix(end, 0)
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	ms, err := s.backend.SandboxMetrics(r.Context(), id, st, en)
	if err != nil {
		return err
	}
	out := make([]wire.SandboxMetric, 0, len(ms))
	for _, m := range ms {
		out = append(out, wireMetric(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// bulkMetrics answers the latest sample of each named sandbox; unknown ids
// are left out rather than failing the whole call.
func (s *Server) bulkMetrics(w http.ResponseWriter, r *http.Request) error {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				ids = append(ids, part)
			}
		}
	}
	if len(ids) == 0 {
		return badRequest("query parameter sandbox_ids is required")
	}
	if len(ids) > MaxListLimit {
		return badRequest("sandbox_ids names %d sandboxes; at most %d", len(ids), MaxListLimit)
	}
	out := wire.SandboxesWithMetrics{Sandboxes: map[string]wire.SandboxMetric{}}
	for _, id := range ids {
		err := s.mine(r, id)
		var ms []cube.Metric
		if err == nil {
			ms, err = s.backend.SandboxMetrics(r.Context(), id, time.Time{}, time.Time{})
		}
		if err != nil {
			if httperr.StatusOf(err) == http.StatusNotFound {
				continue
			}
			return err
		}
		if len(ms) > 0 {
			out.Sandboxes[id] = wireMetric(ms[len(ms)-1])
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

var levelRank = map[cube.LogLevel]int{cube.LevelDebug: 0, cube.LevelInfo: 1, cube.LevelWarn: 2, cube.LevelError: 3}

func (s *Server) logsV1(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	startMs, err := queryInt(r, "start", 0, 0, 1<<50)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 1000, 0, 100000)
	if err != nil {
		return err
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	entries, err := s.backend.SandboxLogs(r.Context(), id)
	if err != nil {
		return err
	}
	out := wire.SandboxLogs{Logs: []wire.SandboxLog{}, LogEntries: []wire.SandboxLogEntry{}}
	for _, e := range entries {
		if int64(len(out.Logs)) >= limit {
			break
		}
		if e.Time.UnixMilli() < startMs {
			continue
		}
		we := wireLogEntry(e)
		line, _ := json.Marshal(map[string]any{"level": we.Level, "message": we.Message, "fields": we.Fields})
		out.Logs = append(out.Logs, wire.SandboxLog{Timestamp: we.Timestamp, Line: string(line)})
		out.LogEntries = append(out.LogEntries, we)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) logsV2(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	cursor, err := queryInt(r, "cursor", -1, 0, 1<<50)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 1000, 0, 100000)
	if err != nil {
		return err
	}
	backward := false
	switch q.Get("direction") {
	case "", "forward":
	case "backward":
		backward = true
	default:
		return badRequest("invalid direction %q: want forward or backward", q.Get("direction"))
	}
	minLevel := 0
	if lv := q.Get("level"); lv != "" {
		rank, ok := levelRank[cube.LogLevel(lv)]
		if !ok {
			return badRequest("invalid level %q: want debug, info, warn or error", lv)
		}
		minLevel = rank
	}
	search := q.Get("search")
	if err := s.mine(r, id); err != nil {
		return err
	}
	entries, err := s.backend.SandboxLogs(r.Context(), id)
	if err != nil {
		return err
	}
	out := wire.SandboxLogsV2{Logs: []wire.SandboxLogEntry{}}
	for i := range entries {
		e := entries[i]
		if backward {
			e = entries[len(entries)-1-i]
		}
		if int64(len(out.Logs)) >= limit {
			break
		}
		ms := e.Time.UnixMilli()
		if cursor >= 0 && ((!backward && ms < cursor) || (backward && ms > cursor)) {
			continue
		}
		lv := e.Level
		if lv == "" {
			lv = cube.LevelInfo
		}
		if levelRank[lv] < minLevel {
			continue
		}
		if search != "" && !strings.Contains(e.Message, search) {
			continue
		}
		out.Logs = append(out.Logs, wireLogEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
