package proxy

import (
	"crypto/subtle"
	"net/http"
	"strconv"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
)

// routeSigned routes a signed file URL that names no sandbox. An SDK that
// routes by header (E2B_SANDBOX_URL) hands out upload and download URLs
// carrying only the path, user, expiry and signature, made with the
// sandbox's envd token; the sandbox is the one whose token made it. The
// route is written into the request's routing headers, as a header-routed
// client would have sent them, so the rest of the proxy sees an ordinary
// request, and envd checks the signature (and its expiry) as always. A URL
// no sandbox's token made is left alone, and the API answers it.
func (p *Proxy) routeSigned(r *http.Request) bool {
	finder, ok := p.resolver.(cube.TokenFinder)
	if !ok || r.URL.Path != "/files" {
		return false
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return false
	}
	var operation string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		operation = "read"
	case http.MethodPost, http.MethodPut:
		operation = "write"
	default:
		return false
	}
	var expires int64
	if e := q.Get("signature_expiration"); e != "" {
		var err error
		if expires, err = strconv.ParseInt(e, 10, 64); err != nil {
			return false
		}
	}
	path, user := q.Get("path"), q.Get("username")
	sid, found := finder.FindByToken(r.Context(), func(token string) bool {
		want := protocol.SignFileURL(path, operation, user, token, expires)
		return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
	})
	if !found {
		return false
	}
	r.Header.Set(HeaderSandboxID, sid)
	r.Header.Set(HeaderSandboxPort, strconv.Itoa(protocol.EnvdPort))
	return true
}
