package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"cube/internal/testenv"
)

// TestAutoResumeNeedsTrafficToken: a paused private sandbox with
// auto-resume is woken only by a proxied request that carries its traffic
// token; a request without it (or with a wrong one) is refused and the
// sandbox stays paused.
func TestAutoResumeNeedsTrafficToken(t *testing.T) {
	testenv.RequireRoot(t)
	d, _ := startTiny(t)

	code, out := d.do(t, "POST", "/sandboxes", map[string]any{
		"templateID": "tiny", "timeout": 2, "autoPause": true, "autoResume": map[string]any{"enabled": true},
		"network": map[string]any{"allowPublicTraffic": false},
	}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	var sb struct{ SandboxID, TrafficAccessToken string }
	json.Unmarshal(out, &sb)
	if sb.TrafficAccessToken == "" {
		t.Fatalf("no traffic token issued: %s", out)
	}
	state := func() string {
		code, out := d.do(t, "GET", "/sandboxes/"+sb.SandboxID, nil, nil)
		if code != 200 {
			t.Fatalf("get: %d %s", code, out)
		}
		var s struct{ State string }
		json.Unmarshal(out, &s)
		return s.State
	}
	for i := 0; i < 300 && state() != "paused"; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if st := state(); st != "paused" {
		t.Fatalf("sandbox is %s, want paused at its end time", st)
	}

	route := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "8080"}
	for _, tok := range []string{"", "wrong"} {
		if tok != "" {
			route["E2b-Traffic-Access-Token"] = tok
		}
		if code, out := d.do(t, "GET", "/", nil, route); code != 403 {
			t.Fatalf("traffic token %q: %d %s, want 403", tok, code, out)
		}
		if st := state(); st != "paused" {
			t.Fatalf("after a request with traffic token %q the sandbox is %s, want paused", tok, st)
		}
	}
	route["E2b-Traffic-Access-Token"] = sb.TrafficAccessToken
	if code, out := d.do(t, "GET", "/", nil, route); code != 200 || len(out) != 32 {
		t.Fatalf("with the traffic token: %d %s", code, out)
	}
	if st := state(); st != "running" {
		t.Errorf("after the authorised request the sandbox is %s, want running", st)
	}
}
