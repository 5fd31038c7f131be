package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Interception, for hosts with rules: the Filter reads the sandbox's HTTP
// requests itself (answering its TLS with a certificate from the node's
// egress CA), applies the host's rule set to each, and sends it on over a
// connection of its own, TLS verified against the host's trust store (or
// Config.UpstreamRoots) for the name the sandbox asked for. A destination
// whose certificate does not verify gets the sandbox a 502, never a
// silently accepted connection.
//
// Secret placeholders are expanded only for requests that go on over
// verified TLS: over plain HTTP, nothing ties the destination to the name,
// and anyone on the path reads the header. A plain-HTTP request to a host
// whose rules name a secret is refused (403); rules without secrets apply
// over plain HTTP too.

// Timeouts of intercepted connections.
const (
	interceptIdle    = 90 * time.Second // between a client's requests
	handshakeTimeout = 10 * time.Second
	// upstreamHeaders is only a backstop for a destination that never
	// answers: a non-streaming LLM call may think for many minutes before
	// its headers, and the client's own timeout is what should end it.
	upstreamHeaders = 15 * time.Minute
)

// Bounds on the headers of intercepted requests and their answers.
// http.ReadRequest on a bufio.Reader has none: a request line or header
// without an end grows in memory for as long as the sandbox sends it.
// (net/http's server bounds it by MaxHeaderBytes, 1 MiB by default.)
const (
	// maxRequestHeaderBytes bounds a request line and its headers, read
	// from the sandbox; beyond it the request is answered 431 and the
	// connection closed. It is maxPeek: the first request of a plain-HTTP
	// connection must name its host within that already. A connection may
	// hold up to a bufio.Reader's buffer (4 KiB) more, read ahead.
	maxRequestHeaderBytes = maxPeek
	// maxResponseHeaderBytes bounds a destination's status line and
	// headers (http.Transport's default is 10 MiB); beyond it the sandbox
	// gets a 502. Answers carry larger headers than requests (cookies,
	// policies), so it is larger than the request bound.
	maxResponseHeaderBytes = 1 << 20
)

// Trailers of chunked bodies, both ways, and chunk-size lines are bounded
// by net/http itself, to its reader's buffer (4 KiB); bodies are streamed
// both ways, never held whole.

// ctxKey carries the connection's chosen target to the transport's dialer.
type ctxKey struct{}

// transport is one slot's client for intercepted requests; its pooled
// connections are that sandbox's own.
func (s *slotFilter) transport() *http.Transport {
	s.tOnce.Do(func() {
		s.t = &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				target, _ := ctx.Value(ctxKey{}).(netip.AddrPort)
				if !target.IsValid() {
					return nil, errors.New("no target")
				}
				d := net.Dialer{Timeout: dialTimeout}
				return d.DialContext(ctx, "tcp4", target.String())
			},
			TLSClientConfig:        &tls.Config{RootCAs: s.f.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    handshakeTimeout,
			ResponseHeaderTimeout:  upstreamHeaders,
			MaxResponseHeaderBytes: maxResponseHeaderBytes,
			MaxIdleConnsPerHost:    4,
			// The answer goes to the client as the destination sent it:
			// decompressing here would strip its length, and the client did
			// not ask for gzip unless it says so itself.
			DisableCompression: true,
			IdleConnTimeout:    interceptIdle,
			// Never a proxy from the host's environment: the Filter connects
			// to the address it chose, nothing else.
			Proxy: nil,
		}
	})
	return s.t
}

// intercept serves the HTTP requests of connection c (whose first bytes,
// already read, are peeked) to host name at target, applying the rules in
// force for name to each request.
func (s *slotFilter) intercept(p *proxied, c net.Conn, peeked []byte, name string, target netip.AddrPort, isTLS bool) {
	if !p.decide(name, target) {
		return
	}
	// The rules may have changed since the decision was made; a change
	// before decide could not see this connection to cut it.
	if !s.stillAllowed(s.rules.Load(), p) {
		s.f.record("http", Event{Owner: s.owner(), Decision: Denied, Name: name, Dest: target, Reason: "the policy changed: " + name + " is no longer allowed"})
		return
	}
	kind := "http"
	var conn net.Conn = &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(peeked), c)}
	if isTLS {
		kind = "tls"
		leaf, err := s.f.cfg.CA.leaf(name)
		if err != nil {
			s.f.record(kind, Event{Owner: s.owner(), Decision: Failed, Name: name, Dest: target, Reason: "issue certificate: " + err.Error()})
			return
		}
		tc := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}})
		tc.SetDeadline(time.Now().Add(handshakeTimeout))
		if err := tc.Handshake(); err != nil {
			s.f.record(kind, Event{Owner: s.owner(), Decision: Failed, Name: name, Dest: target,
				Reason: "the sandbox did not accept the egress certificate: " + err.Error()})
			return
		}
		tc.SetDeadline(time.Time{})
		conn = tc
	}
	scheme := "http"
	if isTLS {
		scheme = "https"
	}
	host := name
	if def := map[bool]uint16{false: 80, true: 443}[isTLS]; target.Port() != def {
		host = net.JoinHostPort(name, strconv.Itoa(int(target.Port())))
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, target))
	defer cancel()
	if !p.setCancel(cancel) {
		return
	}
	lim := &headerLimit{r: conn}
	br := bufio.NewReader(lim)
	for {
		conn.SetReadDeadline(time.Now().Add(interceptIdle))
		lim.arm(maxRequestHeaderBytes)
		req, err := http.ReadRequest(br)
		if err != nil {
			if lim.hit.Load() {
				s.f.record("request", Event{Owner: s.owner(), Decision: Denied, Name: name, Dest: target,
					Status: http.StatusRequestHeaderFieldsTooLarge, Reason: errHeaderTooLarge.Error()})
				conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
				writeStatus(conn, http.StatusRequestHeaderFieldsTooLarge, "egress: "+errHeaderTooLarge.Error())
			}
			return
		}
		// The body is the destination's to bound, and is streamed.
		lim.disarm()
		conn.SetReadDeadline(time.Time{})
		if !s.stillAllowed(s.rules.Load(), p) {
			return
		}
		if !s.serveRequest(ctx, conn, br, req, name, scheme, host, target) {
			return
		}
	}
}

// serveRequest forwards one request and writes its answer; false when the
// connection must end.
func (s *slotFilter) serveRequest(ctx context.Context, conn net.Conn, br *bufio.Reader, req *http.Request, name, scheme, host string, target netip.AddrPort) bool {
	ev := Event{Owner: s.owner(), Name: name, Dest: target, Method: req.Method, Path: req.URL.Path}
	defer req.Body.Close()
	if got := normalizeHost(req.Host); got != name {
		ev.Decision, ev.Status, ev.Reason = Denied, http.StatusMisdirectedRequest, fmt.Sprintf("request for %q on a connection for %q", req.Host, name)
		s.f.record("request", ev)
		writeStatus(conn, http.StatusMisdirectedRequest, "egress: this connection is for "+name+"; open a new one for "+req.Host)
		return false
	}
	if req.Method == http.MethodTrace || req.Method == http.MethodConnect {
		// TRACE would echo the request, secrets and all, back to the
		// sandbox; CONNECT would tunnel past the rules.
		ev.Decision, ev.Status, ev.Reason = Denied, http.StatusMethodNotAllowed, req.Method+" is not passed on to a host with rules"
		s.f.record("request", ev)
		writeStatus(conn, http.StatusMethodNotAllowed, "egress: "+req.Method+" is not passed on to "+name+", which has network rules")
		return false
	}
	out := req.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = scheme, host, req.Host
	for _, h := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "Proxy-Authorization"} {
		out.Header.Del(h)
	}
	out.Close = false
	body := &countReader{r: req.Body, done: make(chan struct{})}
	if req.ContentLength != 0 {
		out.Body = body
	} else {
		out.Body = nil
		body.finish()
	}
	ev.Decision = Allowed
	rs := s.rules.Load()
	if hr := rs.transforms.match(name); hr != nil {
		lookup := teamSecrets(s.f.cfg.Secrets, rs.team)
		if scheme != "https" {
			lookup = refuseSecret
		}
		set, err := hr.apply(out.Header, lookup)
		ev.Rule, ev.Headers = hr.key, set
		if errors.Is(err, errSecretNeedsTLS) {
			ev.Decision, ev.Status, ev.Reason = Denied, http.StatusForbidden, "rule "+hr.key+": "+err.Error()
			s.f.record("request", ev)
			writeStatus(conn, http.StatusForbidden, "egress: rule "+hr.key+" adds a secret, which is sent only over HTTPS: use https://"+host+req.URL.Path)
			return false
		}
		if err != nil {
			ev.Decision, ev.Status, ev.Reason = Failed, http.StatusBadGateway, "rule "+hr.key+": "+err.Error()
			s.f.record("request", ev)
			writeStatus(conn, http.StatusBadGateway, "egress: rule "+hr.key+" cannot be applied: "+err.Error())
			return false
		}
		ev.Decision = Transformed
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := watchHangUp(conn, br, body.done, cancel)
	resp, err := s.transport().RoundTrip(out.WithContext(rctx))
	stop()
	ev.BytesOut = body.n.Load()
	if err != nil {
		ev.Decision, ev.Status, ev.Reason = Failed, http.StatusBadGateway, err.Error()
		s.f.record("request", ev)
		writeStatus(conn, http.StatusBadGateway, fmt.Sprintf("egress: %s: %v", name, err))
		return false
	}
	defer resp.Body.Close()
	ev.Status = resp.StatusCode
	cw := &countWriter{w: conn}
	// An answer without a length that is not chunked ends when the
	// connection does: say so, and close after it.
	unframed := resp.ContentLength < 0 && !slices.Contains(resp.TransferEncoding, "chunked") && bodyAllowed(req.Method, resp.StatusCode)
	resp.Close = resp.Close || req.Close || unframed
	err = resp.Write(cw)
	ev.BytesIn = cw.n
	if err != nil {
		ev.Reason = "writing the answer: " + err.Error()
	}
	s.f.record("request", ev)
	return err == nil && !resp.Close
}

// errSecretNeedsTLS refuses a secret to a request that is not sent on
// over verified TLS.
var errSecretNeedsTLS = errors.New("secrets are sent only over HTTPS")

func refuseSecret(string) (string, error) { return "", errSecretNeedsTLS }

// teamSecrets resolves placeholders among team's secrets only; nil when
// there is nothing to resolve them with.
func teamSecrets(secrets func(team, ref string) (string, error), team string) func(string) (string, error) {
	if secrets == nil {
		return nil
	}
	return func(ref string) (string, error) { return secrets(team, ref) }
}

// bodyAllowed reports whether an answer to method with status may carry a
// body at all (RFC 9110): without one, it needs no length to be framed.
func bodyAllowed(method string, status int) bool {
	return method != http.MethodHead && status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// writeStatus answers a request the Filter itself refuses, and closes.
func writeStatus(w io.Writer, code int, msg string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		code, http.StatusText(code), len(msg)+1, msg)
}

var errHeaderTooLarge = fmt.Errorf("request line and headers longer than %d KiB", maxRequestHeaderBytes>>10)

// headerLimit bounds the bytes read from a client while a request's line
// and headers are read (armed), and lets the body through unbounded
// (disarmed). It sits under the connection's bufio.Reader, as net/http's
// server bounds MaxHeaderBytes: textproto takes any *bufio.Reader and
// reads a line for as long as it has no end. hit reports that a read was
// refused. The transport may still read a body through it while the next
// request is awaited, hence atomics.
type headerLimit struct {
	r      io.Reader
	remain atomic.Int64
	hit    atomic.Bool
}

func (l *headerLimit) arm(n int64) {
	l.hit.Store(false)
	l.remain.Store(n)
}

func (l *headerLimit) disarm() { l.remain.Store(math.MaxInt64) }

func (l *headerLimit) Read(p []byte) (int, error) {
	remain := l.remain.Load()
	if remain <= 0 {
		l.hit.Store(true)
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > remain {
		p = p[:remain]
	}
	n, err := l.r.Read(p)
	l.remain.Add(-int64(n))
	return n, err
}

// replayConn reads the bytes the Filter peeked before the rest.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// watchHangUp cancels a request whose client hangs up while it waits for
// the answer, so that the client's own timeout, not the Filter's, ends a
// slow call. It watches the connection only once the request's body is
// all read (bodyDone), by peeking: bytes of a next request stay for the
// next read. stop ends the watch; the reader is the caller's again after.
func watchHangUp(conn net.Conn, br *bufio.Reader, bodyDone <-chan struct{}, cancel context.CancelFunc) (stop func()) {
	stopping, done := make(chan struct{}), make(chan struct{})
	var peeking atomic.Bool
	go func() {
		defer close(done)
		select {
		case <-bodyDone:
		case <-stopping:
			return
		}
		// Once peeking is set, stop cuts the read; it may have looked
		// before, so look at stopping again.
		peeking.Store(true)
		select {
		case <-stopping:
			return
		default:
		}
		if _, err := br.Peek(1); err != nil {
			select {
			case <-stopping: // the read was cut by stop
			default:
				cancel()
			}
		}
	}()
	return func() {
		close(stopping)
		// Cut only a peek: a body the transport still reads (an answer
		// that came before the request was all sent) is left alone.
		if peeking.Load() {
			conn.SetReadDeadline(time.Now())
			defer conn.SetReadDeadline(time.Time{})
		}
		<-done
	}
}

// countReader counts a request body's bytes, and closes done once it has
// all been read.
type countReader struct {
	r    io.Reader
	n    atomic.Int64
	done chan struct{}
	once sync.Once
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	if err != nil {
		c.finish()
	}
	return n, err
}

func (c *countReader) finish() { c.once.Do(func() { close(c.done) }) }

func (c *countReader) Close() error { return nil }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// isTLSStart reports whether a connection's first bytes are a TLS
// handshake record.
func isTLSStart(b []byte) bool { return len(b) > 0 && b[0] == 0x16 }

// isHTTPStart reports whether they look like an HTTP/1 request line.
func isHTTPStart(b []byte) bool {
	i := bytes.IndexByte(b, ' ')
	if i <= 0 {
		return false
	}
	return strings.ToUpper(string(b[:i])) == string(b[:i])
}
