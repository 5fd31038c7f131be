package envd_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"cube/internal/envd/protocol"
)

// signedURL is /files for path, signed for user (left out of the query
// when empty) with token.
func signedURL(path, operation, user, token string, expires int64) string {
	v := url.Values{"path": {path}, "signature": {protocol.SignFileURL(path, operation, user, token, expires)}}
	if user != "" {
		v.Set("username", user)
	}
	if expires != 0 {
		v.Set("signature_expiration", strconv.FormatInt(expires, 10))
	}
	return "/files?" + v.Encode()
}

func basic(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// A URL signed for the default user must not act as root because the
// request also carries `Authorization: Basic root`.
func TestSignedURLActsOnlyAsTheSignedUser(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	const token = "sign-token"
	if st := s.init(map[string]any{"accessToken": token, "defaultUser": "nobody"}, ""); st != 204 {
		t.Fatalf("init: %d", st)
	}
	secret := filepath.Join(s.dir, "root-only.txt")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(s.dir, 0o755)
	asRoot := map[string]string{"Authorization": basic("root")}

	st, body, _ := s.do("GET", signedURL(secret, "read", "", token, 0), nil, asRoot)
	if st != 403 {
		t.Fatalf("read of a root-only file through a URL signed for the default user, with a root header: %d %s", st, body)
	}
	st, body, _ = s.do("POST", signedURL(secret, "write", "", token, 0), bytes.NewReader([]byte("overwritten")), asRoot)
	if st != 403 {
		t.Fatalf("write over a root-only file through a URL signed for the default user, with a root header: %d %s", st, body)
	}
	if b, _ := os.ReadFile(secret); string(b) != "root's" {
		t.Fatalf("root's file now holds %q", b)
	}
	// Naming another user than the signed one breaks the signature.
	st, _, _ = s.do("GET", signedURL(secret, "read", "", token, 0)+"&username=root", nil, nil)
	if st != 401 {
		t.Fatalf("signed URL with username switched to root: %d", st)
	}
	// A URL signed for root still reads as root.
	st, body, _ = s.do("GET", signedURL(secret, "read", "root", token, 0), nil, nil)
	if st != 200 || string(body) != "root's" {
		t.Fatalf("URL signed for root: %d %s", st, body)
	}
}

// An expired signature is refused with E2B's status and wording.
func TestExpiredSignatureIsRefusedAsE2BDoes(t *testing.T) {
	s := newSandbox(t)
	const token = "sign-token"
	if st := s.init(map[string]any{"accessToken": token}, ""); st != 204 {
		t.Fatalf("init: %d", st)
	}
	f := s.rel("f.txt")
	os.WriteFile(s.inHome("f.txt"), []byte("x"), 0o644)
	past := time.Now().Add(-10 * time.Second).Unix()
	for _, op := range []string{"read", "write"} {
		method := map[string]string{"read": "GET", "write": "POST"}[op]
		st, body, _ := s.do(method, signedURL(f, op, "", token, past), bytes.NewReader([]byte("new")), nil)
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		json.Unmarshal(body, &e)
		if st != 401 || e.Code != 401 || e.Message != "signature is already expired" {
			t.Fatalf("%s with an expired signature: %d %s", op, st, body)
		}
	}
	if b, _ := os.ReadFile(s.inHome("f.txt")); string(b) != "x" {
		t.Fatalf("an expired write URL changed the file to %q", b)
	}
	// A forged signature with a past expiry is reported as invalid, not
	// as expired: the signature is checked first.
	v := url.Values{"path": {f}, "signature": {"v1_forged"}, "signature_expiration": {strconv.FormatInt(past, 10)}}
	if st, body, _ := s.do("GET", "/files?"+v.Encode(), nil, nil); st != 401 || !bytes.Contains(body, []byte(`"invalid signature"`)) {
		t.Fatalf("forged signature with a past expiry: %d %s", st, body)
	}
}
