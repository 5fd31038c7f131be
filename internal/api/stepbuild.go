package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
	"cube/internal/id"
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

// UploadPath is the route of build file uploads. It is served without the
// API key: the SDK PUTs to the link GET /templates/{templateID}/files/{hash}
// answered, sending only the headers that answer names, so the link carries
// its own authority: ?expires=UNIX&signature=HEX[&verify=archive], an
// HMAC-SHA256 under Config.UploadSecret (uploadSignature). A link stores
// files once (uploadLinks): a copy of it that leaks later is spent.
const UploadPath = "/templates/{templateID}/files/{hash}/upload"

// logTimeLayout is RFC 3339 with milliseconds, as E2B's build logs carry.
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

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

// buildIntent validates the body of POST /v3/templates.
func buildIntent(body wire.TemplateBuildRequestV3) (cube.BuildIntent, error) {
	intent := cube.BuildIntent{Name: body.Name, CPUCount: body.CPUCount, MemoryMB: body.MemoryMB}
	if intent.Name == "" {
		intent.Name = body.Alias
	}
	if intent.Name == "" {
		return intent, badRequest("name is required")
	}
	if err := validTemplateRef("name", intent.Name); err != nil {
		return intent, err
	}
	if len(body.Tags) > MaxAliases {
		return intent, badRequest("at most %d tags, got %d", MaxAliases, len(body.Tags))
	}
	for _, tag := range body.Tags {
		if err := validTag(tag); err != nil {
			return intent, err
		}
	}
	intent.Tags = body.Tags
	if intent.CPUCount < 0 || intent.CPUCount > MaxCPUCount {
		return intent, badRequest("cpuCount must be between 1 and %d, got %d", MaxCPUCount, intent.CPUCount)
	}
	if intent.MemoryMB < 0 || intent.MemoryMB > MaxMemoryMB {
		return intent, badRequest("memoryMB must be between 1 and %d, got %d", MaxMemoryMB, intent.MemoryMB)
	}
	return intent, nil
}

// validTemplateRef checks a "name" or "name:tag" reference.
func validTemplateRef(field, ref string) error {
	name, tag, tagged := strings.Cut(ref, ":")
	if !id.ValidName(name) {
		return badRequest("invalid %s %q: want 1-63 lowercase letters, digits, '-' and '_', starting with a letter or digit, optionally followed by :tag", field, ref)
	}
	if tagged {
		return validTag(tag)
	}
	return nil
}

func validTag(tag string) error {
	if !tagPattern.MatchString(tag) {
		return badRequest("invalid tag %q: want 1-63 lowercase letters, digits, '.', '-' and '_', starting with a letter or digit", tag)
	}
	return nil
}

// tagPattern is what a tag may be: versions such as v1.0 included.
var tagPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// filesHash is the validated {hash} path value: the SDK's SHA-256 of a
// COPY step's files, in lowercase hex.
func filesHash(r *http.Request) (string, error) {
	h := r.PathValue("hash")
	if !validHash(h) {
		return "", badRequest("invalid files hash %q: want 64 lowercase hex digits (SHA-256)", h)
	}
	return h, nil
}

func validHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func buildID(r *http.Request) (string, error) {
	v := r.PathValue("buildID")
	if v == "" || len(v) > 256 || strings.ContainsAny(v, "\x00\n\r/") {
		return "", badRequest("invalid build ID %q", v)
	}
	return v, nil
}

// fileUploadLink serves GET /templates/{templateID}/files/{hash}.
func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request) error {
	tid, err := templateID(r)
	if err != nil {
		return err
	}
	hash, err := filesHash(r)
	if err != nil {
		return err
	}
	verify, err := uploadVerify(r)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	present, err := b.FilesPresent(r.Context(), tid, hash)
	if err != nil {
		return err
	}
	if present {
		writeJSON(w, http.StatusCreated, wire.TemplateBuildFileUpload{Present: true})
		return nil
	}
	link := s.uploadURL(r, tid, hash, time.Now().Add(UploadLinkTTL), verify)
	writeJSON(w, http.StatusCreated, wire.TemplateBuildFileUpload{URL: link})
	return nil
}

// uploadVerify reads ?verify=, "" or wire.VerifyArchive.
func uploadVerify(r *http.Request) (string, error) {
	v := r.URL.Query().Get("verify")
	if v != "" && v != wire.VerifyArchive {
		return "", badRequest("verify must be %q ({hash} is the SHA-256 of the tar archive) or absent, got %q", wire.VerifyArchive, v)
	}
	return v, nil
}

// uploadURL is the absolute upload link of a COPY step's files on the
// server r reached, valid until expires.
func (s *Server) uploadURL(r *http.Request, templateID, hash string, expires time.Time, verify string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	unix := expires.Unix()
	q := url.Values{
		"expires":   {strconv.FormatInt(unix, 10)},
		"signature": {s.uploadSignature(templateID, hash, unix, verify)},
	}
	if verify != "" {
		q.Set("verify", verify)
	}
	path := strings.NewReplacer("{templateID}", url.PathEscape(templateID), "{hash}", hash).Replace(UploadPath)
	return scheme + "://" + r.Host + path + "?" + q.Encode()
}

// uploadSignature is the hex HMAC-SHA256 that authorizes uploading the
// files named hash of template templateID until the Unix time expires,
// checked as verify says.
func (s *Server) uploadSignature(templateID, hash string, expires int64, verify string) string {
	mac := hmac.New(sha256.New, s.cfg.UploadSecret)
	fmt.Fprintf(mac, "%s\n%s\n%d\n%s", templateID, hash, expires, verify)
	return hex.EncodeToString(mac.Sum(nil))
}

// signedLink is a signed upload link as a request presents it.
type signedLink struct {
	// key names the link whatever its spelling (the signature's bytes;
	// hex digits may come in either case).
	key     string
	expires int64
	verify  bool
}

// checkUploadSignature answers 403 unless the request carries a valid,
// unexpired signature for templateID and hash.
func (s *Server) checkUploadSignature(r *http.Request, templateID, hash string) (signedLink, error) {
	q := r.URL.Query()
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	got, hexErr := hex.DecodeString(q.Get("signature"))
	verify := q.Get("verify")
	want, _ := hex.DecodeString(s.uploadSignature(templateID, hash, expires, verify))
	if err != nil || hexErr != nil || !hmac.Equal(got, want) {
		return signedLink{}, httperr.Errorf(http.StatusForbidden, "invalid upload signature: ask GET /templates/{templateID}/files/{hash} for a link")
	}
	if time.Now().Unix() > expires {
		return signedLink{}, httperr.Errorf(http.StatusForbidden, "upload link expired at %s: ask GET /templates/{templateID}/files/{hash} for a new one", time.Unix(expires, 0).UTC().Format(time.RFC3339))
	}
	return signedLink{key: string(got), expires: expires, verify: verify == wire.VerifyArchive}, nil
}

// uploadLinks remembers the links that are storing files or have stored
// them, until they expire: a link stores files once, so one copied from a
// log or a proxy after its upload is spent, and two uploads through one
// link never race. An upload that fails frees its link for a retry.
// Links die with the process, as the upload secret does by default.
type uploadLinks struct {
	mu    sync.Mutex
	links map[string]linkState
}

type linkState struct {
	expires int64
	spent   bool // false: an upload through it is under way
}

// claim takes link for one upload, or says why it cannot be used.
func (l *uploadLinks) claim(link signedLink) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now().Unix()
	for k, st := range l.links {
		if st.expires < now {
			delete(l.links, k)
		}
	}
	if st, ok := l.links[link.key]; ok {
		if st.spent {
			return httperr.Errorf(http.StatusForbidden, "upload link already used: a link stores files once; ask GET /templates/{templateID}/files/{hash} for a new one")
		}
		return httperr.Errorf(http.StatusConflict, "another upload through this link is under way")
	}
	if l.links == nil {
		l.links = map[string]linkState{}
	}
	l.links[link.key] = linkState{expires: link.expires}
	return nil
}

// release ends the upload claim started: a stored one spends the link.
func (l *uploadLinks) release(link signedLink, stored bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if stored {
		l.links[link.key] = linkState{expires: link.expires, spent: true}
	} else {
		delete(l.links, link.key)
	}
}

// uploadFiles serves PUT UploadPath: a COPY step's tar archive, streamed
// to the builder as it arrives. Its body limit is the builder's (see
// bodyLimit).
func (s *Server) uploadFiles(w http.ResponseWriter, r *http.Request) error {
	tid, err := templateID(r)
	if err != nil {
		return err
	}
	hash, err := filesHash(r)
	if err != nil {
		return err
	}
	link, err := s.checkUploadSignature(r, tid, hash)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	tooLarge := fmt.Sprintf("the files are larger than the server accepts (%d bytes)", b.MaxFilesBytes())
	if r.ContentLength > b.MaxFilesBytes() {
		return httperr.Errorf(http.StatusRequestEntityTooLarge, "%s: the upload has %d", tooLarge, r.ContentLength)
	}
	if err := s.uploads.claim(link); err != nil {
		return err
	}
	err = b.PutFiles(r.Context(), tid, hash, tooLargeAsKind{r.Body, tooLarge}, link.verify)
	s.uploads.release(link, err == nil)
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
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
	if err := b.StartBuild(r.Context(), tid, bid, spec); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// buildSpec validates the body of a build start.
func buildSpec(body wire.TemplateBuildStartV2) (cube.BuildSpec, error) {
	spec := cube.BuildSpec{
		FromImage: strings.TrimSpace(body.FromImage), FromTemplate: strings.TrimSpace(body.FromTemplate),
		StartCmd: body.StartCmd, ReadyCmd: body.ReadyCmd, Force: body.Force,
	}
	if (spec.FromImage == "") == (spec.FromTemplate == "") {
		return spec, badRequest("exactly one of fromImage and fromTemplate is required")
	}
	if spec.FromImage != "" && (len(spec.FromImage) > 4096 || strings.ContainsAny(spec.FromImage, "\x00\n\r")) {
		return spec, badRequest("invalid fromImage %q", spec.FromImage)
	}
	if spec.FromTemplate != "" {
		if err := validTemplateRef("fromTemplate", spec.FromTemplate); err != nil {
			return spec, err
		}
	}
	if err := registryAuth(body.FromImageRegistry, &spec); err != nil {
		return spec, err
	}
	if err := buildString("startCmd", spec.StartCmd); err != nil {
		return spec, err
	}
	if err := buildString("readyCmd", spec.ReadyCmd); err != nil {
		return spec, err
	}
	if len(body.Steps) > MaxBuildSteps {
		return spec, badRequest("at most %d steps, got %d", MaxBuildSteps, len(body.Steps))
	}
	for i, st := range body.Steps {
		step, err := buildStep(i, st)
		if err != nil {
			return spec, err
		}
		spec.Steps = append(spec.Steps, step)
	}
	return spec, nil
}

// registryAuth fills the spec's registry credentials. Only a general
// registry's username and password can be served: ECR and Artifact
// Registry need their clouds' token exchanges.
func registryAuth(reg *wire.FromImageRegistry, spec *cube.BuildSpec) error {
	if reg == nil {
		return nil
	}
	switch reg.Type {
	case "registry":
		if spec.FromImage == "" {
			return badRequest("fromImageRegistry applies to fromImage only")
		}
		spec.RegistryUsername, spec.RegistryPassword = reg.Username, reg.Password
		return nil
	case "aws", "gcp":
		return badRequest("fromImageRegistry type %q is not supported: only general registries (type \"registry\", username and password) are", reg.Type)
	}
	return badRequest("fromImageRegistry type %q: want \"registry\"", reg.Type)
}

// stepArgs bounds the argument count of each step type.
var stepArgs = map[string]struct{ min, max int }{
	cube.StepRun:     {1, 2},
	cube.StepCopy:    {2, 4},
	cube.StepEnv:     {2, maxStepArgs},
	cube.StepWorkdir: {1, 1},
	cube.StepUser:    {1, 1},
}

// buildStep validates step i (0-based; messages name it 1-based, as the
// build's log does).
func buildStep(i int, st wire.TemplateStep) (cube.BuildStep, error) {
	step := cube.BuildStep{Type: st.Type, Args: st.Args, FilesHash: st.FilesHash, Force: st.Force}
	n := i + 1
	bounds, ok := stepArgs[st.Type]
	if !ok {
		return step, badRequest("step %d: type %q: want RUN, COPY, ENV, WORKDIR or USER", n, st.Type)
	}
	if len(st.Args) < bounds.min || len(st.Args) > bounds.max {
		return step, badRequest("step %d: %s takes %s, got %d", n, st.Type, argCount(bounds.min, bounds.max), len(st.Args))
	}
	if st.Type == cube.StepEnv && len(st.Args)%2 != 0 {
		return step, badRequest("step %d: ENV takes name-value pairs, got %d arguments", n, len(st.Args))
	}
	for _, a := range st.Args {
		if err := buildString(fmt.Sprintf("step %d: argument", n), a); err != nil {
			return step, err
		}
	}
	switch {
	case st.Type == cube.StepCopy && !validHash(st.FilesHash):
		return step, badRequest("step %d: COPY needs filesHash, 64 lowercase hex digits, got %q", n, st.FilesHash)
	case st.Type != cube.StepCopy && st.FilesHash != "":
		return step, badRequest("step %d: filesHash belongs to COPY steps only", n)
	}
	return step, nil
}

func argCount(min, max int) string {
	switch {
	case min == max:
		return fmt.Sprintf("exactly %d argument(s)", min)
	case max == maxStepArgs:
		return fmt.Sprintf("at least %d arguments", min)
	}
	return fmt.Sprintf("%d to %d arguments", min, max)
}

func buildString(field, v string) error {
	if len(v) > maxBuildString {
		return badRequest("%s is longer than %d bytes", field, maxBuildString)
	}
	if strings.ContainsRune(v, 0) {
		return badRequest("%s may not contain NUL bytes", field)
	}
	return nil
}

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
	st, err := b.BuildStatus(r.Context(), tid, bid, int(offset))
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
	logs, err := b.BuildLogs(r.Context(), tid, bid, q)
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
	bid, err := b.AssignTags(r.Context(), body.Target, body.Tags)
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
	if err := b.RemoveTags(r.Context(), body.Name, body.Tags); err != nil {
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
	tags, err := b.TemplateTags(r.Context(), tid)
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
		return b.SetPublic(r.Context(), tid, *public)
	}
	t, err := s.backend.GetTemplate(r.Context(), tid)
	if err != nil {
		return nil, err
	}
	return t.Aliases, nil
}
