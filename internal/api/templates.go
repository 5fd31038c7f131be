package api

import (
	"net/http"
	"strings"
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

// getTemplateAlias says whether a template answers to a name (alias or
// ID): 200 with its ID, or 404.
func (s *Server) getTemplateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	if alias == "" || len(alias) > 256 || strings.ContainsAny(alias, "\x00\n\r/") {
		writeError(w, badRequest("invalid template alias %q", alias))
		return
	}
	t, err := s.backend.GetTemplate(r.Context(), alias)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.TemplateAliasResponse{TemplateID: t.ID, Public: true})
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
