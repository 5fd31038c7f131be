package api

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// outage is an error as the store reports the state database out of
// reach: transports read its wait through Outage.
type outage struct{}

func (outage) Error() string         { return "the state database is out of reach (test); try again shortly" }
func (outage) Outage() time.Duration { return 5 * time.Second }
func (outage) Unwrap() error         { return errors.New("connection refused") }

// TestKeysUnreadableIsAnOutageNotABadKey: while the keys cannot be read, a
// request is answered 503 with Retry-After (not 401, which would tell a
// client its valid key is wrong), and IsAPIKey says yes, so the proxy
// drops what may be a key and the forwarder lets the API answer.
func TestKeysUnreadableIsAnOutageNotABadKey(t *testing.T) {
	keys := adminKeys(testKey)
	e := newEnv(t, func(c *envConfig) { c.Teams = keys })
	keys.down = outage{}
	r := e.do("GET", "/v2/sandboxes", nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("while the keys cannot be read: %d (Retry-After %q) %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	s, err := NewServer(Config{Teams: keys}, newFake())
	if err != nil {
		t.Fatal(err)
	}
	if !s.IsAPIKey("e2b_anything") {
		t.Error("IsAPIKey says no while the keys cannot be read")
	}
	keys.down = nil
	if s.IsAPIKey("e2b_wrong") {
		t.Error("IsAPIKey says yes to an unknown key")
	}
	e.do("GET", "/v2/sandboxes", nil).decode(t, http.StatusOK, nil)
}
