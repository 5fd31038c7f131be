// Package forward is the transport between the nodes of a cluster. Its
// Client makes a node's typed calls on a peer (a create placement sent
// there, a call on a sandbox, template or volume that peer holds, a
// template's files), which the peer answers through ServeSandboxes; its
// Handler passes sandbox traffic through the proxy, signed file URLs, and
// requests about a template's build files or a volume's content another
// node holds to that node. Node-to-node
// requests are signed with the cluster secret (see sign.go), and a signed
// request is always served where it arrives, so nothing is forwarded
// twice.
//
// With one node (the embedded store) every request is local and this
// handler only looks at paths.
package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"cube/internal/api"
	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/httperr"
	"cube/internal/ratelimit"
)

// Peers are the nodes of the cluster as this node sees them.
type Peers interface {
	// Self is this node's name.
	Self() string
	// Peer returns a node's API base URL and whether it heartbeats.
	Peer(ctx context.Context, id string) (address string, alive bool, err error)
}

// Tokens finds the sandbox of the cluster whose envd token made a signed
// file URL (cluster.Tokens: an index of every sandbox's token, read from
// the shared store).
type Tokens interface {
	// Find returns the sandbox whose envd token makes made true, and its
	// node; key names the URL, for the index to remember its sandbox.
	Find(ctx context.Context, key string, made func(token string) bool) (sandboxID, node string, ok bool, err error)
}

// Config configures a Handler.
type Config struct {
	Peers Peers
	// Secret signs requests between nodes.
	Secret []byte
	// Local is the API over the cluster: it answers what any node answers
	// (lists, creates, calls on one sandbox, template or volume, which the
	// cluster-aware service behind it sends where they belong) and the
	// template build files and volume contents this node holds.
	Local http.Handler
	// SandboxOf names the sandbox a request is traffic for (the proxy's
	// routing), and Runs says whether it runs here, without a database read.
	SandboxOf func(*http.Request) (string, bool)
	Runs      func(sandboxID string) bool
	// SandboxNode, TemplateNode and VolumeNode name the node holding a
	// sandbox (for its traffic), template (ID or alias, for its build
	// files) or volume (for its content): "" when the record has none or
	// does not exist (the local API then answers).
	SandboxNode, TemplateNode, VolumeNode func(ctx context.Context, id string) (string, error)
	// Tokens finds the sandbox, on any node, that made a signed file URL
	// no sandbox of this node made. Nil: such URLs are answered here.
	Tokens Tokens
	// Internal answers the routes nodes call on each other (under
	// InternalPrefix, such as a template's files for a copy); only signed
	// requests reach it.
	Internal http.Handler
	// Signed answers the API and sandbox traffic peers pass to this node:
	// the API over this node's own parts, since the peer that signed the
	// request already chose this node (requests about a template or volume
	// held here, and whatever a node of an earlier version passes on).
	// Nil: Local.
	Signed http.Handler
	// PeerTLS is the TLS this node speaks to peers whose address is
	// https (its client certificate, the peers' verification); nil uses
	// Go's defaults. PeersOverTLS makes this node take signed requests
	// only from its peer listener (see PeerListener): mutual TLS.
	PeerTLS      *tls.Config
	PeersOverTLS bool
	// Authorized says whether an API request carries a credential the
	// API takes for it (its key; a volume's token on that volume's
	// content routes), or is one of the routes that need none. It is asked
	// before anything else is done for a request this node might forward,
	// so it reads no body and, for a request without such a token, no
	// database. Nil takes no request.
	Authorized func(*http.Request) bool
	Logger     *slog.Logger
	// Client is the node's client of its peers, made before the node
	// (which fetches files from peers through it) and so before this
	// Handler, which needs the API in front of that node; the Handler
	// forwards over the same connections. Nil: one made from Peers,
	// Secret, PeerTLS and PeersOverTLS.
	Client *Client
}

// Handler routes sandbox traffic, signed file URLs, and requests about
// templates' build files and volumes' contents, to the node holding what
// they are about; other API calls reach the API here, whose service
// routes them.
type Handler struct {
	cfg   Config
	proxy *httputil.ReverseProxy
	// targets are the peers' parsed addresses, by address.
	mu      sync.Mutex
	targets map[string]*url.URL
	// client makes this node's own calls on peers (Get).
	client *Client
	// verifier checks the signed requests this node receives.
	verifier verifier
	// lookups bounds, per source address, the signed file URLs whose
	// sandbox is looked for among the cluster's: each costs a hash per
	// sandbox of the cluster, and needs no key.
	lookups *ratelimit.Keyed[netip.Prefix]
}

// targetKey carries the forwarding target through the request context,
// and readKey marks a read of the API that this node can answer from the
// database when the target cannot be reached.
type (
	targetKey struct{}
	readKey   struct{}
	// bodyKey carries the body field a forwarded request is signed with.
	bodyKey struct{}
)

// New returns the forwarding handler in front of cfg.Local.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Signed == nil {
		cfg.Signed = cfg.Local
	}
	if cfg.Client == nil {
		cfg.Client = NewClient(ClientConfig{Peers: cfg.Peers, Secret: cfg.Secret, PeerTLS: cfg.PeerTLS, PeersOverTLS: cfg.PeersOverTLS})
	}
	h := &Handler{cfg: cfg, targets: map[string]*url.URL{}, client: cfg.Client,
		lookups:  ratelimit.New[netip.Prefix](lookupsPerSecond, 0, 10000),
		verifier: verifier{secret: cfg.Secret, seen: newNonces(maxNonces)}}
	h.proxy = &httputil.ReverseProxy{
		Transport: cfg.Client.transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(targetKey{}).(*url.URL))
			// The peer routes by the host the client asked for.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			sign(pr.Out, cfg.Peers.Self(), cfg.Secret, time.Now(), pr.In.Context().Value(bodyKey{}).(string))
		},
		// Streams (command output, file transfers) pass as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			cfg.Logger.Warn("forward to peer", "target", r.Context().Value(targetKey{}), "path", r.URL.Path, "err", err)
			if r.Context().Value(readKey{}) != nil {
				// A node that just died heartbeats no more soon: until
				// then its records are read here.
				cfg.Local.ServeHTTP(w, r)
				return
			}
			httperr.Write(w, cube.Errorf(cube.Unavailable, "the node holding this could not be reached (%v); try again shortly", err).WithRetryAfter(2*time.Second))
		},
	}
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(Header) != "" {
		if h.cfg.PeersOverTLS && r.Context().Value(peerListenerKey{}) == nil {
			httperr.Write(w, cube.Errorf(cube.Forbidden, "this node takes requests of its peers only over mutual TLS, on its peer listener: give the sending node this node's https --advertise address"))
			return
		}
		r, err := h.verifier.verify(r, time.Now())
		if err != nil {
			httperr.Write(w, err)
			return
		}
		// The X-Cube-* headers were signed with it; nothing of them
		// reaches a sandbox, and of them only a resume's move, which the
		// API over this node's parts takes as part of the request, reaches
		// the API.
		from := r.Header.Get(MoveHeader)
		dropCubeHeaders(r.Header)
		if _, traffic := h.cfg.SandboxOf(r); from != "" && !traffic && isResume(r.URL.Path) {
			r.Header.Set(MoveHeader, from)
		}
		if h.internal(r) && h.cfg.Internal != nil {
			h.cfg.Internal.ServeHTTP(w, r)
			return
		}
		h.cfg.Signed.ServeHTTP(w, r)
		return
	}
	// X-Cube-* headers are the nodes' own, acted on only when signed (a
	// node asks another to take a sandbox over with one): a client's are
	// dropped, so a node never signs one it did not set.
	dropCubeHeaders(r.Header)
	if sid, ok := h.cfg.SandboxOf(r); ok {
		h.route(w, r, "sandbox "+sid, func(ctx context.Context) (string, error) {
			if h.cfg.Runs(sid) {
				return "", nil
			}
			return h.cfg.SandboxNode(ctx, sid)
		})
		return
	}
	if h.internal(r) {
		httperr.Write(w, cube.Errorf(cube.Forbidden, "%s routes are called by the nodes of the cluster only", InternalPrefix))
		return
	}
	if signedFileURL(r) {
		h.routeSignedFile(w, r)
		return
	}
	kind, id := subject(r)
	if kind != "" && (h.cfg.Authorized == nil || !h.cfg.Authorized(r)) {
		// The API would refuse it too, but a request about a template's
		// files or a volume's content would first have this node ask the
		// database where it is and pass it to a peer, and any would have
		// its body kept for a node of an earlier version
		// (serveReplayable): work an anonymous client must not be able to
		// cause.
		httperr.Write(w, httperr.Errorf(http.StatusUnauthorized, "missing or invalid API key: send it in the X-API-Key header"))
		return
	}
	switch kind {
	case "template":
		if !templateFiles(r) {
			// A call on a template: its service finds the template's node.
			h.serveReplayable(w, r)
			return
		}
		h.route(w, r, "template "+id, func(ctx context.Context) (string, error) { return h.cfg.TemplateNode(ctx, id) })
	case "volume":
		if !strings.HasPrefix(r.URL.Path, "/volumecontent/") {
			// A volume's record: its service finds the volume's node.
			h.serveReplayable(w, r)
			return
		}
		h.route(w, r, "volume "+id, func(ctx context.Context) (string, error) { return h.cfg.VolumeNode(ctx, id) })
	default:
		// Creates, calls on one sandbox and what any node answers: the
		// API decodes them and the cluster-aware service behind it finds
		// the node each call goes to.
		h.serveReplayable(w, r)
	}
}

// subject names what an API request is about, from its path: a create,
// one sandbox, template or volume (which the API here takes, its service
// finding their node, but for a template's build files and a volume's
// content, passed to their node here), or "" for what any node answers
// (lists, health, the console).
func subject(r *http.Request) (kind, id string) {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(seg) > 0 && (seg[0] == "v2" || seg[0] == "v3") {
		seg = seg[1:]
	}
	if len(seg) == 0 {
		return "", ""
	}
	switch {
	case seg[0] == "sandboxes" && len(seg) == 1 && r.Method == http.MethodPost:
		return "create", ""
	case seg[0] == "sandboxes" && len(seg) >= 2 && seg[1] != "metrics":
		return "sandbox", seg[1]
	case seg[0] == "templates" && len(seg) >= 2 && seg[1] != "aliases" && seg[1] != "jobs" && seg[1] != "tags":
		return "template", seg[1]
	case (seg[0] == "volumes" || seg[0] == "volumecontent") && len(seg) >= 2:
		return "volume", seg[1]
	}
	return "", ""
}

// templateFiles reports whether r is about a template's build files: the
// link to upload them (signed by the node holding the template, with a
// secret of its own) and the upload. Both are passed to that node as they
// came.
func templateFiles(r *http.Request) bool {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	return len(seg) >= 3 && seg[0] == "templates" && seg[2] == "files"
}

// route serves r here when this node holds what it is about, else passes
// it to the node that does. A node that stopped heartbeating is not
// tried: reads are answered here from the database (whose views say the
// sandbox is lost), changes are refused for now.
func (h *Handler) route(w http.ResponseWriter, r *http.Request, what string, owner func(context.Context) (string, error)) {
	node, err := owner(r.Context())
	if err != nil {
		httperr.Write(w, unavailable(err))
		return
	}
	if node == "" || node == h.cfg.Peers.Self() {
		h.cfg.Local.ServeHTTP(w, r)
		return
	}
	addr, alive, err := h.cfg.Peers.Peer(r.Context(), node)
	switch {
	case errors.Is(err, cluster.ErrNoNode):
	case err != nil:
		httperr.Write(w, unavailable(err))
		return
	case !alive && r.Method == http.MethodGet:
		h.cfg.Local.ServeHTTP(w, r)
		return
	case !alive:
		httperr.Write(w, cube.Errorf(cube.Unavailable, "%s is on node %s, which is not answering: it is lost until that node is back (see `cubemastercli node list`)", what, node).WithRetryAfter(10*time.Second))
		return
	default:
		h.forward(w, r, addr)
		return
	}
	h.cfg.Local.ServeHTTP(w, r)
}

// MoveHeader, on a signed request to resume a sandbox, names the node the
// receiving node takes the sandbox over from first: the API's, as the
// receiving API reads it into the request it decodes. Nodes of this
// version move a sandbox with a typed connect (cube.ConnectRequest's
// MoveFrom); the header is how nodes of earlier versions, and a request
// passed on to one (PassOn), ask for it.
const MoveHeader = api.MoveFromHeader

// isResume reports whether an API path resumes a sandbox: E2B's connect,
// and its older resume.
func isResume(path string) bool {
	return strings.HasSuffix(path, "/connect") || strings.HasSuffix(path, "/resume")
}

// internal reports whether r is for a route nodes call on each other: an
// API path under InternalPrefix, never a sandbox's own path.
func (h *Handler) internal(r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, InternalPrefix) {
		return false
	}
	_, traffic := h.cfg.SandboxOf(r)
	return !traffic
}

// peerListenerKey marks a request that came over the peer listener.
type peerListenerKey struct{}

// PeerListener marks the requests h serves as arriving over the node's
// peer listener, whose TLS has checked the client's certificate against
// the cluster's nodes: the only way in for signed requests when
// PeersOverTLS is set.
func PeerListener(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerListenerKey{}, true)))
	})
}

// SignedFilesPath is the internal route by which a node of an earlier
// version asks a peer whether one of its sandboxes made a signed file URL:
// ?method=M&query=Q, Q the URL's query. The peer answers 204 when one
// did, 404 when none. Nodes of this version look the URL up themselves
// (Config.Tokens) and only answer it.
const SignedFilesPath = InternalPrefix + "signed-files"

// signedFileURL reports whether r is a signed file URL that names no
// sandbox (SandboxOf found none here): made by a sandbox of another node.
func signedFileURL(r *http.Request) bool {
	return r.URL.Path == "/files" && r.URL.Query().Get("signature") != ""
}

// routeSignedFile passes a signed file URL to the node whose sandbox made
// it, found by trying the URL's signature against the envd token of every
// sandbox of the cluster (Config.Tokens, this node's index of them) with
// no peer asked; a URL none of them made is answered here (the API says
// it is unknown), as is one whose node does not answer.
func (h *Handler) routeSignedFile(w http.ResponseWriter, r *http.Request) {
	if ok, wait := h.lookups.Allow(ratelimit.Source(r)); !ok {
		wait = max(wait, time.Second)
		httperr.Write(w, cube.Errorf(cube.Capacity, "too many signed file URLs from this address that no sandbox of this node made; retry in %s", wait.Round(time.Second)).WithRetryAfter(wait))
		return
	}
	u, ok := parseSignedURL(r)
	if !ok || h.cfg.Tokens == nil {
		h.cfg.Local.ServeHTTP(w, r)
		return
	}
	_, node, found, err := h.cfg.Tokens.Find(r.Context(), u.key(), u.made)
	if err != nil {
		httperr.Write(w, unavailable(err))
		return
	}
	if !found || node == h.cfg.Peers.Self() {
		h.cfg.Local.ServeHTTP(w, r)
		return
	}
	addr, alive, err := h.cfg.Peers.Peer(r.Context(), node)
	if err != nil || !alive {
		h.cfg.Local.ServeHTTP(w, r)
		return
	}
	h.forward(w, r, addr)
}

// lookupsPerSecond is how many signed file URLs one source address may
// have looked for among the cluster's sandboxes each second (twice that
// at once).
const lookupsPerSecond = 20

// InternalPrefix starts the paths of the routes nodes call on each other.
const InternalPrefix = "/cluster/"

// Get calls an internal route (path under InternalPrefix) on node, signed,
// and returns its 200 or 204 answer, whose body the caller closes.
func (h *Handler) Get(ctx context.Context, node, path string) (*http.Response, error) {
	return h.client.Get(ctx, node, path)
}

// forward passes r to the node at addr.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, addr string) {
	h.mu.Lock()
	u, ok := h.targets[addr]
	if !ok {
		var err error
		if u, err = url.Parse(addr); err != nil || u.Host == "" {
			h.mu.Unlock()
			httperr.Write(w, cube.Errorf(cube.Unavailable, "a peer's address %q is not a URL: restart that node with --advertise http://host:port", addr))
			return
		}
		h.targets[addr] = u
	}
	h.mu.Unlock()
	if err := h.client.peerScheme(u); err != nil {
		httperr.Write(w, err)
		return
	}
	// A body up to wholeBodyBytes long is read here and signed whole, so
	// the peer checks it before acting on it; a longer one (an upload) is
	// streamed, its digest after it.
	body := streamed
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		body = emptyBody
	case r.ContentLength > 0 && r.ContentLength <= wholeBodyBytes:
		b, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength))
		r.Body.Close()
		if err != nil {
			httperr.Write(w, cube.Errorf(cube.Invalid, "read the request body: %v", err))
			return
		}
		r.Body, body = io.NopCloser(bytes.NewReader(b)), bodyDigest(b)
	}
	ctx := context.WithValue(r.Context(), targetKey{}, u)
	ctx = context.WithValue(ctx, bodyKey{}, body)
	if _, traffic := h.cfg.SandboxOf(r); r.Method == http.MethodGet && !traffic {
		ctx = context.WithValue(ctx, readKey{}, true)
	}
	h.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// dropCubeHeaders removes the nodes' own headers from h.
func dropCubeHeaders(h http.Header) {
	for name := range h {
		if strings.HasPrefix(name, "X-Cube-") {
			delete(h, name)
		}
	}
}

// unavailable is a failure to read the cluster's state: the database is
// out of reach, so the caller should come back.
func unavailable(err error) error {
	if cube.KindOf(err) != 0 {
		return err
	}
	return cube.Errorf(cube.Unavailable, "the state database is out of reach (%v); try again shortly", err).WithRetryAfter(5 * time.Second)
}
