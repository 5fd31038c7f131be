package server_test

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"cube/internal/testenv"
)

// TestAutoPauseAndAutoResume: a sandbox that asks for it is paused, not
// killed, at its end time, and a request for one of its ports through the
// proxy resumes it with its memory intact.
func TestAutoPauseAndAutoResume(t *testing.T) {
	testenv.RequireRoot(t)
	d, dataDir := startTiny(t)

	create := func(body map[string]any) string {
		code, out := d.do(t, "POST", "/sandboxes", body, nil)
		if code != 201 {
			t.Fatalf("create: %d %s", code, out)
		}
		var s struct{ SandboxID string }
		json.Unmarshal(out, &s)
		return s.SandboxID
	}
	holder := func(id string) (int, string) {
		code, out := d.do(t, "GET", "/", nil, map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "8080"})
		return code, string(out)
	}
	state := func(id string) string {
		code, out := d.do(t, "GET", "/sandboxes/"+id, nil, nil)
		if code == 404 {
			return "gone"
		}
		var s struct{ State string }
		json.Unmarshal(out, &s)
		return s.State
	}
	waitState := func(id, want string) {
		t.Helper()
		for i := 0; i < 300 && state(id) != want; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if got := state(id); got != want {
			t.Fatalf("sandbox %s is %s, want %s", id, got, want)
		}
	}

	resumable := create(map[string]any{"templateID": "tiny", "timeout": 2, "autoPause": true, "autoResume": map[string]any{"enabled": true}})
	pauseOnly := create(map[string]any{"templateID": "tiny", "timeout": 2, "autoPause": true})
	killed := create(map[string]any{"templateID": "tiny", "timeout": 2})
	_, token := holder(resumable)
	if len(token) != 32 {
		t.Fatalf("holder token %q", token)
	}

	waitState(resumable, "paused")
	waitState(pauseOnly, "paused")
	waitState(killed, "gone")
	// Let the write-out to disk (2 s in these tests) happen too.
	img := filepath.Join(dataDir, "sandboxes", resumable, "pause", "checkpoint.img")
	waitFile(t, img)

	// Traffic resumes the sandbox that asked for it, with its memory.
	if code, got := holder(resumable); code != 200 || got != token {
		t.Fatalf("proxied request to an auto-resume sandbox: %d %q, want %q", code, got, token)
	}
	if got := state(resumable); got != "running" {
		t.Fatalf("after the request: %s", got)
	}
	// Without autoResume, traffic does not wake it.
	if code, out := holder(pauseOnly); code != 502 || !bytes.Contains([]byte(out), []byte("paused")) {
		t.Fatalf("proxied request to a paused sandbox without auto-resume: %d %s", code, out)
	}
}

// TestTrafficTokenAndNetworkUpdate: with allowPublicTraffic false the
// proxy requires the sandbox's traffic token; PUT /network replaces the
// egress policy live and refuses a malformed one.
func TestTrafficTokenAndNetworkUpdate(t *testing.T) {
	testenv.RequireRoot(t)
	d, _ := startTiny(t)

	code, out := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "network": map[string]any{"allowPublicTraffic": false}}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	var sb struct{ SandboxID, TrafficAccessToken string }
	json.Unmarshal(out, &sb)
	if len(sb.TrafficAccessToken) < 32 {
		t.Fatalf("no traffic token issued: %s", out)
	}
	route := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "8080"}
	if code, _ := d.do(t, "GET", "/", nil, route); code != 403 {
		t.Fatalf("without the traffic token: %d", code)
	}
	route["E2b-Traffic-Access-Token"] = "wrong"
	if code, _ := d.do(t, "GET", "/", nil, route); code != 403 {
		t.Fatalf("with a wrong traffic token: %d", code)
	}
	route["E2b-Traffic-Access-Token"] = sb.TrafficAccessToken
	if code, body := d.do(t, "GET", "/", nil, route); code != 200 || len(body) != 32 {
		t.Fatalf("with the traffic token: %d %s", code, body)
	}

	if code, body := d.do(t, "PUT", "/sandboxes/"+sb.SandboxID+"/network", map[string]any{"denyOut": []string{"1.2.3.4/33"}}, nil); code != 400 || !bytes.Contains(body, []byte("1.2.3.4/33")) {
		t.Fatalf("malformed policy: %d %s", code, body)
	}
	if code, body := d.do(t, "PUT", "/sandboxes/"+sb.SandboxID+"/network", map[string]any{"allowOut": []string{"203.0.113.0/24"}, "denyOut": []string{"0.0.0.0/0"}}, nil); code != 204 {
		t.Fatalf("replace policy: %d %s", code, body)
	}
	// The sandbox still serves through the proxy after the change.
	if code, _ := d.do(t, "GET", "/", nil, route); code != 200 {
		t.Fatalf("after the policy change: %d", code)
	}
}
