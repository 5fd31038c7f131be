package forward

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
)

// signedURL is a signed file URL (envd's SignFileURL) as the check of
// whether an envd token made it: the signature is the SHA-256 of
// "<path>:<operation>:<user>:<token>[:<expires>]", so each token costs one
// hash of that string, built in one buffer for every token tried.
type signedURL struct {
	// head is "<path>:<operation>:<user>:", tail ":<expires>" or "".
	head, tail string
	sig        [sha256.Size]byte
	// buf holds head, a token and tail: made is called from one
	// goroutine at a time.
	buf []byte
}

// parseSignedURL reads r's signed file URL: its path, user, operation
// (read for GET and HEAD, write for POST and PUT, as the proxy routes it)
// and expiry, and the signature, "v1_" and the unpadded base64 of the
// hash. False when r is no such URL, which no token makes.
func parseSignedURL(r *http.Request) (*signedURL, bool) {
	var operation string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		operation = "read"
	case http.MethodPost, http.MethodPut:
		operation = "write"
	default:
		return nil, false
	}
	q := r.URL.Query()
	enc, ok := strings.CutPrefix(q.Get("signature"), "v1_")
	if !ok {
		return nil, false
	}
	u := &signedURL{head: q.Get("path") + ":" + operation + ":" + q.Get("username") + ":"}
	if n, err := base64.RawStdEncoding.Strict().Decode(u.sig[:], []byte(enc)); err != nil || n != sha256.Size || len(enc) != base64.RawStdEncoding.EncodedLen(sha256.Size) {
		return nil, false
	}
	if e := q.Get("signature_expiration"); e != "" {
		expires, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return nil, false
		}
		if expires != 0 {
			u.tail = ":" + strconv.FormatInt(expires, 10)
		}
	}
	u.buf = make([]byte, 0, len(u.head)+64+len(u.tail))
	return u, true
}

// made reports whether token made the URL's signature.
func (u *signedURL) made(token string) bool {
	u.buf = append(append(append(u.buf[:0], u.head...), token...), u.tail...)
	sum := sha256.Sum256(u.buf)
	return subtle.ConstantTimeCompare(sum[:], u.sig[:]) == 1
}

// key names the URL for the index to remember its sandbox by: what the
// signature covers, and the signature.
func (u *signedURL) key() string {
	return u.head + u.tail + "\x00" + string(u.sig[:])
}
