package quota

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// What the running-sandboxes check of a create costs on the SQLite store
// a single server keeps, against the number of sandbox records in it
// (docs/BENCHMARKS.md, "Teams: what authorisation and quota checks cost",
// shows these numbers). Run with
//
//	go test -run x -bench . -benchtime 2000x ./internal/teams ./internal/quota

// benchTeams is how many teams the records are spread over.
const benchTeams = 10

// benchChecker is a checker over a store of n sandbox records of
// benchTeams teams (t0 … t9): three in four running, the rest paused
// (which the check reads past without decoding). Every team has high
// quotas that no check reaches; lookup answers without a store read (the
// teams package's benchmarks measure that read).
func benchChecker(b *testing.B, n int) *Checker {
	b.Helper()
	st, err := store.Open(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for i := range n {
		state := store.Running
		if i%4 == 3 {
			state = store.Paused
		}
		rec := benchRecord(i, state)
		if err := st.Sandboxes().Put(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	high := cube.Quotas{RunningSandboxes: 1000000, VCPUs: 4000000, MemoryMB: 4000000000}
	return New(st, func(_ context.Context, team string) (cube.Quotas, error) {
		if team == "none" {
			return cube.Quotas{}, nil
		}
		return high, nil
	})
}

// benchRecord is a sandbox record the size of a real one: the server's
// records carry the template they booted from (Boot) and the create's
// network settings.
func benchRecord(i int, state store.SandboxState) *store.Sandbox {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	boot := &store.Template{ID: "code-interpreter", Team: cube.FirstTeam, Status: store.TemplateReady, CreatedAt: at, UpdatedAt: at,
		Node: "node-1", Image: "oci-archive:/var/lib/cube/imports/default-image.tar",
		ImageDigest: "sha256:4f2a9c0e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f", BuildJob: "job-0123456789abcdef",
		Rootfs: "/var/lib/cube/templates/code-interpreter/rootfs", Envd: "/var/lib/cube/bin/cube-envd",
		Checkpoint: "/var/lib/cube/templates/code-interpreter/checkpoint", SizeBytes: 1 << 30,
		Checksum: "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
		StartCmd: []string{"/usr/bin/python3", "-m", "jupyter", "server", "--no-browser"},
		Env:      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/home/user"},
		Cwd:      "/home/user", User: "user", CPUCount: 2, MemoryMB: 2048, DiskSizeMB: 1024,
		ExposedPorts: []int{49983, 49999}, ProbePort: 49999, Public: true}
	return &store.Sandbox{ID: fmt.Sprintf("i%019d", i), Team: fmt.Sprintf("t%d", i%benchTeams), TemplateID: "code-interpreter",
		Alias: "base", State: state, ContainerID: fmt.Sprintf("sb-i%019d-1", i), Slot: i, HostAddr: "10.77.0.1",
		Node: "node-1", CreatedAt: at, StartedAt: at, EndAt: at.Add(5 * time.Minute), Timeout: 5 * time.Minute, RunningSince: at,
		CPUCount: 2, MemoryMB: 2048, DiskSizeMB: 1024, Metadata: map[string]string{"user": "bench"},
		EnvdToken: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Network:   []byte(`{"AllowInternetAccess":null,"AllowOut":null,"DenyOut":null,"AllowPublicTraffic":null,"MaskRequestHost":""}`),
		Boot:      boot}
}

var benchAdd = Sandboxes{Count: 1, VCPUs: 2, MemoryMB: 2048}

func startOnce(b *testing.B, c *Checker, team string) {
	release, err := c.Start(context.Background(), team, benchAdd)
	if err != nil {
		b.Fatal(err)
	}
	release()
}

// BenchmarkStart is one create's running-sandboxes check (and its
// release) of a team with quotas, against the records in the store.
func BenchmarkStart(b *testing.B) {
	for _, n := range []int{100, 1000, 20000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			c := benchChecker(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				startOnce(b, c, "t0")
			}
		})
	}
}

// BenchmarkStartNoQuotas is the same check of a team without quotas
// (the first team of an install): it reads nothing.
func BenchmarkStartNoQuotas(b *testing.B) {
	c := benchChecker(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		startOnce(b, c, "none")
	}
}

// BenchmarkStartParallel runs the check from 8 goroutines at once over
// 1000 records, all for one team (whose checks take turns by design) or
// each for a team of its own: if checks of different teams waited for
// each other, both would take as long per check.
func BenchmarkStartParallel(b *testing.B) {
	for _, mode := range []string{"one-team", "eight-teams"} {
		b.Run(mode, func(b *testing.B) {
			c := benchChecker(b, 1000)
			var next atomic.Int32
			b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				team := "t0"
				if mode == "eight-teams" {
					team = fmt.Sprintf("t%d", next.Add(1)%benchTeams)
				}
				for pb.Next() {
					startOnce(b, c, team)
				}
			})
		})
	}
}
