package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
	"cube/internal/id"
)

// Limits of a build request.
const (
	MaxAliases      = 16
	MaxCPUCount     = 64
	MaxMemoryMB     = 256 << 10
	MaxDiskSizeMB   = 1 << 20
	maxBuildStrings = 256
)

// ParseSize reads a size such as 1G, 512M, 1.5G, 2048 (megabytes), 1GiB or
// 100MB into whole megabytes (MiB). It is how --writable-layer-size reads.
func ParseSize(s string) (int, error) {
	orig := s
	s = strings.TrimSpace(strings.ToUpper(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "IB"), "B")
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1.0/1024, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		s = s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1024, s[:len(s)-1]
	case strings.HasSuffix(s, "T"):
		mult, s = 1024*1024, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v <= 0 || v != v {
		return 0, fmt.Errorf("size %q: want a positive number with an optional unit K, M, G or T, such as 1G or 512M", orig)
	}
	mb := v * mult
	if mb < 1 || mb > MaxDiskSizeMB {
		return 0, fmt.Errorf("size %q: must be between 1M and %dG", orig, MaxDiskSizeMB/1024)
	}
	return int(mb + 0.5), nil
}

// buildRequest validates the body of POST /templates.
func buildRequest(body wire.TemplateBuildRequest) (cube.BuildRequest, error) {
	req := cube.BuildRequest{
		Image: strings.TrimSpace(body.Image), TemplateID: body.TemplateID,
		MemoryMB: body.MemoryMB, ProbePort: body.ProbePort, ProbePath: body.ProbePath,
		Cmd: body.Cmd, Args: body.Args, Env: body.Env, Cwd: body.Cwd, User: body.User,
		RegistryUsername: body.RegistryUsername, RegistryPassword: body.RegistryPassword,
		InsecureRegistry: body.InsecureRegistry,
	}
	if req.Image == "" {
		return req, badRequest("image is required (a registry reference, oci-archive:PATH, oci:DIR[:TAG] or docker-archive:PATH)")
	}
	if len(req.Image) > 4096 || strings.ContainsAny(req.Image, "\x00\n\r") {
		return req, badRequest("invalid image reference %q", req.Image)
	}
	if req.TemplateID != "" {
		if !id.ValidName(req.TemplateID) {
			return req, badRequest("invalid template ID %q: want 1-63 lowercase letters, digits, '-' and '_', starting with a letter or digit", req.TemplateID)
		}
		if strings.HasPrefix(req.TemplateID, "snap-") {
			return req, badRequest("template ID %q: the snap- prefix is reserved for snapshots", req.TemplateID)
		}
	}
	if len(body.Aliases) > MaxAliases {
		return req, badRequest("at most %d aliases, got %d", MaxAliases, len(body.Aliases))
	}
	for _, a := range body.Aliases {
		if !id.ValidName(a) {
			return req, badRequest("invalid alias %q: want 1-63 lowercase letters, digits, '-' and '_', starting with a letter or digit", a)
		}
		if a == req.TemplateID {
			return req, badRequest("alias %q is the template ID itself", a)
		}
		if slices.Contains(req.Aliases, a) {
			return req, badRequest("alias %q given twice", a)
		}
		req.Aliases = append(req.Aliases, a)
	}
	if body.CPUMillicores < 0 || body.CPUMillicores > MaxCPUCount*1000 {
		return req, badRequest("cpuMillicores must be between 1 and %d, got %d", MaxCPUCount*1000, body.CPUMillicores)
	}
	req.CPUCount = (body.CPUMillicores + 999) / 1000
	if req.MemoryMB < 0 || req.MemoryMB > MaxMemoryMB {
		return req, badRequest("memoryMB must be between 1 and %d, got %d", MaxMemoryMB, req.MemoryMB)
	}
	if body.WritableLayerSize != "" {
		mb, err := ParseSize(body.WritableLayerSize)
		if err != nil {
			return req, badRequest("writableLayerSize: %v", err)
		}
		req.DiskSizeMB = mb
	}
	for _, p := range body.ExposedPorts {
		if p < 1 || p > 65535 {
			return req, badRequest("exposed port %d: want 1-65535", p)
		}
		if !slices.Contains(req.ExposedPorts, p) {
			req.ExposedPorts = append(req.ExposedPorts, p)
		}
	}
	slices.Sort(req.ExposedPorts)
	if req.ProbePort < 0 || req.ProbePort > 65535 {
		return req, badRequest("probePort %d: want 1-65535", req.ProbePort)
	}
	if req.ProbePath != "" && (!strings.HasPrefix(req.ProbePath, "/") || strings.ContainsAny(req.ProbePath, " \x00\n\r") || len(req.ProbePath) > 1024) {
		return req, badRequest("probePath %q: want an absolute URL path such as /health", req.ProbePath)
	}
	if len(req.Cmd)+len(req.Args) > maxBuildStrings || len(req.Env) > maxBuildStrings {
		return req, badRequest("too many cmd, args or env entries (at most %d)", maxBuildStrings)
	}
	for _, s := range append(append([]string{}, req.Cmd...), req.Args...) {
		if strings.ContainsRune(s, 0) {
			return req, badRequest("cmd and args may not contain NUL bytes")
		}
	}
	if len(req.Cmd) > 0 && req.Cmd[0] == "" {
		return req, badRequest("cmd: the program name is empty")
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return req, badRequest("env: invalid variable name %q", k)
		}
	}
	if strings.ContainsRune(req.Cwd, 0) || (req.Cwd != "" && !strings.HasPrefix(req.Cwd, "/")) {
		return req, badRequest("cwd %q: want an absolute path", req.Cwd)
	}
	if strings.ContainsAny(req.User, "\x00\n") {
		return req, badRequest("invalid user %q", req.User)
	}
	return req, nil
}

func wireBuildJob(j *cube.BuildJob) wire.TemplateBuildJob {
	return wire.TemplateBuildJob{
		JobID: j.ID, TemplateID: j.TemplateID, Phase: j.Phase, Progress: j.Progress,
		Error: j.Error, CreatedAt: j.CreatedAt.UTC(), UpdatedAt: j.UpdatedAt.UTC(),
	}
}

func wireBuildInfo(d cube.TemplateDetail) wire.TemplateBuildInfo {
	return wire.TemplateBuildInfo{
		Status: d.Status, Error: d.Error, Image: d.Image, ImageDigest: d.ImageDigest,
		SizeBytes: d.SizeBytes, ExposedPorts: d.ExposedPorts, ProbePort: d.ProbePort,
		ProbePath: d.ProbePath, StartCmd: d.StartCmd, Cwd: d.Cwd, User: d.User, JobID: d.JobID,
	}
}

func (s *Server) builder() (cube.TemplateBuilder, error) {
	return capability[cube.TemplateBuilder](s, "building templates is")
}

func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) error {
	var body wire.TemplateBuildRequest
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	req, err := buildRequest(body)
	if err != nil {
		return err
	}
	req.Team = callerOf(r).Team
	b, err := s.builder()
	if err != nil {
		return err
	}
	job, err := b.BuildTemplate(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/templates/jobs/"+job.ID)
	writeJSON(w, http.StatusAccepted, wire.TemplateBuildStarted{JobID: job.ID, TemplateID: job.TemplateID})
	return nil
}

func (s *Server) getBuildJob(w http.ResponseWriter, r *http.Request) error {
	jobID := r.PathValue("jobID")
	if !id.ValidName(jobID) {
		return badRequest("invalid job ID %q", jobID)
	}
	b, err := s.builder()
	if err != nil {
		return err
	}
	job, err := b.BuildJob(r.Context(), callerOf(r).Team, jobID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireBuildJob(job))
	return nil
}

// listTemplatesDetailed answers GET /templates, adding build facts when
// the backend builds templates.
func (s *Server) listTemplatesDetailed(w http.ResponseWriter, r *http.Request) error {
	b, ok := s.backend.(cube.TemplateBuilder)
	if !ok {
		return s.listTemplates(w, r)
	}
	ts, err := s.backend.ListTemplates(r.Context(), callerOf(r).Team)
	if err != nil {
		return err
	}
	// Every template's details: only those of the team's list are shown.
	details, err := b.TemplateDetails(r.Context())
	if err != nil {
		return err
	}
	ts, _, _ = page(ts, func(t *cube.Template) (time.Time, string) { return t.CreatedAt, t.ID }, true, len(ts), "")
	out := make([]wire.TemplateListed, 0, len(ts))
	for i := range ts {
		out = append(out, wire.TemplateListed{Template: wireTemplate(&ts[i]), TemplateBuildInfo: wireBuildInfo(details[ts[i].ID])})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getTemplateDetailed answers GET /templates/{id}, adding build facts when
// the backend builds templates.
func (s *Server) getTemplateDetailed(w http.ResponseWriter, r *http.Request) error {
	b, ok := s.backend.(cube.TemplateBuilder)
	if !ok {
		return s.getTemplate(w, r)
	}
	tid, err := templateID(r)
	if err != nil {
		return err
	}
	t, err := s.backend.GetTemplate(r.Context(), callerOf(r).Team, tid)
	if err != nil {
		return err
	}
	details, err := b.TemplateDetails(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.TemplateDetail{TemplateWithBuilds: wireTemplateWithBuilds(t), TemplateBuildInfo: wireBuildInfo(details[t.ID])})
	return nil
}

// ImportsPath is the route of archive uploads.
const ImportsPath = "/templates/imports"

// ImportedArchive is the answer to an upload.
type ImportedArchive struct {
	// Image is the reference to build from, such as
	// oci-archive:/var/lib/cube/imports/upload-<id>.tar.
	Image string `json:"image"`
}

// importArchive serves POST /templates/imports: an archive streamed as the
// raw request body (?kind=oci-archive, the default, or docker-archive),
// answered 201 with an ImportedArchive. Its body limit is the importer's
// (see bodyLimit), not the API's, which fits JSON and not images.
func (s *Server) importArchive(w http.ResponseWriter, r *http.Request) error {
	imp, err := capability[cube.ArchiveImporter](s, "uploading image archives is")
	if err != nil {
		return err
	}
	kind := r.URL.Query().Get("kind")
	if kind == "" {
		kind = "oci-archive"
	}
	if max := imp.MaxImportBytes(); r.ContentLength > max {
		return httperr.Errorf(http.StatusRequestEntityTooLarge, "the archive has %d bytes, more than the server accepts (%d bytes, cube-server --max-image-bytes)", r.ContentLength, max)
	}
	image, err := imp.ImportArchive(r.Context(), kind, tooLargeAsKind{r.Body, fmt.Sprintf("the archive is larger than the server accepts (%d bytes, cube-server --max-image-bytes)", imp.MaxImportBytes())})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ImportedArchive{Image: image})
	return nil
}

// tooLargeAsKind turns the body limit's error (a chunked body may only
// find out half-way) into the core's TooLarge saying msg, so the
// consumer's error answers 413 like a Content-Length over the limit.
type tooLargeAsKind struct {
	io.Reader
	msg string
}

func (t tooLargeAsKind) Read(p []byte) (int, error) {
	n, err := t.Reader.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = cube.Errorf(cube.TooLarge, "%s", t.msg)
	}
	return n, err
}
