package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
)

// audit records a change the request made (or tried to): the caller, the
// route, the object its path names and the status it was answered with.
// Reads are not recorded, nor requests no key authorised.
func (s *Server) audit(w http.ResponseWriter, r *http.Request, pattern string) {
	if s.cfg.Audit == nil {
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return
	}
	c := callerOf(r)
	if c.Team == "" {
		return
	}
	status := http.StatusOK
	if rec, ok := w.(*recorder); ok && rec.elsewhere {
		return // the node that answers it records it
	} else if ok && rec.status != 0 {
		status = rec.status
	}
	s.cfg.Audit.Record(cube.AuditEntry{Team: c.Team, KeyID: c.KeyID, KeyName: c.KeyName,
		Method: r.Method, Route: pattern, Target: target(r, pattern), Status: status})
}

// target is what the request's path names: the values of the route's
// path parameters, joined by "/" (a sandbox ID; a template and a build).
func target(r *http.Request, pattern string) string {
	var parts []string
	for _, seg := range strings.Split(pattern, "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			name = strings.TrimSuffix(strings.TrimSuffix(name, "}"), "...")
			if v := r.PathValue(name); v != "" {
				parts = append(parts, v)
			}
		}
	}
	return strings.Join(parts, "/")
}

// listAudit answers GET /audit: the caller's team's entries, newest first
// (an admin's: every team's, or the one ?team= names), a page at a time
// (?before=<seq> continues where the last page ended, as X-Next-Token
// says).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	a := s.cfg.Audit
	if a == nil {
		return httperr.Errorf(http.StatusNotImplemented, "this server keeps no audit trail")
	}
	c := callerOf(r)
	q := r.URL.Query()
	f := cube.AuditFilter{Team: c.Team, KeyID: q.Get("keyID"), Target: q.Get("target")}
	if c.Admin && r.Header.Get(TeamHeader) == "" {
		f.Team = q.Get("team")
	}
	limit, err := queryInt(r, "limit", MaxListLimit, 1, MaxListLimit)
	if err != nil {
		return err
	}
	f.Limit = int(limit)
	if f.Before, err = queryInt(r, "before", 0, 0, 1<<62); err != nil {
		return err
	}
	since, err := queryInt(r, "since", 0, 0, 1<<40)
	if err != nil {
		return err
	}
	if since > 0 {
		f.Since = time.Unix(since, 0)
	}
	entries, err := a.ListAudit(r.Context(), f)
	if err != nil {
		return err
	}
	out := make([]wire.AuditEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, wire.AuditEntry{Seq: e.Seq, Time: e.Time, TeamID: e.Team, KeyID: e.KeyID, KeyName: e.KeyName,
			Method: e.Method, Route: e.Route, Target: e.Target, Status: e.Status, Node: e.Node})
	}
	if len(entries) == f.Limit {
		w.Header().Set("X-Next-Token", strconv.FormatInt(entries[len(entries)-1].Seq, 10))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
