package api

import (
	"net/http"
	"strings"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// The routes of E2B's SDK template builder (Template.build): POST
// /v3/templates reserves a build, each COPY step's files are uploaded by
// their hash through a signed link, POST /v2/templates/{id}/builds/{id}
// starts the steps, and the SDK polls .../status for logs until the build
// is ready or failed. The work is a cube.StepBuilder's.

// Limits of a step build.
const (
	MaxBuildSteps = 256
	// maxStepArgs bounds a step's arguments (ENV pairs, mostly).
	maxStepArgs = 256
	// maxBuildString bounds one argument, command or image reference; the
	// body limit bounds their sum.
	maxBuildString = 64 << 10
	// MaxBuildLogLimit is the most entries one logs request answers.
	MaxBuildLogLimit = 1000
	// UploadLinkTTL is how long an upload link stays valid.
	UploadLinkTTL = time.Hour
)

func (s *Server) stepBuilder() (cube.StepBuilder, error) {
	return capability[cube.StepBuilder](s, "building templates from steps is")
}

// requestBuild serves POST /v3/templates.
func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request) error {
	var body wire.TemplateBuildRequestV3
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	intent, err := buildIntent(body)
	if err != nil {
		return err
	}
	intent.Team = callerOf(r).Team
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	ticket, err := b.RequestBuild(r.Context(), intent)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, wire.TemplateRequestResponseV3{
		TemplateID: ticket.TemplateID, BuildID: ticket.BuildID,
		Names: nonNil(ticket.Names), Aliases: nonNil(ticket.Names), Tags: nonNil(ticket.Tags), Public: ticket.Public,
	})
	return nil
}

func buildID(r *http.Request) (string, error) {
	v := r.PathValue("buildID")
	if v == "" || len(v) > 256 || strings.ContainsAny(v, "\x00\n\r/") {
		return "", badRequest("invalid build ID %q", v)
	}
	return v, nil
}

// startBuild serves POST /v2/templates/{templateID}/builds/{buildID}.
func (s *Server) startBuild(w http.ResponseWriter, r *http.Request) error {
	tid, err := templateID(r)
	if err != nil {
		return err
	}
	bid, err := buildID(r)
	if err != nil {
		return err
	}
	var body wire.TemplateBuildStartV2
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	spec, err := buildSpec(body)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	if err := b.StartBuild(r.Context(), callerOf(r).Team, tid, bid, spec); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}
