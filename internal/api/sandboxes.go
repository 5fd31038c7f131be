package api

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/version"
)

// Default lifetimes when a request names none: the legacy routes keep E2B's
// original 15 s, v2 routes 300 s.
const (
	defaultTimeoutV1 = 15 * time.Second
	defaultTimeoutV2 = 300 * time.Second
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	v := s.cfg.Version
	if v == "" {
		v = version.Version
	}
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok", Version: v})
	return nil
}

func (s *Server) createSandbox(v2 bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var body wire.NewSandbox
		if err := decodeBody(r, &body, true); err != nil {
			return err
		}
		req, err := s.createRequest(&body, v2)
		if err != nil {
			return err
		}
		start := time.Now()
		req.Team = callerOf(r).Team
		sb, err := s.backend.CreateSandbox(r.Context(), req)
		s.metrics.created(time.Since(start), err)
		if err != nil {
			s.log.Warn("create sandbox failed", "template", req.Template, "err", err)
			return err
		}
		writeJSON(w, http.StatusCreated, s.wireSandbox(sb))
		return nil
	}
}

func (s *Server) createRequest(b *wire.NewSandbox, v2 bool) (cube.CreateRequest, error) {
	tpl := strings.TrimSpace(b.TemplateID)
	if tpl == "" {
		return cube.CreateRequest{}, badRequest("templateID is required")
	}
	def := defaultTimeoutV1
	if v2 {
		def = defaultTimeoutV2
	}
	timeout, err := seconds("timeout", b.Timeout, def, time.Second, s.cfg.MaxTimeout)
	if err != nil {
		return cube.CreateRequest{}, err
	}
	for k := range b.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return cube.CreateRequest{}, badRequest("envVars: invalid variable name %q", k)
		}
	}
	cpus, err := positive("cpuCount", b.CPUCount, 64)
	if err != nil {
		return cube.CreateRequest{}, err
	}
	mem, err := positive("memoryMB", b.MemoryMB, 1<<20)
	if err != nil {
		return cube.CreateRequest{}, err
	}
	req := cube.CreateRequest{
		CPUCount:        cpus,
		MemoryMB:        mem,
		Template:        tpl,
		Timeout:         timeout,
		Metadata:        b.Metadata,
		EnvVars:         b.EnvVars,
		AutoPause:       b.AutoPause != nil && *b.AutoPause,
		AutoPauseMemory: b.AutoPauseMemory == nil || *b.AutoPauseMemory,
		AutoResume:      b.AutoResume != nil && b.AutoResume.Enabled,
		Secure:          v2 || (b.Secure != nil && *b.Secure),
		Network:         cube.Network{AllowInternetAccess: b.AllowInternetAccess},
	}
	if n := b.Network; n != nil {
		req.Network.AllowOut = n.AllowOut
		req.Network.DenyOut = n.DenyOut
		req.Network.AllowPublicTraffic = n.AllowPublicTraffic
		req.Network.MaskRequestHost = n.MaskRequestHost
		if req.Network.HTTPSPorts, err = httpsPorts(n.HTTPSPorts); err != nil {
			return cube.CreateRequest{}, err
		}
		req.Network.Rules = cubeRules(n.Rules)
	}
	if req.VolumeMounts, err = volumeMounts(b.VolumeMounts); err != nil {
		return cube.CreateRequest{}, err
	}
	return req, nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, err := s.ownSandbox(r, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.wireDetail(sb))
	return nil
}

func (s *Server) killSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	if err := s.backend.KillSandbox(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// parseMetadataFilter decodes the metadata query parameter. The JS SDK
// encodes each key and value, joins them as a query string and sends that
// string as one (again encoded) parameter; so after the usual decoding the
// value is parsed as a query string and each key and value decoded once
// more. A second decoding that fails (a literal '%' sent by a client that
// encodes once) keeps the once-decoded text.
func parseMetadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, badRequest("invalid metadata filter %q: %v", raw, err)
	}
	out := make(map[string]string, len(vals))
	for k, vs := range vals {
		key := unescapeOnce(k)
		if key == "" {
			return nil, badRequest("invalid metadata filter %q: empty key", raw)
		}
		out[key] = unescapeOnce(vs[len(vs)-1])
	}
	return out, nil
}

func unescapeOnce(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// parseStates reads the state filter: a comma list, possibly repeated.
func parseStates(r *http.Request) ([]cube.SandboxState, error) {
	var out []cube.SandboxState
	for _, v := range r.URL.Query()["state"] {
		for _, part := range strings.Split(v, ",") {
			switch st := cube.SandboxState(strings.TrimSpace(part)); st {
			case cube.StateRunning, cube.StatePaused:
				out = append(out, st)
			case "":
			default:
				return nil, badRequest("invalid state %q: want running or paused", part)
			}
		}
	}
	return out, nil
}

func (s *Server) listSandboxesV1(w http.ResponseWriter, r *http.Request) error {
	md, err := parseMetadataFilter(r.URL.Query().Get("metadata"))
	if err != nil {
		return err
	}
	items, err := s.backend.ListSandboxes(r.Context(), cube.ListFilter{Team: callerOf(r).Team, States: []cube.SandboxState{cube.StateRunning}, Metadata: md})
	if err != nil {
		return err
	}
	items, _, _ = page(items, sandboxKey, false, len(items), "")
	writeJSON(w, http.StatusOK, s.wireListedAll(items))
	return nil
}

func sandboxKey(sb *cube.Sandbox) (time.Time, string) { return sb.StartedAt, sb.ID }

func (s *Server) listSandboxesV2(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	md, err := parseMetadataFilter(q.Get("metadata"))
	if err != nil {
		return err
	}
	states, err := parseStates(r)
	if err != nil {
		return err
	}
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	asc := false
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		asc = true
	default:
		return badRequest("invalid order %q: want asc or desc", q.Get("order"))
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return badRequest("invalid startedAfter %q: want an RFC 3339 time", v)
		}
	}
	p, err := pageAt(limit, token)
	if err != nil {
		return err
	}
	p.Asc, p.Since = asc, after
	items, next, err := s.backend.ListSandboxPage(r.Context(), cube.ListFilter{Team: callerOf(r).Team, States: states, Metadata: md, Template: q.Get("template")}, p)
	if err != nil {
		return err
	}
	setNextTokenAt(w, next)
	writeJSON(w, http.StatusOK, s.wireListedAll(items))
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.TimeoutRequest
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if body.Timeout == nil {
		return badRequest("timeout is required")
	}
	d, err := seconds("timeout", body.Timeout, 0, 0, s.cfg.MaxTimeout)
	if err != nil {
		return err
	}
	if err := s.requireRunning(r, id); err != nil {
		return err
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	if err := s.backend.SetTimeout(r.Context(), id, d, false); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// requireRunning answers, as E2B's API does for a timeout or a refresh,
// that a paused sandbox is not found: E2B keeps only running sandboxes
// where those look. e2b 2.0 to 2.4's Sandbox.connect relies on it: it
// sets the timeout and resumes the sandbox only when that fails.
func (s *Server) requireRunning(r *http.Request, id string) error {
	sb, err := s.ownSandbox(r, id)
	if err != nil {
		return err
	}
	if sb.State == cube.StatePaused {
		return cube.Errorf(cube.NotFound, "Sandbox %q doesn't exist or you don't have access to it", id)
	}
	return nil
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.RefreshRequest
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	d, err := seconds("duration", body.Duration, defaultTimeoutV1, 0, min(s.cfg.MaxTimeout, MaxRefreshSeconds*time.Second))
	if err != nil {
		return err
	}
	if err := s.requireRunning(r, id); err != nil {
		return err
	}
	if err := s.backend.SetTimeout(r.Context(), id, d, true); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) connect(v2 bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := sandboxID(r)
		if err != nil {
			return err
		}
		var body wire.ConnectRequest
		if err := decodeBody(r, &body, !v2); err != nil {
			return err
		}
		if !v2 && body.Timeout == nil {
			return badRequest("timeout is required")
		}
		d, err := seconds("timeout", body.Timeout, defaultTimeoutV2, 0, s.cfg.MaxTimeout)
		if err != nil {
			return err
		}
		req := cube.ConnectRequest{Timeout: d, Memory: body.Memory == nil || *body.Memory, MoveFrom: s.moveFrom(r)}
		return s.answerConnect(w, r, id, req, false)
	}
}

// resume is the deprecated resume route: connect, but a running sandbox is
// a conflict and success is always 201.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.ConnectRequest
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	d, err := seconds("timeout", body.Timeout, defaultTimeoutV1, time.Second, s.cfg.MaxTimeout)
	if err != nil {
		return err
	}
	req := cube.ConnectRequest{Timeout: d, Memory: body.Memory == nil || *body.Memory, RequirePaused: true, AutoPause: body.AutoPause, MoveFrom: s.moveFrom(r)}
	return s.answerConnect(w, r, id, req, true)
}

// moveFrom is the node a peer's resume takes the sandbox over from, ""
// for a client's, whose header could otherwise move any sandbox paused on
// disk away from its node.
func (s *Server) moveFrom(r *http.Request) string {
	if !s.forPeers {
		return ""
	}
	return r.Header.Get(MoveFromHeader)
}

func (s *Server) answerConnect(w http.ResponseWriter, r *http.Request, id string, req cube.ConnectRequest, always201 bool) error {
	ctx := r.Context()
	if err := s.mine(r, id); err != nil {
		return err
	}
	sb, resumed, err := s.backend.ConnectSandbox(ctx, id, req)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if resumed || always201 {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.wireSandbox(sb))
	return nil
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.PauseRequest
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	p, err := capability[cube.Pauser](s, "pausing sandboxes is")
	if err != nil {
		return err
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	if err := p.PauseSandbox(r.Context(), id, body.Memory == nil || *body.Memory); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.NetworkUpdate
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	nu, err := capability[cube.NetworkUpdater](s, "network updates are")
	if err != nil {
		return err
	}
	n := cube.Network{AllowInternetAccess: body.AllowInternetAccess, AllowOut: body.AllowOut, DenyOut: body.DenyOut,
		Rules: cubeRules(body.Rules)}
	if err := s.mine(r, id); err != nil {
		return err
	}
	if err := nu.UpdateNetwork(r.Context(), id, n); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// positive reads an optional positive integer field of at most max.
func positive(field string, v *int, max int) (int, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 || *v > max {
		return 0, badRequest("%s must be between 1 and %d", field, max)
	}
	return *v, nil
}

// httpsPorts checks network.httpsPorts: ports of the sandbox, not envd's,
// which the proxy always reaches over plain HTTP.
func httpsPorts(ports []int) ([]int, error) {
	for i, p := range ports {
		switch {
		case p < 1 || p > 65535:
			return nil, cube.Errorf(cube.Invalid, "network.httpsPorts[%d]: %d is not a port (1-65535)", i, p).WithField("network.httpsPorts")
		case p == protocol.EnvdPort:
			return nil, cube.Errorf(cube.Invalid, "network.httpsPorts[%d]: %d is envd's port, which is always plain HTTP: leave it out", i, p).WithField("network.httpsPorts")
		}
	}
	return ports, nil
}
