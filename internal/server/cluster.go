package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"cube/internal/api"
	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/forward"
	"cube/internal/httperr"
	"cube/internal/node"
	"cube/internal/proxy"
	"cube/internal/store"
	"cube/internal/tlsca"
	"cube/internal/version"
)

// clusterParts are the node's place in the service: its registry (the
// node records, its own among them) and, when the store is shared, its
// mutual TLS with its peers and the client it calls them with.
//
// The node and these need each other: the node shows the sandboxes of
// nodes that stopped heartbeating lost, and fetches templates, sandboxes
// and fork images from peers; the registry heartbeats the node's usage.
// The registry is opened, and the client made, before the node, from the
// listeners' addresses alone; the node registers once it exists
// (registerNode), which is when its heartbeat starts.
type clusterParts struct {
	registry *cluster.Registry
	tls      *peerTLS        // nil without --peer-listen
	client   *forward.Client // nil for a single node
}

func openCluster(ctx context.Context, o Options, name string, st *store.Store, ls *listeners) (*clusterParts, error) {
	advertise := ls.advertise(o)
	var ca *tlsca.Authority
	var caPEM string
	if o.PeerListen != "" {
		var err error
		if ca, err = openPeerCA(o.DataDir, advertise); err != nil {
			return nil, err
		}
		caPEM = string(ca.CAPEM())
	}
	reg, err := cluster.Open(ctx, cluster.Config{Store: st, ID: name, Address: advertise, Version: version.Version, CACert: caPEM})
	if err != nil {
		return nil, err
	}
	cl := &clusterParts{registry: reg}
	if ca != nil {
		cl.tls = newPeerTLS(ca, reg)
	}
	if o.Store != "" {
		cl.client = forward.NewClient(cl.clientConfig(o))
	}
	return cl, nil
}

func (cl *clusterParts) clientConfig(o Options) forward.ClientConfig {
	cfg := forward.ClientConfig{Peers: cl.registry, Secret: []byte(o.ClusterSecret)}
	if cl.tls != nil {
		cfg.PeerTLS, cfg.PeersOverTLS = cl.tls.client, true
	}
	return cfg
}

// serverTLS is the peer listener's TLS, nil without one.
func (cl *clusterParts) serverTLS() *tls.Config {
	if cl.tls == nil {
		return nil
	}
	return cl.tls.server
}

// clusterHandler puts the forwarding between nodes in front of public,
// the API over the cluster, when the store is shared (a cluster on
// PostgreSQL); own is the API over this node's parts alone, which answers
// what peers send here. A single node has nothing to forward.
func clusterHandler(o Options, st *store.Store, nd *node.Node, cl *clusterParts, px *proxy.Proxy, public, own http.Handler, svc *service, isKey func(string) bool, log *slog.Logger) http.Handler {
	if cl.client == nil {
		return public
	}
	peers := cl.clientConfig(o)
	reg := cl.registry
	return forward.New(forward.Config{
		Client: cl.client, Peers: reg, Secret: peers.Secret, PeerTLS: peers.PeerTLS, PeersOverTLS: peers.PeersOverTLS,
		Local: public, Signed: own, Logger: log,
		Authorized: authorized(isKey, st),
		Internal:   internalRoutes(nd, px, svc, log),
		SandboxOf: func(r *http.Request) (string, bool) {
			sid, _, ok := px.Match(r)
			return sid, ok
		},
		Runs:   nd.Holds,
		Tokens: cluster.NewTokens(st),
		SandboxNode: func(ctx context.Context, id string) (string, error) {
			rec, err := st.Sandboxes().Get(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			return rec.Node, nil
		},
		TemplateNode: func(ctx context.Context, id string) (string, error) {
			return templateNode(ctx, nd, id)
		},
		VolumeNode: func(ctx context.Context, id string) (string, error) {
			rec, err := st.Volumes().Get(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			return rec.Node, nil
		},
	})
}

// authorized is the API's own check of a request's credential, made by
// the forwarding before it does anything for the request: its API key (in
// X-API-Key, or as a bearer token, as the API takes it), or on a volume's
// content routes that volume's token, which costs the one read of the
// volume the API makes too. The routes the API serves without a key and
// the forwarding routes (build file uploads, whose links carry their own
// signature) need none.
func authorized(isKey func(string) bool, st *store.Store) func(*http.Request) bool {
	public := http.NewServeMux()
	public.Handle("PUT "+api.UploadPath, http.NotFoundHandler())
	return func(r *http.Request) bool {
		if _, pattern := public.Handler(r); pattern != "" {
			return true
		}
		key := r.Header.Get("X-API-Key")
		if auth := r.Header.Get("Authorization"); key == "" && len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			key = strings.TrimSpace(auth[7:])
		}
		if key == "" {
			return false
		}
		if isKey(key) {
			return true
		}
		rest, ok := strings.CutPrefix(r.URL.Path, "/volumecontent/")
		if !ok {
			return false
		}
		id, _, _ := strings.Cut(rest, "/")
		v, err := st.Volumes().Get(r.Context(), id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return false
		case err != nil:
			// The database is out of reach: the routing reads it again
			// and answers 503 saying so, where a 401 would be wrong.
			return true
		case v.Token == "":
			return false
		}
		want, got := sha256.Sum256([]byte(v.Token)), sha256.Sum256([]byte(key))
		return subtle.ConstantTimeCompare(want[:], got[:]) == 1
	}
}

// templateFiles is the internal route a node copies a template by;
// handOver and handedOver those a node takes a paused sandbox over by.
const (
	templateFiles = forward.InternalPrefix + "templates/{id}/files"
	handOver      = forward.InternalPrefix + "sandboxes/{id}/handover"
	handedOver    = forward.InternalPrefix + "sandboxes/{id}/moved"
	forkImage     = forward.InternalPrefix + "forks/{image}"
	forksHere     = forward.InternalPrefix + "sandboxes/{id}/forks"
)

// forkResult is one child of a fork started on another node, as that
// node answers it.
type forkResult struct {
	Sandbox *cube.Sandbox `json:"sandbox,omitempty"`
	Error   string        `json:"error,omitempty"`
	Kind    cube.Kind     `json:"kind,omitempty"`
}

// internalRoutes answers what the nodes of a cluster ask of each other,
// svc being this node's own service.
func internalRoutes(nd *node.Node, px *proxy.Proxy, svc *service, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	forward.ServeSandboxes(mux, svc, api.DefaultMaxBodyBytes)
	mux.HandleFunc("GET "+forward.SignedFilesPath, func(w http.ResponseWriter, r *http.Request) {
		// The URL as its holder would see it: the proxy finds the sandbox
		// whose token made it, as it does for a URL that arrives here.
		probe, err := http.NewRequestWithContext(r.Context(), r.URL.Query().Get("method"), "/files?"+r.URL.Query().Get("query"), nil)
		if err != nil {
			httperr.Write(w, cube.Errorf(cube.Invalid, "%v", err))
			return
		}
		if _, _, ok := px.Match(probe); !ok {
			httperr.Write(w, cube.Errorf(cube.NotFound, "no sandbox of this node made that URL"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	// archive answers with what write writes, its digest after it.
	archive := func(w http.ResponseWriter, what string, write func(io.Writer) error) {
		cw := &countingWriter{w: w, sum: sha256.New()}
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("Trailer", digestTrailer)
		err := write(cw)
		switch {
		case err == nil:
			w.Header().Set(digestTrailer, hex.EncodeToString(cw.sum.Sum(nil)))
		case cw.n == 0:
			httperr.Write(w, err)
		default:
			// Cut short, and without its digest: the copy fails.
			log.Warn("send "+what, "err", err)
		}
	}
	mux.HandleFunc("GET "+templateFiles, func(w http.ResponseWriter, r *http.Request) {
		archive(w, "template "+r.PathValue("id"), func(out io.Writer) error {
			return nd.ExportTemplate(r.Context(), r.PathValue("id"), out)
		})
	})
	mux.HandleFunc("GET "+handOver, func(w http.ResponseWriter, r *http.Request) {
		archive(w, "sandbox "+r.PathValue("id"), func(out io.Writer) error {
			return nd.HandOver(r.Context(), r.PathValue("id"), r.URL.Query().Get("template") == "1", out)
		})
	})
	mux.HandleFunc("GET "+forkImage, func(w http.ResponseWriter, r *http.Request) {
		archive(w, "fork image "+r.PathValue("image"), func(out io.Writer) error {
			return nd.ExportForkImage(r.Context(), r.PathValue("image"), out)
		})
	})
	mux.HandleFunc("POST "+forksHere, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var req cube.ForkRequest
		var err error
		if req.Count, err = strconv.Atoi(q.Get("count")); err != nil || req.Count < 1 {
			httperr.Write(w, cube.Errorf(cube.Invalid, "count %q", q.Get("count")))
			return
		}
		req.Concurrency, _ = strconv.Atoi(q.Get("concurrency"))
		timeout, _ := strconv.ParseInt(q.Get("timeout"), 10, 64)
		req.Timeout = time.Duration(timeout)
		results, err := nd.ForkFrom(r.Context(), q.Get("from"), r.PathValue("id"), q.Get("image"), req)
		if err != nil {
			httperr.Write(w, err)
			return
		}
		out := make([]forkResult, len(results))
		for i, res := range results {
			out[i].Sandbox = res.Sandbox
			if res.Err != nil {
				out[i].Error, out[i].Kind = res.Err.Error(), cube.KindOf(res.Err)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST "+handedOver, func(w http.ResponseWriter, r *http.Request) {
		nd.HandedOver(r.Context(), r.PathValue("id"))
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// digestTrailer carries the SHA-256 of a template's archive after it: a
// copy is kept only when what arrived is what was sent.
const digestTrailer = "X-Cube-Sha256"

// countingWriter tells whether an answer has begun, and digests it.
type countingWriter struct {
	w   http.ResponseWriter
	n   int64
	sum hash.Hash
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.sum.Write(p[:n])
	return n, err
}

// digestReader reads a template's archive and, at its end, fails unless
// it matches the digest its sender put after it.
type digestReader struct {
	resp *http.Response
	sum  hash.Hash
}

func (d *digestReader) Read(p []byte) (int, error) {
	n, err := d.resp.Body.Read(p)
	d.sum.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if want := d.resp.Trailer.Get(digestTrailer); want == "" || want != hex.EncodeToString(d.sum.Sum(nil)) {
			return n, fmt.Errorf("the template's files arrived damaged or cut short (digest %q after them)", want)
		}
	}
	return n, err
}

func (d *digestReader) Close() error { return d.resp.Body.Close() }

// forkElsewhere forks a sandbox of this node, which takes no new
// sandboxes, onto a node placement picks: this node checkpoints it and
// offers the image, the other fetches it and starts the children.
func forkElsewhere(ctx context.Context, st *store.Store, reg *cluster.Registry, nd *node.Node, peers *forward.Client, sandboxID string, req cube.ForkRequest, refused error) ([]cube.ForkResult, error) {
	rec, err := st.Sandboxes().Get(ctx, sandboxID)
	if err != nil || rec.Boot == nil || len(rec.Boot.Mounts) > 0 {
		return nil, refused
	}
	target, release, err := reg.Place(ctx, cluster.Want{MemoryMB: rec.MemoryMB, Holders: rec.Boot.Holders()})
	if err != nil {
		return nil, err
	}
	defer release()
	if target == reg.Self() {
		return nil, refused
	}
	image, err := nd.OfferForkImage(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	defer nd.DropForkImage(image)
	q := url.Values{"from": {reg.Self()}, "image": {image}, "count": {strconv.Itoa(req.Count)},
		"concurrency": {strconv.Itoa(req.Concurrency)}, "timeout": {strconv.FormatInt(int64(req.Timeout), 10)}}
	resp, err := peers.Call(ctx, http.MethodPost, target, strings.Replace(forksHere, "{id}", url.PathEscape(sandboxID), 1)+"?"+q.Encode())
	if err != nil {
		return nil, cube.Errorf(cube.Unavailable, "node %s, which was to start the children of sandbox %q, failed: %v", target, sandboxID, err).WithRetryAfter(5 * time.Second)
	}
	defer resp.Body.Close()
	var out []forkResult
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("the children of sandbox %q on node %s: %w", sandboxID, target, err)
	}
	results := make([]cube.ForkResult, len(out))
	for i, o := range out {
		results[i].Sandbox = o.Sandbox
		if o.Error != "" {
			results[i].Err = &cube.Error{Kind: o.Kind, Message: o.Error}
		}
	}
	return results, nil
}

// service is own, this node's service, as the API calls it: placed by the
// cluster when there is one.
func (cl *clusterParts) service(own *service, nd *node.Node, st *store.Store) cube.Backend {
	if cl.client == nil {
		return own
	}
	return newClustered(own, nd, st, cl.registry, cl.client)
}

// forkAway lets forks of a node that takes no new sandboxes start on
// another node, in a cluster; nil for a single node.
func (cl *clusterParts) forkAway(st *store.Store, nd *node.Node) func(context.Context, string, cube.ForkRequest, error) ([]cube.ForkResult, error) {
	if cl.client == nil {
		return nil
	}
	return func(ctx context.Context, sandboxID string, req cube.ForkRequest, refused error) ([]cube.ForkResult, error) {
		return forkElsewhere(ctx, st, cl.registry, nd, cl.client, sandboxID, req, refused)
	}
}

// templateNode names the node holding a template's files: "" for a
// template that does not exist (the local API says so).
func templateNode(ctx context.Context, nd *node.Node, idOrAlias string) (string, error) {
	t, err := nd.Template(ctx, idOrAlias)
	if cube.KindOf(err) == cube.NotFound {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return t.Node, nil
}

// peerFiles is how a node gets files from its peers, each as an archive
// from one of the internal routes with its digest after it: a template
// to copy, a sandbox taken over (and telling its node the move is over),
// a fork image. All nil for a single node.
type peerFiles struct {
	template func(ctx context.Context, node, id string) (io.ReadCloser, error)
	sandbox  func(ctx context.Context, node, id string, withTemplate bool) (io.ReadCloser, error)
	moved    func(ctx context.Context, node, id string)
	fork     func(ctx context.Context, node, image string) (io.ReadCloser, error)
}

// newPeerFiles fetches through peers; all nil without a client.
func newPeerFiles(peers *forward.Client) peerFiles {
	if peers == nil {
		return peerFiles{}
	}
	// archive fetches route, its {name} being value, from node.
	archive := func(ctx context.Context, node, route, name, value, query string) (io.ReadCloser, error) {
		resp, err := peers.Get(ctx, node, strings.Replace(route, "{"+name+"}", url.PathEscape(value), 1)+query)
		if err != nil {
			return nil, err
		}
		return &digestReader{resp: resp, sum: sha256.New()}, nil
	}
	return peerFiles{
		template: func(ctx context.Context, node, id string) (io.ReadCloser, error) {
			return archive(ctx, node, templateFiles, "id", id, "")
		},
		sandbox: func(ctx context.Context, node, id string, withTemplate bool) (io.ReadCloser, error) {
			query := "?template=0"
			if withTemplate {
				query = "?template=1"
			}
			return archive(ctx, node, handOver, "id", id, query)
		},
		moved: func(ctx context.Context, node, id string) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if resp, err := peers.Call(ctx, http.MethodPost, node, strings.Replace(handedOver, "{id}", url.PathEscape(id), 1)); err == nil {
				resp.Body.Close()
			}
		},
		fork: func(ctx context.Context, node, image string) (io.ReadCloser, error) {
			return archive(ctx, node, forkImage, "image", image, "")
		},
	}
}
