package forward

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header carries a forwarded request's signature: the forwarding node, the
// time, and an HMAC-SHA256 under the cluster secret of those, the method,
// the host and the request URI. Bodies are not covered: the nodes' network
// is the cluster's own (and TLS between nodes protects them in transit).
const Header = "X-Cube-Forwarded"

// maxSkew is how old (or how far ahead) a signature may be: clocks of the
// nodes are kept by NTP, and a forwarded request is sent at once.
const maxSkew = time.Minute

func mac(secret []byte, r *http.Request, from string, at int64) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%d", r.Method, r.Host, r.URL.RequestURI(), from, at)
	return hex.EncodeToString(m.Sum(nil))
}

// sign marks r as forwarded by node from at time now.
func sign(r *http.Request, from string, secret []byte, now time.Time) {
	at := now.Unix()
	r.Header.Set(Header, from+";"+strconv.FormatInt(at, 10)+";"+mac(secret, r, from, at))
}

// verify checks r's signature.
func verify(r *http.Request, secret []byte, now time.Time) error {
	parts := strings.Split(r.Header.Get(Header), ";")
	if len(parts) != 3 {
		return errors.New(Header + " is malformed: only nodes of this cluster send it")
	}
	at, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return errors.New(Header + " is malformed: only nodes of this cluster send it")
	}
	if d := now.Sub(time.Unix(at, 0)); d > maxSkew || d < -maxSkew {
		return fmt.Errorf("a forwarded request from node %s is %s old: check that the nodes' clocks agree", parts[0], d.Round(time.Second))
	}
	if len(secret) == 0 || !hmac.Equal([]byte(parts[2]), []byte(mac(secret, r, parts[0], at))) {
		return fmt.Errorf("a forwarded request from node %s has a bad signature: give every node the same --cluster-secret", parts[0])
	}
	return nil
}
