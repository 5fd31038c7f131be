package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Through a node that adds a hop (here a proxy that waits 20 ms), the
// via benchmark reports the hop's cost on both operations, leaves no
// sandbox behind, and prints both paths.
func TestViaMeasuresTheHop(t *testing.T) {
	f, srv := newFakeAPI(t)
	target, _ := url.Parse(srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	hop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		proxy.ServeHTTP(w, r)
	}))
	defer hop.Close()
	direct, _ := NewClient(srv.URL, fakeKey, 1)
	via, _ := NewClient(hop.URL, fakeKey, 1)
	cfg := ViaConfig{Via: hop.URL, Template: "base", Rounds: 3, Warmup: 1, Gets: 4}
	rounds := 0
	rep, err := RunVia(context.Background(), direct, via, cfg, func(done, total int) { rounds = done })
	if err != nil {
		t.Fatal(err)
	}
	if rounds != 4 || f.creates != 8 || len(f.live) != 0 {
		t.Fatalf("rounds %d, creates %d, left %v", rounds, f.creates, f.live)
	}
	if len(rep.Rows) != 4 || rep.Rows[0].Count != 3 || rep.Rows[2].Count != 12 || rep.Node != "cube" {
		t.Fatalf("rows %+v, node %q", rep.Rows, rep.Node)
	}
	if rep.AddedCreateP50 < 20 || rep.AddedGetP50 < 20 {
		t.Fatalf("the 20 ms hop added %.1f ms to creates, %.1f ms to reads", rep.AddedCreateP50, rep.AddedGetP50)
	}
	var out strings.Builder
	WriteViaTable(&out, rep)
	for _, want := range []string{"create   direct", "create   via", "get      direct", "added by the hop at p50"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestViaNeedsAnotherNode(t *testing.T) {
	_, srv := newFakeAPI(t)
	c, _ := NewClient(srv.URL, fakeKey, 1)
	if _, err := RunVia(context.Background(), c, c, ViaConfig{Template: "base", Rounds: 1, Gets: 1}, nil); err == nil || !strings.Contains(err.Error(), "--via") {
		t.Fatalf("without --via: %v", err)
	}
}

// The page gains the cluster section from bench-cluster.sh's results, with
// the target's verdict and the copy's numbers, and keeps dating the page
// by the run that made the other numbers.
func TestReportClusterSection(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "commands.txt"), []byte("# 2026-12-03 16:13 UTC, 2 cores, commit 929650a\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "cluster"), 0o755)
	rep := ViaReport{Command: "via", Node: "node-a", Config: ViaConfig{Gets: 10}, AddedCreateP50: 1.4, AddedGetP50: 0.31,
		Rows: []ViaRow{{"create", "direct", Stats{Count: 30, P50: 40}}, {"create", "via", Stats{Count: 30, P50: 41.4}},
			{"get", "direct", Stats{Count: 300, P50: 0.5}}, {"get", "via", Stats{Count: 300, P50: 0.81}}}}
	b, _ := json.Marshal(rep)
	os.WriteFile(filepath.Join(dir, "cluster", "via.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "cluster", "copy.txt"), []byte("first 4200\nsecond 180\ncopy_mb 950\n"), 0o644)
	var md strings.Builder
	if err := WriteReport(&md, ReportOptions{Dir: dir, ChartPath: "bench", Machine: Machine{Cores: 2}, Now: time.Now(), Commit: "ffff"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"from its run of 2026-12-03 16:13 UTC at commit `929650a`",
		"## 10. A cluster: through another node",
		"| create | via | 30 | 41.4 |",
		"adds ≤ 5 ms (p50) | +1.4 | ✅",
		"(950 MB: rootfs, checkpoint, agent) and took 4200 ms; the next, from the copy, 180 ms",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
