// Package proxy carries user traffic to a port of a sandbox. A request names
// its sandbox either with the E2b-Sandbox-Id and E2b-Sandbox-Port headers
// (what the SDKs send when E2B_SANDBOX_URL is set) or with a Host of the form
// <port>-<sandboxID>.<domain> (what sandbox.getHost(port) hands out). The
// proxy dials only what the Resolver returns for a known sandbox, so nothing
// else on the host is reachable through it.
package proxy

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/httperr"
	"cube/internal/id"
	"cube/internal/ratelimit"
)

// Header names of header-based routing and of the inbound traffic token.
const (
	HeaderSandboxID    = "E2b-Sandbox-Id"
	HeaderSandboxPort  = "E2b-Sandbox-Port"
	HeaderTrafficToken = "E2b-Traffic-Access-Token"
)

// Resolver tells the proxy where a sandbox port lives; the node implements
// it. A sandbox that does not exist is an error of kind cube.NotFound.
type Resolver = cube.Resolver

// Target is where one sandbox port is reached.
type Target = cube.Target

// Route is the sandbox port a request is addressed to.
type Route struct {
	SandboxID string
	Port      int
}

// Match reports whether r is for a sandbox, and which. Header routing wins
// over Host routing. domain, when non-empty, is the suffix a routing Host
// must carry; when empty any <port>-<id>.<something> Host routes.
//
// A request with only one of the two headers, or with a malformed one, is
// still sandbox traffic (ok is true) so it gets the proxy's error rather
// than an API 404; err says what is wrong.
func Match(r *http.Request, domain string) (rt Route, ok bool, err error) {
	sid, port := r.Header.Get(HeaderSandboxID), r.Header.Get(HeaderSandboxPort)
	if sid != "" || port != "" {
		if sid == "" || port == "" {
			return Route{SandboxID: sid}, true, fmt.Errorf("both %s and %s headers are required", HeaderSandboxID, HeaderSandboxPort)
		}
		rt, err := parseRoute(sid, port)
		return rt, true, err
	}
	return MatchHost(r.Host, domain)
}

// MatchHost reads a sandbox route from a host name "<port>-<id>.<domain>"
// (any domain when domain is empty); ok is false for other names.
func MatchHost(host, domain string) (Route, bool, error) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, rest, found := strings.Cut(host, ".")
	if !found || rest == "" {
		return Route{}, false, nil
	}
	if domain != "" && rest != strings.TrimSuffix(strings.ToLower(domain), ".") {
		return Route{}, false, nil
	}
	port, sid, found := strings.Cut(label, "-")
	if !found || port == "" || !isDigits(port) {
		return Route{}, false, nil
	}
	// An id with a further "-suffix" is how older E2B hosts carried a client
	// id; only the first part names the sandbox.
	sid, _, _ = strings.Cut(sid, "-")
	rt, err := parseRoute(sid, port)
	return rt, true, err
}

func parseRoute(sandboxID, port string) (Route, error) {
	if !id.ValidSandbox(sandboxID) {
		return Route{SandboxID: sandboxID}, fmt.Errorf("invalid sandbox id %q: want lowercase letters and digits", sandboxID)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || !isDigits(port) {
		return Route{SandboxID: sandboxID}, fmt.Errorf("invalid sandbox port %q: want 1-65535", port)
	}
	return Route{SandboxID: sandboxID, Port: p}, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Config configures a Proxy.
type Config struct {
	// Domain is the suffix of routing Host headers; empty accepts any.
	Domain string
	// Logger receives proxy errors; nil means slog.Default().
	Logger *slog.Logger
	// DialTimeout bounds connecting to a sandbox port; 0 means 10s.
	DialTimeout time.Duration
	// Pool holds the connections to sandboxes; nil makes one with
	// DialTimeout.
	Pool *Pool
	// IsAPIKey reports whether a credential is one of the control plane's
	// API keys. Such values are removed from X-API-Key and
	// "Authorization: Bearer" before a request reaches a sandbox; other
	// values (the sandbox's own application credentials) pass. Nil treats
	// every value as an API key and removes them all.
	IsAPIKey func(string) bool
	// RateLimit is the sustained proxied requests per second allowed per
	// source address (per /64 for IPv6); 0 means unlimited. RateBurst is the
	// bucket size; default 2×RateLimit. The address is the connection's:
	// behind a reverse proxy all clients share one bucket.
	RateLimit float64
	RateBurst int
}

// maxRateKeys bounds the source addresses whose buckets are kept.
const maxRateKeys = 16384

// Proxy is the http.Handler for sandbox traffic.
type Proxy struct {
	cfg      Config
	resolver Resolver
	rp       *httputil.ReverseProxy
	log      *slog.Logger

	limiter *ratelimit.Keyed[netip.Prefix]
	unknown unknownIDs
	now     func() time.Time // time.Now; tests move it

	pool *Pool
}

// Forget drops the connections to one upstream (see Pool.Forget).
func (p *Proxy) Forget(upstream string) { p.pool.Forget(upstream) }

// RoundTrip sends a proxied request through its upstream's pool.
func (p *Proxy) RoundTrip(r *http.Request) (*http.Response, error) {
	px := r.Context().Value(ctxKey{}).(*proxied)
	return p.pool.transport(upstreamOf(px.target)).RoundTrip(r)
}

type ctxKey struct{}

// proxied is what ServeHTTP hands the reverse proxy through the context.
type proxied struct {
	route  Route
	target Target
}

// upstreamOf is the key of t's connection pool and requests in flight.
func upstreamOf(t Target) string {
	if t.Upstream != "" {
		return t.Upstream
	}
	return t.Addr
}

// New returns a proxy that sends traffic where r says.
func New(cfg Config, r Resolver) *Proxy {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	p := &Proxy{cfg: cfg, resolver: r, log: cfg.Logger, now: time.Now}
	p.limiter = ratelimit.New[netip.Prefix](cfg.RateLimit, cfg.RateBurst, maxRateKeys)
	p.pool = cfg.Pool
	if p.pool == nil {
		p.pool = NewPool(cfg.DialTimeout)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: p,
		// Connect server streams, NDJSON and process output must reach the
		// client as each piece is written, not when a buffer fills.
		FlushInterval: -1,
		ErrorHandler:  p.upstreamError,
		ErrorLog:      slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return p
}

// Match reports whether r is sandbox traffic for this proxy's domain, and
// the sandbox and port it names. A malformed route is still sandbox
// traffic, so it gets the proxy's error rather than an API 404; its ID is
// then as given and its port 0, which is what an access log can show of it.
//
// A signed file URL that names no sandbox is matched to the sandbox whose
// token signed it (routeSigned), which then routes it.
func (p *Proxy) Match(r *http.Request) (sandboxID string, port int, ok bool) {
	rt, ok, _ := Match(r, p.cfg.Domain)
	if !ok && p.routeSigned(r) {
		rt, ok, _ = Match(r, p.cfg.Domain)
	}
	return rt.SandboxID, rt.Port, ok
}

// ServeHTTP forwards r to its sandbox port, or answers in the proxy's
// error shape: 429 (too many requests from this address), 502 (unknown or
// dead sandbox, bad route) or 403 (missing or wrong traffic token).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok, err := Match(r, p.cfg.Domain)
	if !ok {
		refuse(w, http.StatusBadGateway, "", "request does not name a sandbox")
		return
	}
	if ok, wait := p.limiter.Allow(ratelimit.Source(r)); !ok {
		wait = max(wait, time.Second)
		httperr.SetRetryAfter(w.Header(), wait)
		refuse(w, http.StatusTooManyRequests, rt.SandboxID,
			fmt.Sprintf("too many requests from this address; retry in %s", wait.Round(time.Millisecond)))
		return
	}
	if err != nil {
		refuse(w, http.StatusBadGateway, rt.SandboxID, err.Error())
		return
	}
	target, err := p.resolve(r.Context(), rt)
	if cube.KindOf(err) == cube.NotFound {
		refuse(w, http.StatusBadGateway, rt.SandboxID, MsgNotFound)
		return
	}
	if err != nil {
		refuse(w, http.StatusBadGateway, rt.SandboxID, err.Error())
		return
	}
	if !authorised(r, rt, target) {
		msg := "missing or wrong " + strings.ToLower(HeaderTrafficToken) + " header"
		if rt.Port == protocol.EnvdPort {
			msg = "a paused private sandbox is woken on this port only by a request with its access token (" + protocol.HeaderAccessToken + ") or its " + strings.ToLower(HeaderTrafficToken)
		}
		refuse(w, http.StatusForbidden, rt.SandboxID, msg)
		return
	}
	// Only an authorised request may wake a paused sandbox.
	if target.Paused {
		if target, err = p.resolver.Resume(r.Context(), rt.SandboxID, rt.Port); err != nil {
			refuse(w, http.StatusBadGateway, rt.SandboxID, err.Error())
			return
		}
	}
	// Full duplex: a sandbox may answer before it has read the whole
	// request (Connect streams do). Without it, net/http discards and
	// closes the rest of the request body as soon as the answer's headers
	// go out, which cuts the upload to the sandbox mid-way and with it
	// the connection the answer streams on.
	rc := http.NewResponseController(w)
	rc.EnableFullDuplex()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer p.pool.track(upstreamOf(target), cancel)()
	ctx = context.WithValue(ctx, ctxKey{}, &proxied{route: rt, target: target})
	if r.Body == nil || r.Body == http.NoBody {
		p.rp.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	body := &guardedBody{rc: r.Body}
	r.Body = body
	defer body.finish(rc)
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// guardedBody is a request body the transport may still be reading, to
// send it on, when the sandbox has answered and the handler returns: a
// sandbox may answer without reading it (Python's http.server does with
// 501). With full duplex, net/http would then read the client's next
// request from the connection while that read is in flight. finish waits
// for it and ends the body for the transport.
type guardedBody struct {
	mu   sync.Mutex
	rc   io.ReadCloser
	done bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, io.EOF
	}
	return b.rc.Read(p)
}

// Close leaves the body to the server, which closes it after the handler.
func (b *guardedBody) Close() error { return nil }

// finish waits for a read in flight, cutting it short after a second
// (the client has stopped sending: the connection is not reused then),
// and ends the body.
func (b *guardedBody) finish(rc *http.ResponseController) {
	if !b.mu.TryLock() {
		// The answer is complete: let it reach the client while the
		// read finishes.
		rc.Flush()
		deadline := time.Now().Add(time.Second)
		for !b.mu.TryLock() {
			if time.Now().After(deadline) {
				if rc.SetReadDeadline(time.Now()) != nil {
					return // no way to cut the read short; the connection is not reused
				}
				b.mu.Lock()
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.done = true
	b.drain(rc)
	b.mu.Unlock()
}

// maxDrain bounds what finish reads of a request body the sandbox left.
const maxDrain = 256 << 10

// drain reads what the transport left of the request body (it stops
// sending the body once the sandbox has answered), for at most a second
// and maxDrain bytes. A connection closed with request bytes still unread
// is reset, and the reset can reach the client before the answer it was
// sent after does. Over HTTP/2, where no read deadline can be set, there
// is no such connection to protect.
func (b *guardedBody) drain(rc *http.ResponseController) {
	if rc.SetReadDeadline(time.Now().Add(time.Second)) != nil {
		return
	}
	io.CopyN(io.Discard, b.rc, maxDrain)
	rc.SetReadDeadline(time.Time{})
}

// resolve asks the resolver, unless it said recently that the sandbox does
// not exist.
func (p *Proxy) resolve(ctx context.Context, rt Route) (Target, error) {
	if err := p.unknown.get(rt.SandboxID, p.now()); err != nil {
		return Target{}, err
	}
	t, err := p.resolver.Resolve(ctx, rt.SandboxID, rt.Port)
	if cube.KindOf(err) == cube.NotFound {
		p.unknown.add(rt.SandboxID, err, p.now())
	}
	return t, err
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	px := pr.In.Context().Value(ctxKey{}).(*proxied)
	pr.Out.URL.Scheme = "http"
	if px.target.HTTPS {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = px.target.Addr
	// Keep the Host the user addressed (web servers in the sandbox see the
	// public name) unless the sandbox asked for a mask.
	pr.Out.Host = pr.In.Host
	if m := px.target.MaskRequestHost; m != "" {
		pr.Out.Host = strings.ReplaceAll(m, "${PORT}", strconv.Itoa(px.route.Port))
	}
	// Routing headers and the traffic token are for the proxy only.
	pr.Out.Header.Del(HeaderSandboxID)
	pr.Out.Header.Del(HeaderSandboxPort)
	pr.Out.Header.Del(HeaderTrafficToken)
	dropAPIKeys(pr.Out.Header, p.cfg.IsAPIKey)
	pr.SetXForwarded()
}

// dropAPIKeys removes the control plane's API keys from h. A client that
// uses one base URL for the API and for sandboxes sends its key with every
// request; code in the sandbox must never see it. Keys travel in X-API-Key
// and as bearer tokens, the two places the control plane reads them.
// Other Authorization schemes pass untouched: envd picks the user from
// Basic, and a web server in the sandbox may use any scheme of its own,
// none of which the control plane accepts.
func dropAPIKeys(h http.Header, isKey func(string) bool) {
	for _, name := range []string{"X-Api-Key", "Authorization"} {
		vals := h.Values(name)
		if len(vals) == 0 {
			continue
		}
		var kept []string
		for _, v := range vals {
			cred := strings.TrimSpace(v)
			if name == "Authorization" {
				scheme, rest, _ := strings.Cut(cred, " ")
				if !strings.EqualFold(scheme, "bearer") {
					kept = append(kept, v)
					continue
				}
				cred = strings.TrimSpace(rest)
			}
			if isKey != nil && !isKey(cred) {
				kept = append(kept, v)
			}
		}
		h.Del(name)
		for _, v := range kept {
			h.Add(name, v)
		}
	}
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	px, _ := r.Context().Value(ctxKey{}).(*proxied)
	sid := ""
	if px != nil {
		sid = px.route.SandboxID
	}
	if errors.Is(err, context.Canceled) {
		// The client went away; there is no one to answer.
		return
	}
	p.log.Warn("sandbox unreachable", "sandbox", sid, "err", err)
	body := ErrorBody{SandboxID: sid, Message: MsgPortNotOpen, Code: http.StatusBadGateway}
	if px != nil {
		body.Port = px.route.Port
	}
	httperr.WriteSandbox(w, body)
}

// E2B's proxy says these, word for word; the SDKs' own tests and users'
// code match on them.
const (
	MsgNotFound    = "The sandbox was not found"
	MsgPortNotOpen = "The sandbox is running but port is not open"
)

// ErrorBody is what the proxy answers with when it cannot or may not reach
// a sandbox.
type ErrorBody = httperr.SandboxBody

// refuse answers a request for sandboxID's traffic with status, in the
// proxy's error shape.
func refuse(w http.ResponseWriter, status int, sandboxID, msg string) {
	httperr.WriteSandbox(w, ErrorBody{SandboxID: sandboxID, Message: msg, Code: status})
}

// authorised reports whether r may reach target. A private sandbox
// (one with a traffic token) takes traffic on its user ports only with that
// token. envd's port is guarded by envd itself, with the sandbox's access
// token, which is what the SDKs send there (they send no traffic token to
// envd); while the sandbox is paused nothing answers for envd, so a
// request that is to wake it must carry either token.
func authorised(r *http.Request, rt Route, target Target) bool {
	if target.TrafficAccessToken == "" {
		return true
	}
	traffic := equal(r.Header.Get(HeaderTrafficToken), target.TrafficAccessToken)
	if rt.Port != protocol.EnvdPort {
		return traffic
	}
	if !target.Paused || traffic {
		return true
	}
	return target.EnvdAccessToken == "" || equal(r.Header.Get(protocol.HeaderAccessToken), target.EnvdAccessToken)
}

func equal(got, want string) bool { return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 }
