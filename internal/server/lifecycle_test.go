package server_test

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"cube/internal/nodetest"
	"cube/internal/testenv"
)

// TestAutoPauseAndAutoResume: a sandbox that asks for it is paused, not
// killed, at its end time, and a request for one of its ports through the
// proxy resumes it with its memory intact.
func TestAutoPauseAndAutoResume(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir := t.TempDir()
	n := nodetest.New(t, nodetest.Options{DataDir: dataDir})
	n.TinyTemplate(t, "tiny")
	n.Close()
	prefix, cidr := nodetest.SlotRange()
	d := startDaemon(t, dataDir, prefix, cidr.String(), freeAddr(t))

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
