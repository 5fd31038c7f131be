package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"cube/internal/testenv"
)

// TestConsoleAndSandboxMetrics: the web console's page is served, its
// summary reads the server's own metrics, and the per-sandbox series exist
// while their sandbox runs and are gone once it is paused or killed.
func TestConsoleAndSandboxMetrics(t *testing.T) {
	testenv.RequireRoot(t)
	d, _ := startTiny(t)

	if code, body := d.do(t, "GET", "/console", nil, map[string]string{"X-API-Key": ""}); code != 200 || !strings.Contains(string(body), "/console/assets/app.js") {
		t.Fatalf("GET /console: %d %.200s", code, body)
	}

	code, out := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny"}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	var sbx struct{ SandboxID string }
	json.Unmarshal(out, &sbx)
	cpu := fmt.Sprintf(`cube_sandbox_cpu_seconds_total{sandbox=%q}`, sbx.SandboxID)
	mem := fmt.Sprintf(`cube_sandbox_memory_bytes{sandbox=%q}`, sbx.SandboxID)
	scrape := func() string {
		code, body := d.do(t, "GET", "/metrics", nil, nil)
		if code != 200 {
			t.Fatalf("GET /metrics: %d", code)
		}
		return string(body)
	}
	// The first scrape reads every running sandbox (a reading is kept for
	// a few seconds after).
	if m := scrape(); !strings.Contains(m, cpu) || !strings.Contains(m, mem) {
		t.Fatalf("no per-sandbox series for the running sandbox in:\n%s", grepLines(m, "cube_sandbox_"))
	}
	// Without a key, /metrics names no sandbox: an ID reaches its ports.
	resp, err := http.Get(d.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	public, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(public), sbx.SandboxID) || !strings.Contains(string(public), "cube_sandbox_capacity") {
		t.Fatalf("GET /metrics without a key: %d, naming the sandbox: %v", resp.StatusCode, strings.Contains(string(public), sbx.SandboxID))
	}
	// The per-team series name teams: the admin key's scrape has them,
	// one without a key none.
	team := `cube_team_sandboxes_running{team="00000000-0000-4000-8000-000000000001"} 1`
	if m := scrape(); !strings.Contains(m, team) || !strings.Contains(m, "cube_team_vcpu_seconds_total{") {
		t.Fatalf("no per-team series for the running sandbox in:\n%s", grepLines(m, "cube_team_"))
	}
	if strings.Contains(string(public), "cube_team_") {
		t.Fatalf("GET /metrics without a key names teams:\n%s", grepLines(string(public), "cube_team_"))
	}

	for _, op := range []string{"pause", "resume"} {
		if code, out := d.do(t, "POST", "/sandboxes/"+sbx.SandboxID+"/"+op, map[string]any{}, nil); code != 204 && code != 201 && code != 200 {
			t.Fatalf("%s: %d %s", op, code, out)
		}
		if op == "pause" {
			if m := scrape(); strings.Contains(m, cpu) || strings.Contains(m, mem) {
				t.Fatalf("a paused sandbox keeps its series:\n%s", grepLines(m, sbx.SandboxID))
			}
		}
	}

	code, out = d.do(t, "GET", "/console/api/summary", nil, nil)
	if code != 200 {
		t.Fatalf("summary: %d %s", code, out)
	}
	var sum struct {
		Sandboxes  map[string]int
		Capacity   struct{ Used, Max int }
		Operations map[string]struct{ Count int }
		Creates    map[string]int
		Builds     map[string]struct{ Count int }
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Sandboxes["running"] != 1 || sum.Capacity.Used != 1 || sum.Capacity.Max < 1 {
		t.Errorf("summary: sandboxes %v, capacity %+v; want one running", sum.Sandboxes, sum.Capacity)
	}
	if sum.Operations["pause"].Count != 1 || sum.Operations["resume"].Count != 1 || sum.Creates["ok"] != 1 {
		t.Errorf("summary: operations %+v, creates %v; want one pause, one resume, one create", sum.Operations, sum.Creates)
	}
	if code, _ := d.do(t, "GET", "/console/api/summary", nil, map[string]string{"X-API-Key": "e2b_wrong"}); code != 401 {
		t.Errorf("summary with a wrong key: %d, want 401", code)
	}

	if code, out := d.do(t, "DELETE", "/sandboxes/"+sbx.SandboxID, nil, nil); code != 204 {
		t.Fatalf("kill: %d %s", code, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m := scrape(); strings.Contains(m, sbx.SandboxID); m = scrape() {
		if time.Now().After(deadline) {
			t.Fatalf("series of a killed sandbox remain:\n%s", grepLines(m, sbx.SandboxID))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if m := scrape(); !strings.Contains(m, `cube_sandbox_operation_duration_seconds_count{op="kill"} 1`) {
		t.Errorf("no kill duration in:\n%s", grepLines(m, "cube_sandbox_operation"))
	}
}

func grepLines(s, needle string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, needle) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
