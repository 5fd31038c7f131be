package api

import (
	"net/http"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
)

// assignTags serves POST /templates/tags.
func (s *Server) assignTags(w http.ResponseWriter, r *http.Request) error {
	var body wire.AssignTemplateTagsRequest
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if err := tagsRequest("target", body.Target, body.Tags); err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	bid, err := b.AssignTags(r.Context(), callerOf(r).Team, body.Target, body.Tags)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wire.AssignedTemplateTags{BuildID: bid, Tags: body.Tags})
	return nil
}

// removeTags serves DELETE /templates/tags.
func (s *Server) removeTags(w http.ResponseWriter, r *http.Request) error {
	var body wire.DeleteTemplateTagsRequest
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if err := tagsRequest("name", body.Name, body.Tags); err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	if err := b.RemoveTags(r.Context(), callerOf(r).Team, body.Name, body.Tags); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// tagsRequest validates a tag assignment or removal: a template reference
// and 1 to MaxAliases tags.
func tagsRequest(field, ref string, tags []string) error {
	if ref == "" {
		return badRequest("%s is required", field)
	}
	if err := validTemplateRef(field, ref); err != nil {
		return err
	}
	if len(tags) == 0 || len(tags) > MaxAliases {
		return badRequest("tags: want 1 to %d tags, got %d", MaxAliases, len(tags))
	}
	for _, tag := range tags {
		if err := validTag(tag); err != nil {
			return err
		}
	}
	return nil
}

// templateTags serves GET /templates/{templateID}/tags, registered under a
// wider pattern (see muxPatterns).
func (s *Server) templateTags(w http.ResponseWriter, r *http.Request) error {
	if r.PathValue("tags") != "tags" {
		return httperr.Errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	tid, err := templateID(r)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	tags, err := b.TemplateTags(r.Context(), callerOf(r).Team, tid)
	if err != nil {
		return err
	}
	out := make([]wire.TemplateTag, 0, len(tags))
	for _, t := range tags {
		out = append(out, wire.TemplateTag{Tag: t.Tag, BuildID: t.BuildID, CreatedAt: t.CreatedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// updateTemplate serves PATCH /templates/{templateID} and its v2. A body
// without public changes nothing and answers the template's names.
func (s *Server) updateTemplate(w http.ResponseWriter, r *http.Request) error {
	tid, err := templateID(r)
	if err != nil {
		return err
	}
	var body wire.TemplateUpdateRequest
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	names, err := s.templateNames(r, b, tid, body.Public)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.TemplateUpdateResponse{Names: nonNil(names)})
	return nil
}

func (s *Server) templateNames(r *http.Request, b cube.StepBuilder, tid string, public *bool) ([]string, error) {
	if public != nil {
		return b.SetPublic(r.Context(), callerOf(r).Team, tid, *public)
	}
	t, err := s.backend.GetTemplate(r.Context(), callerOf(r).Team, tid)
	if err != nil {
		return nil, err
	}
	return t.Aliases, nil
}
