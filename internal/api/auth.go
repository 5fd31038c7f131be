package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"cube/internal/id"
)

// NewAPIKey returns a fresh API key in the shape the E2B SDKs accept
// ("e2b_" and 40 hex digits).
func NewAPIKey() string { return "e2b_" + id.Token(20) }

// HashAPIKey is the digest Config.APIKeyHashes holds for key. Surrounding
// white space (a trailing newline in a key file) is not part of the key.
func HashAPIKey(key string) [sha256.Size]byte {
	return sha256.Sum256([]byte(strings.TrimSpace(key)))
}

// presentedKey is the key a request carries in X-API-Key or as a bearer
// token, or "".
func presentedKey(r *http.Request) string {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k
	}
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// authorized reports whether the request presents an accepted API key, and
// returns the digest of the key it presents.
func (s *Server) authorized(r *http.Request) ([sha256.Size]byte, bool) {
	key := presentedKey(r)
	if key == "" {
		return [sha256.Size]byte{}, false
	}
	return HashAPIKey(key), s.IsAPIKey(key)
}

// IsAPIKey reports whether key is one of the accepted API keys. It
// compares key's digest with every configured one, without stopping early,
// so timing says nothing about which key or how much of it matched. The
// proxy asks it too (proxy.Config.IsAPIKey), to keep keys away from
// sandboxes.
func (s *Server) IsAPIKey(key string) bool {
	if strings.TrimSpace(key) == "" {
		return false
	}
	got := HashAPIKey(key)
	match := 0
	for i := range s.cfg.APIKeyHashes {
		match |= subtle.ConstantTimeCompare(got[:], s.cfg.APIKeyHashes[i][:])
	}
	return match == 1
}
