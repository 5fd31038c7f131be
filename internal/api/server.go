// Package api is Cube's control plane over HTTP: the E2B-compatible REST API
// (plus Cube's extensions), its authentication, errors and metrics. The work
// is done by a cube.Backend (the node); this package validates, translates
// and answers, its failures through httperr, which turns the core's error
// kinds into status codes for every HTTP layer alike.
// Mount shares the listener with the sandbox proxy, which this package
// knows only as the Sandboxes that claim their traffic, and records both
// kinds of request in one access log and one set of request metrics.
package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"cube/internal/cube"
	"cube/internal/httperr"
	"cube/internal/ratelimit"
	"cube/internal/version"
)

// Config configures the control plane. Zero values pick the documented
// defaults; only Teams is required.
type Config struct {
	// Teams knows the teams and their API keys: every request but those
	// to public routes presents a key, and acts for the key's team.
	Teams cube.Teams
	// Domain is the sandbox domain, reported as "domain" in sandbox
	// answers (with the port clients reach it on, unless that is the
	// scheme's own); empty reports null. Routing by it is the proxy's.
	Domain string
	// CACert is the PEM of the local CA the HTTPS listener's certificates
	// come from, served publicly at GET /tls/ca.pem: clients need it
	// before they can trust anything. Empty answers 404 there.
	CACert []byte
	// ClientID fills the deprecated clientID field; default "cube".
	ClientID string
	// MaxTimeout is the longest sandbox lifetime a request may ask for;
	// default 24h. Longer → 400.
	MaxTimeout time.Duration
	// MaxBodyBytes bounds API request bodies (not proxied ones); default
	// 1 MiB. Larger → 413.
	MaxBodyBytes int64
	// Logger receives access logs and errors; default slog.Default().
	Logger *slog.Logger
	// Registry receives the server's Prometheus metrics and is what
	// GET /metrics serves; the node may register its own collectors on it.
	// Nil creates one with the Go and process collectors.
	Registry *prometheus.Registry
	// SandboxMetrics are the per-sandbox series (sandbox IDs in their
	// labels). GET /metrics adds them only for requests that carry an API
	// key: a sandbox's ID is enough to reach its public ports.
	SandboxMetrics prometheus.Gatherer
	// Version is reported by GET /health; default version.Version.
	Version string
	// RateLimit is the sustained API requests per second allowed per key;
	// 0 means unlimited. RateBurst is the bucket size; default 2×RateLimit.
	// Over the limit → 429 with Retry-After. Proxied traffic has its own
	// limit, the proxy's.
	RateLimit float64
	RateBurst int
	// UploadSecret signs the upload links of template build files
	// (GET /templates/{templateID}/files/{hash}), which the SDKs follow
	// without the API key. Empty picks 32 random bytes, so links die with
	// the process; servers behind one address share a secret.
	UploadSecret []byte
	// Audit receives an entry for every change made through the API
	// (every request but GET, HEAD and OPTIONS that a key or token
	// authorised, whatever its outcome); nil keeps none.
	Audit cube.Audit
	// Console answers the web console's routes (/console, its assets and
	// /console/api/...); nil answers 404 there. The page and its assets
	// are public, every /console/api route needs the key like any other.
	Console http.Handler
}

// Defaults applied by NewServer.
const (
	DefaultMaxTimeout   = 24 * time.Hour
	DefaultMaxBodyBytes = 1 << 20
	// MaxListLimit is the largest page a list answers with.
	MaxListLimit = 100
	// MaxRefreshSeconds bounds the legacy refresh duration.
	MaxRefreshSeconds = 3600
)

// Server is the control plane. It is served through Mount, which keeps
// sandbox traffic away from its routes.
type Server struct {
	cfg     Config
	backend cube.Backend
	mux     *http.ServeMux
	metrics *metrics
	limiter *ratelimit.Keyed[[sha256.Size]byte]
	public  map[string]bool // mux pattern → served without an API key
	// adminOnly marks the mux patterns only an admin key may call.
	adminOnly map[string]bool
	log       *slog.Logger
	// uploads are the build file upload links in use or spent.
	uploads *uploadLinks
	// rates are the buckets of keys whose team has a rate quota, by rate.
	rates *quotaRates
	// forPeers marks the API that answers what peers sent (Over): only
	// there does a resume take MoveFromHeader, which only a node sets.
	forPeers bool
}

// MoveFromHeader, on a peer's resume (connect or the older resume route),
// names the node the sandbox is to be taken over from: the node that
// placed the resume decided the move and signed the header with it.
const MoveFromHeader = "X-Cube-Move-From"

// NewServer returns the control plane answering through b.
func NewServer(cfg Config, b cube.Backend) (*Server, error) {
	if b == nil {
		return nil, errors.New("api: nil backend")
	}
	if cfg.Teams == nil {
		return nil, errors.New("api: no teams configured")
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "cube"
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = version.Version
	}
	if len(cfg.UploadSecret) == 0 {
		cfg.UploadSecret = make([]byte, 32)
		if _, err := rand.Read(cfg.UploadSecret); err != nil {
			return nil, fmt.Errorf("api: upload secret: %w", err)
		}
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s := &Server{
		cfg:     cfg,
		backend: b,
		mux:     http.NewServeMux(),
		// Buckets exist only for keys that passed authentication, so
		// their number is bounded by the keys of the teams.
		limiter: ratelimit.New[[sha256.Size]byte](cfg.RateLimit, cfg.RateBurst, 0),
		log:     cfg.Logger,
		uploads: &uploadLinks{},
		rates:   &quotaRates{byRate: map[float64]*ratelimit.Keyed[[sha256.Size]byte]{}},
	}
	m, err := newMetrics(cfg.Registry, cfg.SandboxMetrics, b)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.serveRoutes()
	return s, nil
}

// Over returns the control plane answering through b instead, sharing
// s's keys, rate limits, upload links and metrics: a node of a cluster
// answers its peers' requests, which they already sent to the node that
// holds what they are about, through its own parts alone, and its
// clients' through the cluster. Its resumes take MoveFromHeader: only
// signed requests reach it, and a node's signature covers its X-Cube-*
// headers.
func (s *Server) Over(b cube.Backend) *Server {
	o := &Server{cfg: s.cfg, backend: b, mux: http.NewServeMux(), metrics: s.metrics, limiter: s.limiter, rates: s.rates, log: s.log, uploads: s.uploads, forPeers: true}
	o.serveRoutes()
	return o
}

func (s *Server) serveRoutes() {
	s.public = map[string]bool{}
	s.adminOnly = map[string]bool{}
	for _, rt := range s.routes() {
		pattern := muxPattern(rt.method + " " + rt.path)
		s.mux.Handle(pattern, rt.handler)
		s.public[pattern] = rt.access == open
		s.adminOnly[pattern] = rt.access == admin
	}
}

// route is one served operation; the table is also what the OpenAPI test
// walks.
type route struct {
	method, path string
	access       access
	handler      handlerFunc
}

// access is who may call a route.
type access int

const (
	// team routes take any team's key (or, where the route says, a
	// volume's token) and act for that team.
	team access = iota
	// open routes need no key.
	open
	// admin routes take only an admin key.
	admin
)

// handlerFunc is an API route's handler. It writes its own success and
// returns its failure, which is answered in the E2B error shape, so that a
// handler cannot forget to stop after answering one. A handler that has
// begun its answer (a stream) returns nil from then on: a status can no
// longer be sent.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (h handlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := h(w, r)
	switch {
	case errors.Is(err, cube.ErrAnsweredElsewhere):
		// Another node answers the request: nothing is answered, or
		// audited, here.
		if rec, ok := w.(*recorder); ok {
			rec.elsewhere = true
		}
	case err != nil:
		writeError(w, err)
	}
}

func (s *Server) routes() []route {
	return []route{
		{"GET", "/health", open, s.health},
		{"GET", "/metrics", open, s.promMetrics},
		{"GET", "/openapi.yml", open, s.openapi},
		{"GET", "/tls/ca.pem", open, s.caCert},
		{"GET", "/console", open, s.console},
		{"GET", "/console/assets/{file}", open, s.console},
		{"GET", "/console/api/summary", team, s.console},

		{"POST", "/sandboxes", team, s.createSandbox(false)},
		{"POST", "/v2/sandboxes", team, s.createSandbox(true)},
		{"GET", "/sandboxes", team, s.listSandboxesV1},
		{"GET", "/v2/sandboxes", team, s.listSandboxesV2},
		{"GET", "/sandboxes/{sandboxID}", team, s.getSandbox},
		{"DELETE", "/sandboxes/{sandboxID}", team, s.killSandbox},
		{"POST", "/sandboxes/{sandboxID}/timeout", team, s.setTimeout},
		{"POST", "/sandboxes/{sandboxID}/refreshes", team, s.refresh},
		{"POST", "/sandboxes/{sandboxID}/connect", team, s.connect(false)},
		{"POST", "/v2/sandboxes/{sandboxID}/connect", team, s.connect(true)},
		{"POST", "/sandboxes/{sandboxID}/resume", team, s.resume},
		{"POST", "/sandboxes/{sandboxID}/pause", team, s.pause},
		{"GET", "/sandboxes/{sandboxID}/metrics", team, s.sandboxMetrics},
		{"GET", "/sandboxes/metrics", team, s.bulkMetrics},
		{"GET", "/sandboxes/{sandboxID}/logs", team, s.logsV1},
		{"GET", "/v2/sandboxes/{sandboxID}/logs", team, s.logsV2},
		{"PUT", "/sandboxes/{sandboxID}/network", team, s.updateNetwork},

		{"GET", "/nodes", admin, s.listNodes},
		{"GET", "/nodes/{nodeID}", admin, s.getNode},
		{"POST", "/nodes/{nodeID}", admin, s.setNodeStatus},
		{"DELETE", "/nodes/{nodeID}", admin, s.removeNode},
		{"GET", "/teams", team, s.listTeams},
		{"POST", "/teams", admin, s.createTeam},
		{"GET", "/teams/{teamID}", team, s.getTeam},
		{"DELETE", "/teams/{teamID}", admin, s.deleteTeam},
		{"PUT", "/teams/{teamID}/quotas", admin, s.setQuotas},
		{"GET", "/teams/{teamID}/metrics", team, s.teamMetrics},
		{"GET", "/teams/{teamID}/metrics/max", team, s.teamMetricsMax},
		{"GET", "/teams/{teamID}/usage", team, s.teamUsage},
		{"GET", "/api-keys", team, s.listKeys},
		{"POST", "/api-keys", team, s.createKey},
		{"PATCH", "/api-keys/{apiKeyID}", team, s.renameKey},
		{"DELETE", "/api-keys/{apiKeyID}", team, s.deleteKey},
		{"POST", "/admin/teams/{teamID}/api-keys", admin, s.adminCreateKey},
		{"DELETE", "/admin/teams/{teamID}/api-keys/{apiKeyID}", admin, s.adminDeleteKey},
		{"POST", "/admin/teams/{teamID}/sandboxes/kill", admin, s.adminKillSandboxes},
		{"POST", "/admin/teams/{teamID}/builds/cancel", admin, s.adminCancelBuilds},
		{"GET", "/admin/sandboxes/running-counts", admin, s.runningCounts},
		{"GET", "/audit", team, s.listAudit},
		{"POST", "/access-tokens", team, s.createAccessToken},
		{"DELETE", "/access-tokens/{accessTokenID}", team, s.deleteAccessToken},
		{"GET", "/secrets", team, s.listSecrets},
		{"POST", "/secrets", team, s.createSecret},
		{"GET", "/secrets/{secretID}", team, s.getSecret},
		{"POST", "/secrets/{secretID}", team, s.updateSecret},
		{"DELETE", "/secrets/{secretID}", team, s.deleteSecret},

		{"POST", "/sandboxes/{sandboxID}/snapshots", team, s.createSnapshot},
		{"GET", "/snapshots", team, s.listSnapshots},
		{"POST", "/sandboxes/{sandboxID}/fork", team, s.fork},
		{"POST", "/sandboxes/{sandboxID}/clone", team, s.clone},
		{"POST", "/sandboxes/{sandboxID}/rollback", team, s.rollback},

		{"GET", "/templates", team, s.listTemplatesDetailed},
		{"POST", "/templates", team, s.buildTemplate},
		{"GET", "/templates/jobs/{jobID}", team, s.getBuildJob},
		{"GET", "/templates/aliases/{alias}", team, s.getTemplateAlias},
		{"GET", "/templates/{templateID}", team, s.getTemplateDetailed},
		{"DELETE", "/templates/{templateID}", team, s.deleteTemplate},
		{"POST", ImportsPath, team, s.importArchive},

		{"POST", "/v3/templates", team, s.requestBuild},
		{"GET", "/v2/templates", team, s.listTemplatesDetailed},
		{"PATCH", "/templates/{templateID}", team, s.updateTemplate},
		{"PATCH", "/v2/templates/{templateID}", team, s.updateTemplate},
		{"GET", "/templates/{templateID}/files/{hash}", team, s.fileUploadLink},
		{"PUT", UploadPath, open, s.uploadFiles},
		{"POST", "/v2/templates/{templateID}/builds/{buildID}", team, s.startBuild},
		{"GET", "/templates/{templateID}/builds/{buildID}/status", team, s.buildStatus},
		{"GET", "/templates/{templateID}/builds/{buildID}/logs", team, s.buildLogs},
		{"POST", "/templates/tags", team, s.assignTags},
		{"DELETE", "/templates/tags", team, s.removeTags},
		{"GET", "/templates/{templateID}/tags", team, s.templateTags},

		{"GET", "/volumes", team, s.listVolumes},
		{"POST", "/volumes", team, s.createVolume},
		{"GET", "/volumes/{volumeID}", team, s.getVolume},
		{"DELETE", "/volumes/{volumeID}", team, s.deleteVolume},
		// The volume content routes also take the volume's own token
		// (volumeToken).
		{"GET", "/volumecontent/{volumeID}/path", team, s.volumeStat},
		{"PATCH", "/volumecontent/{volumeID}/path", team, s.volumeSetAttr},
		{"DELETE", "/volumecontent/{volumeID}/path", team, s.volumeRemove},
		{"GET", "/volumecontent/{volumeID}/dir", team, s.volumeList},
		{"POST", "/volumecontent/{volumeID}/dir", team, s.volumeMakeDir},
		{"GET", "/volumecontent/{volumeID}/file", team, s.volumeReadFile},
		{"PUT", VolumeFilePath, team, s.volumeWriteFile},
	}
}

// muxPatterns maps the routes whose documented pattern Go's ServeMux
// refuses to the wider pattern they are registered under. GET
// /templates/{templateID}/tags overlaps GET /templates/jobs/{jobID} and
// /templates/aliases/{alias} (both match /templates/jobs/tags) with
// neither more specific, which the mux rejects; the wider pattern is less
// specific than both, so those keep their paths and the handler answers
// 404 for any last segment but "tags".
var muxPatterns = map[string]string{
	"GET /templates/{templateID}/tags": "GET /templates/{templateID}/{tags}",
}

func muxPattern(documented string) string {
	if p, ok := muxPatterns[documented]; ok {
		return p
	}
	return documented
}

var probeMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// serveAPI answers one API request and returns its route label.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) string {
	_, pattern := s.mux.Handler(r)
	r, err := s.admit(w, r, pattern)
	if err != nil {
		writeError(w, err)
		if pattern == "" {
			return "unmatched"
		}
		return pattern
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, s.bodyLimit(pattern))
	}
	s.mux.ServeHTTP(w, r)
	s.audit(w, r, pattern)
	return pattern
}

// admit refuses what no route may serve: a request that matches none (405
// with Allow when another method would), and one to a route that needs
// the API key without a credential it takes or over the key's rate. The
// request it returns carries its caller (callerOf).
func (s *Server) admit(w http.ResponseWriter, r *http.Request, pattern string) (*http.Request, error) {
	if pattern == "" {
		var allowed []string
		for _, m := range probeMethods {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := s.mux.Handler(probe); p != "" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			return r, httperr.Errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path)
		}
		return r, httperr.Errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	if s.isPublic(pattern) {
		return r, nil
	}
	c, err := s.authenticate(r)
	key := HashAPIKey(presentedKey(r))
	if err != nil && httperr.StatusOf(err) == http.StatusUnauthorized {
		var ok bool
		if c, ok = s.volumeToken(pattern, r); ok {
			err = nil
		}
	}
	if err != nil {
		return r, err
	}
	if s.adminOnly[pattern] && !c.Admin {
		return r, httperr.Errorf(http.StatusForbidden, "%s needs the admin key", pattern)
	}
	limiter := s.limiter
	if c.RequestsPerSecond > 0 {
		limiter = s.rates.at(c.RequestsPerSecond)
	}
	if ok, wait := limiter.Allow(key); !ok {
		return r, rateLimited(wait)
	}
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c)), nil
}

// bodyLimit is the most a request to the route served under pattern may
// send: image uploads get the importer's limit, build file uploads the
// step builder's, every other route the API's JSON limit.
func (s *Server) bodyLimit(pattern string) int64 {
	switch pattern {
	case "POST " + ImportsPath:
		if imp, ok := s.backend.(cube.ArchiveImporter); ok {
			return imp.MaxImportBytes()
		}
	case "PUT " + UploadPath:
		if b, ok := s.backend.(cube.StepBuilder); ok {
			return b.MaxFilesBytes()
		}
	case "PUT " + VolumeFilePath:
		if b, ok := s.backend.(cube.Volumes); ok {
			return b.MaxVolumeBytes() // the volume's own size stops it first
		}
	}
	return s.cfg.MaxBodyBytes
}

// isPublic reports whether the route served under pattern needs no API
// key, as the route table says.
func (s *Server) isPublic(pattern string) bool { return s.public[pattern] }
