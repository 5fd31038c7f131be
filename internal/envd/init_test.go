package envd_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cube/internal/envd/state"
)

// initErr sends /init and returns the status and the E2B error message.
func (s *sandbox) initErr(body any, token string) (int, string) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	hdr := map[string]string{"Content-Type": "application/json"}
	if token != "" {
		hdr["X-Access-Token"] = token
	}
	status, resp, _ := s.do("POST", "/init", bytes.NewReader(b), hdr)
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if status != 204 {
		if err := json.Unmarshal(resp, &e); err != nil || e.Code != status {
			s.t.Fatalf("/init answered %d with %q, not the E2B error shape", status, resp)
		}
	}
	return status, e.Message
}

// tokenWorks reports whether token opens an authenticated route.
func (s *sandbox) tokenWorks(token string) bool {
	st, _, _ := s.do("GET", "/envs", nil, map[string]string{"X-Access-Token": token})
	return st == 200
}

// A sandbox that knows its token must not be able to stamp /init so far
// ahead that the control plane's later re-keying (of this sandbox, or of
// clones made from its snapshots) is ignored.
func TestInitFromTheFutureIsRefused(t *testing.T) {
	s := newSandbox(t)
	if st, msg := s.initErr(map[string]any{"accessToken": "first", "timestamp": time.Now()}, ""); st != 204 {
		t.Fatalf("first init: %d %s", st, msg)
	}
	st, msg := s.initErr(map[string]any{"accessToken": "pinned", "timestamp": time.Now().Add(100 * 365 * 24 * time.Hour)}, "first")
	if st != 400 || !strings.Contains(msg, "ahead of the sandbox clock") || !strings.Contains(msg, "current time") {
		t.Fatalf("far-future init: %d %q, want 400 saying the stamp is ahead of the clock", st, msg)
	}
	if s.tokenWorks("pinned") || !s.tokenWorks("first") {
		t.Fatal("a refused init changed the token")
	}
	// Just beyond the allowed skew is refused as well.
	if st, msg := s.initErr(map[string]any{"timestamp": time.Now().Add(state.MaxInitClockSkew + 5*time.Second)}, "first"); st != 400 {
		t.Fatalf("init %s ahead: %d %q", state.MaxInitClockSkew+5*time.Second, st, msg)
	}
	// The control plane's re-key, stamped with the current time, still
	// takes effect.
	if st, msg := s.initErr(map[string]any{"accessToken": "rekeyed", "timestamp": time.Now()}, "first"); st != 204 {
		t.Fatalf("re-key after a refused future init: %d %q", st, msg)
	}
	if s.tokenWorks("first") || !s.tokenWorks("rekeyed") {
		t.Fatal("the re-key did not replace the token")
	}
}

// A small skew (the host's stamp a little ahead of the sandbox's clock) is
// accepted, but does not hold off the next /init stamped with the current
// time: within the skew a sandbox could otherwise still delay its re-key.
func TestInitWithinClockSkewIsApplied(t *testing.T) {
	s := newSandbox(t)
	if st, msg := s.initErr(map[string]any{"accessToken": "soon", "timestamp": time.Now().Add(state.MaxInitClockSkew / 2)}, ""); st != 204 {
		t.Fatalf("init slightly ahead: %d %q", st, msg)
	}
	if !s.tokenWorks("soon") {
		t.Fatal("token of an init within the skew not applied")
	}
	if st, msg := s.initErr(map[string]any{"accessToken": "rekeyed", "timestamp": time.Now()}, "soon"); st != 204 {
		t.Fatalf("re-key right after an init stamped ahead: %d %q", st, msg)
	}
	if !s.tokenWorks("rekeyed") {
		t.Fatal("the re-key did not replace the token")
	}
}

// A stale /init (a late retry) neither applies nor pretends it did.
func TestStaleInitIsRefused(t *testing.T) {
	s := newSandbox(t)
	stamp := time.Now()
	if st, msg := s.initErr(map[string]any{"accessToken": "current", "timestamp": stamp}, ""); st != 204 {
		t.Fatalf("first init: %d %q", st, msg)
	}
	st, msg := s.initErr(map[string]any{"accessToken": "older", "timestamp": stamp.Add(-time.Hour)}, "current")
	if st != 409 || !strings.Contains(msg, "not newer than the last one applied") {
		t.Fatalf("stale init: %d %q, want 409 saying it is not newer", st, msg)
	}
	// The very same stamp again is not newer either.
	if st, msg := s.initErr(map[string]any{"accessToken": "replayed", "timestamp": stamp}, "current"); st != 409 {
		t.Fatalf("init replaying the applied stamp: %d %q", st, msg)
	}
	if !s.tokenWorks("current") || s.tokenWorks("older") || s.tokenWorks("replayed") {
		t.Fatal("a refused init changed the token")
	}
	// An init without a stamp is not ordered and applies.
	if st, msg := s.initErr(map[string]any{"envVars": map[string]string{"K": "v"}}, "current"); st != 204 {
		t.Fatalf("unstamped init: %d %q", st, msg)
	}
}
