package api

import (
	"net/http"
	"strings"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.backend.ListTemplates(r.Context(), callerOf(r).Team)
	if err != nil {
		return err
	}
	ts, _, _ = page(ts, func(t *cube.Template) (time.Time, string) { return t.CreatedAt, t.ID }, true, len(ts), "")
	out := make([]wire.Template, 0, len(ts))
	for i := range ts {
		out = append(out, wireTemplate(&ts[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	id, err := templateID(r)
	if err != nil {
		return err
	}
	t, err := s.backend.GetTemplate(r.Context(), callerOf(r).Team, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireTemplateWithBuilds(t))
	return nil
}

// getTemplateAlias says whether a template answers to a name (alias or
// ID): 200 with its ID, or 404.
func (s *Server) getTemplateAlias(w http.ResponseWriter, r *http.Request) error {
	alias := r.PathValue("alias")
	if alias == "" || len(alias) > 256 || strings.ContainsAny(alias, "\x00\n\r/") {
		return badRequest("invalid template alias %q", alias)
	}
	t, err := s.backend.GetTemplate(r.Context(), callerOf(r).Team, alias)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.TemplateAliasResponse{TemplateID: t.ID, Public: true})
	return nil
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	id, err := templateID(r)
	if err != nil {
		return err
	}
	if err := s.backend.DeleteTemplate(r.Context(), callerOf(r).Team, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
