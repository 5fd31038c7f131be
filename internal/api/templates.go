package api

import (
	"net/http"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.backend.ListTemplates(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	ts, _, _ = page(ts, func(t *cube.Template) (time.Time, string) { return t.CreatedAt, t.ID }, true, len(ts), "")
	out := make([]wire.Template, 0, len(ts))
	for i := range ts {
		out = append(out, wireTemplate(&ts[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	id, err := templateID(r)
	if err != nil {
		writeError(w, err)
		return
	}
	t, err := s.backend.GetTemplate(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireTemplateWithBuilds(t))
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id, err := templateID(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.backend.DeleteTemplate(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
