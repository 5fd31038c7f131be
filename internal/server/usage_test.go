package server_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"cube/internal/testenv"
)

// TestTeamUsageOfRealSandboxes: a gVisor sandbox created, paused, resumed
// and killed is counted by GET /teams/{teamID}/usage for the time it ran
// (not the time it was paused), and GET /teams/{teamID}/metrics and
// /metrics/max see it run and start.
func TestTeamUsageOfRealSandboxes(t *testing.T) {
	testenv.RequireRoot(t)
	d, _ := startTiny(t)
	const team = "00000000-0000-4000-8000-000000000001" // the first team, the server key's
	since := time.Now().Add(-time.Second).Unix()

	started := time.Now()
	code, out := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny"}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	var sbx struct{ SandboxID string }
	json.Unmarshal(out, &sbx)
	time.Sleep(time.Second)
	if code, out := d.do(t, "POST", "/sandboxes/"+sbx.SandboxID+"/pause", map[string]any{}, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, out)
	}
	paused := time.Now()
	time.Sleep(2 * time.Second)
	resumed := time.Now()
	if code, out := d.do(t, "POST", "/sandboxes/"+sbx.SandboxID+"/connect", map[string]any{"timeout": 60}, nil); code != 201 && code != 200 {
		t.Fatalf("resume: %d %s", code, out)
	}
	time.Sleep(time.Second)
	if code, out := d.do(t, "DELETE", "/sandboxes/"+sbx.SandboxID, nil, nil); code != 204 {
		t.Fatalf("kill: %d %s", code, out)
	}
	killed := time.Now()

	code, out = d.do(t, "GET", fmt.Sprintf("/teams/%s/usage?start=%d", team, since), nil, nil)
	if code != 200 {
		t.Fatalf("usage: %d %s", code, out)
	}
	var u struct {
		SandboxSeconds   float64
		VCPUSeconds      float64
		SandboxesStarted int
		RunningSandboxes int
	}
	json.Unmarshal(out, &u)
	t.Logf("usage: %s", out)
	most := paused.Sub(started) + killed.Sub(resumed)
	if u.SandboxesStarted != 2 || u.RunningSandboxes != 0 || u.SandboxSeconds < 1.5 || u.SandboxSeconds > most.Seconds()+0.5 || u.VCPUSeconds < u.SandboxSeconds {
		t.Errorf("usage %s; ran at most %v", out, most)
	}

	code, out = d.do(t, "GET", fmt.Sprintf("/teams/%s/metrics/max?start=%d&metric=concurrent_sandboxes", team, since), nil, nil)
	var m struct{ Value float64 }
	if json.Unmarshal(out, &m); code != 200 || m.Value != 1 {
		t.Errorf("most at once: %d %s", code, out)
	}
	code, out = d.do(t, "GET", fmt.Sprintf("/teams/%s/metrics?start=%d", team, since), nil, nil)
	var series []struct {
		ConcurrentSandboxes int
		SandboxStartRate    float64
	}
	json.Unmarshal(out, &series)
	ran, starts := 0, 0.0
	for _, s := range series {
		ran = max(ran, s.ConcurrentSandboxes)
		starts += s.SandboxStartRate * 5 // steps of 5 s under an hour
	}
	if code != 200 || ran != 1 || starts < 1.99 || starts > 2.01 {
		t.Errorf("series: %d %s", code, out)
	}
}
