package forward

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"cube/internal/cube"
)

// Header carries a forwarded request's signature:
//
//	node;unix time;nonce;body;mac
//
// mac is an HMAC-SHA256 under the cluster secret of the method, the host,
// the request URI, the node, the time, the nonce, the body field and every
// X-Cube-* header of the request: the receiver acts on those headers (a
// resume's X-Cube-Move-From), so none can be changed, added or dropped on
// the way. The body field is the hex SHA-256 of the whole body, which the
// sender holds (at most wholeBodyBytes), or "stream" for a body passed on
// as it comes, whose digest follows it in BodyTrailer. The nonce makes
// each signed request good once (see nonces).
const Header = "X-Cube-Forwarded"

// BodyTrailer follows a streamed body: the hex HMAC-SHA256 under the
// cluster secret of the request's mac and the body's SHA-256, which its
// sender knows only once it has sent the body. The receiver's reads of
// such a body end in an error instead of its end unless it matches, so a
// streamed body changed on the way is cut short; what the receiver did
// with its bytes before the end (a file written as it arrives) is not
// undone. Mutual TLS between the nodes (--peer-listen) keeps anyone from
// changing it in the first place.
const BodyTrailer = "X-Cube-Forwarded-Body"

// maxSkew is how old (or how far ahead) a signature may be: clocks of the
// nodes are kept by NTP, and a forwarded request is sent at once.
const maxSkew = time.Minute

// wholeBodyBytes is the largest body signed whole: the sender reads it
// before sending, the receiver before acting on it. API requests other
// than uploads are far smaller; larger bodies are streamed.
const wholeBodyBytes = 1 << 20

// streamed is the body field of a request whose body is streamed.
const streamed = "stream"

// emptyBody is the body field of a request without a body.
var emptyBody = bodyDigest(nil)

func bodyDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// cubeHeaders are the X-Cube-* headers of h, as signed: "Name: v1, v2"
// lines in order of name. Header itself is what carries the signature.
func cubeHeaders(h http.Header) string {
	var names []string
	for name := range h {
		if strings.HasPrefix(name, "X-Cube-") && name != Header {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(h[name], ", "))
	}
	return b.String()
}

func mac(secret []byte, r *http.Request, from string, at int64, nonce, body string) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%d\n%s\n%s\n%s", r.Method, r.Host, r.URL.RequestURI(), from, at, nonce, body, cubeHeaders(r.Header))
	return hex.EncodeToString(m.Sum(nil))
}

// bodyMAC is what BodyTrailer carries after a streamed body whose request
// was signed with requestMAC.
func bodyMAC(secret []byte, requestMAC string, sum hash.Hash) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s\n%x", requestMAC, sum.Sum(nil))
	return hex.EncodeToString(m.Sum(nil))
}

// sign marks r as forwarded by node from at time now; it is the last
// change made to r. body is the hex SHA-256 of r's whole body (emptyBody
// for none), or streamed: r's body is then sent as it is read, chunked,
// with BodyTrailer after it.
func sign(r *http.Request, from string, secret []byte, now time.Time, body string) {
	var n [16]byte
	rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	at := now.Unix()
	m := mac(secret, r, from, at, nonce, body)
	r.Header.Set(Header, strings.Join([]string{from, strconv.FormatInt(at, 10), nonce, body, m}, ";"))
	if body != streamed || r.Body == nil || r.Body == http.NoBody {
		return
	}
	// Trailers go only with a body of unknown length.
	r.ContentLength = -1
	r.Header.Del("Content-Length")
	r.Trailer = http.Header{BodyTrailer: nil}
	r.Body = &sealingBody{body: r.Body, sum: sha256.New(), done: func(sum hash.Hash) {
		r.Trailer.Set(BodyTrailer, bodyMAC(secret, m, sum))
	}}
}

// sealingBody digests a streamed body as the transport reads it, and
// sets its trailer when the body ends.
type sealingBody struct {
	body io.ReadCloser
	sum  hash.Hash
	done func(hash.Hash)
}

func (s *sealingBody) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	s.sum.Write(p[:n])
	if errors.Is(err, io.EOF) && s.done != nil {
		s.done(s.sum)
		s.done = nil
	}
	return n, err
}

func (s *sealingBody) Close() error { return s.body.Close() }

// verifier checks the signed requests one node receives.
type verifier struct {
	secret []byte
	seen   *nonces
}

// verify checks r's signature, and that its nonce was not seen before,
// and returns r as it is to be served: its body checked as it is read
// (whole bodies are read and checked here, before anything acts on them),
// BodyTrailer no longer declared to whoever r goes to next.
func (v *verifier) verify(r *http.Request, now time.Time) (*http.Request, error) {
	malformed := cube.Errorf(cube.Forbidden, "%s is malformed: only nodes of this cluster send it", Header)
	parts := strings.Split(r.Header.Get(Header), ";")
	if len(parts) != 5 {
		return nil, malformed
	}
	from, nonce, body, got := parts[0], parts[2], parts[3], parts[4]
	at, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || len(nonce) != 32 || (body != streamed && len(body) != sha256.Size*2) {
		return nil, malformed
	}
	if d := now.Sub(time.Unix(at, 0)); d > maxSkew || d < -maxSkew {
		return nil, cube.Errorf(cube.Forbidden, "a forwarded request from node %s is %s old: check that the nodes' clocks agree", from, d.Round(time.Second))
	}
	want := mac(v.secret, r, from, at, nonce, body)
	if len(v.secret) == 0 || !hmac.Equal([]byte(got), []byte(want)) {
		return nil, cube.Errorf(cube.Forbidden, "a forwarded request from node %s has a bad signature: give every node the same --cluster-secret", from)
	}
	// Recorded only once the signature is good: nobody without the
	// secret fills the record.
	if err := v.seen.first(nonce, time.Unix(at, 0).Add(maxSkew), now); err != nil {
		return nil, err
	}
	damaged := cube.Errorf(cube.Forbidden, "the body of a forwarded request from node %s is not the one it signed", from)
	switch {
	case body == streamed:
		// The trailer's value arrives in this map once the body ends.
		trailer := r.Trailer
		if _, declared := trailer[BodyTrailer]; !declared {
			return nil, damaged
		}
		out := r.WithContext(r.Context())
		out.Trailer = trailer.Clone()
		delete(out.Trailer, BodyTrailer)
		if len(out.Trailer) == 0 {
			out.Trailer = nil
		}
		out.Body = &checkedBody{body: r.Body, sum: sha256.New(), want: func(sum hash.Hash) bool {
			return hmac.Equal([]byte(trailer.Get(BodyTrailer)), []byte(bodyMAC(v.secret, want, sum)))
		}, err: damaged}
		return out, nil
	case r.Body == nil || r.Body == http.NoBody:
		if body != emptyBody {
			return nil, damaged
		}
		return r, nil
	default:
		b, err := io.ReadAll(io.LimitReader(r.Body, wholeBodyBytes+1))
		r.Body.Close()
		if err != nil {
			return nil, cube.Errorf(cube.Invalid, "read a forwarded request's body: %v", err)
		}
		if bodyDigest(b) != body {
			return nil, damaged
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		return r, nil
	}
}

// checkedBody is a streamed body whose end is an error unless its digest
// matches the trailer its sender put after it.
type checkedBody struct {
	body io.ReadCloser
	sum  hash.Hash
	want func(hash.Hash) bool
	err  error
}

func (c *checkedBody) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	c.sum.Write(p[:n])
	if errors.Is(err, io.EOF) && !c.want(c.sum) {
		return n, c.err
	}
	return n, err
}

func (c *checkedBody) Close() error { return c.body.Close() }
