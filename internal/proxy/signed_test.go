package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"cube/internal/envd/protocol"
)

// tokens is a resolver that also finds sandboxes by envd token.
type tokens struct {
	resolver
	byID map[string]string
}

func (t tokens) FindByToken(ctx context.Context, made func(string) bool) (string, bool) {
	for id, tok := range t.byID {
		if made(tok) {
			return id, true
		}
	}
	return "", false
}

// signedURL is the query of a file URL the SDK signs with token.
func signedURL(path, operation, user, token string, expires int64) string {
	q := url.Values{"path": {path}, "username": {user}, "signature": {protocol.SignFileURL(path, operation, user, token, expires)}}
	if expires != 0 {
		q.Set("signature_expiration", strconv.FormatInt(expires, 10))
	}
	return "/files?" + q.Encode()
}

func TestSignedFileURLWithoutRouteReachesTheSandboxThatSignedIt(t *testing.T) {
	up1, up2 := headerEcho(t), headerEcho(t)
	res := tokens{
		resolver: resolver{"sb1": {Addr: hostPort(t, up1.URL)}, "sb2": {Addr: hostPort(t, up2.URL)}},
		byID:     map[string]string{"sb1": "token-one", "sb2": "token-two"},
	}
	p := New(Config{}, res)
	cases := []struct {
		name, method, target string
		want                 string // sandbox routed to; "" for not sandbox traffic
	}{
		{"read, second sandbox", "GET", signedURL("/home/user/a.txt", "read", "user", "token-two", 0), "sb2"},
		{"read with expiry", "GET", signedURL("/home/user/a.txt", "read", "user", "token-one", 4102444800), "sb1"},
		{"write by multipart upload", "POST", signedURL("/home/user/up.txt", "write", "user", "token-one", 0), "sb1"},
		{"a read signature used to write", "POST", signedURL("/home/user/a.txt", "read", "user", "token-one", 0), ""},
		{"no sandbox's token", "GET", signedURL("/home/user/a.txt", "read", "user", "token-three", 0), ""},
		{"another path", "GET", "/other?" + signedURL("/a", "read", "user", "token-one", 0)[len("/files?"):], ""},
		{"no signature", "GET", "/files?path=/etc/passwd", ""},
		{"expiry not a number", "GET", signedURL("/a", "read", "user", "token-one", 0) + "&signature_expiration=soon", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.target, nil)
			sid, port, ok := p.Match(r)
			if c.want == "" {
				if ok {
					t.Fatalf("routed to %s:%d", sid, port)
				}
				return
			}
			if !ok || sid != c.want || port != protocol.EnvdPort {
				t.Fatalf("Match = %q, %d, %v; want %s on envd's port", sid, port, ok, c.want)
			}
			w := httptest.NewRecorder()
			p.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("proxied: %d %s", w.Code, w.Body)
			}
			var seen http.Header
			if err := json.Unmarshal(w.Body.Bytes(), &seen); err != nil {
				t.Fatal(err)
			}
			if seen.Get(HeaderSandboxID) != "" {
				t.Fatal("the routing header reached the sandbox")
			}
		})
	}

	// Without a token finder such URLs are not the proxy's.
	plain := New(Config{}, res.resolver)
	if _, _, ok := plain.Match(httptest.NewRequest("GET", signedURL("/a", "read", "user", "token-one", 0), nil)); ok {
		t.Fatal("routed without a token finder")
	}
}
