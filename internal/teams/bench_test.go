package teams

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// What checking a request's key costs, on the SQLite store a single
// server keeps (docs/BENCHMARKS.md, "Teams: what authorisation and quota
// checks cost", shows these numbers). Run with
//
//	go test -run x -bench . -benchtime 2000x ./internal/teams ./internal/quota

// benchKeys is a store with the first team and its admin key, 100 other
// teams with a key each, and the team the benchmarks use (with quotas)
// and its key.
func benchKeys(b *testing.B) (k *Keys, team, key string) {
	b.Helper()
	st, err := store.Open(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	k = New(st)
	if err := k.Bootstrap(ctx, NewKey()); err != nil {
		b.Fatal(err)
	}
	q := cube.Quotas{RunningSandboxes: 1000, VCPUs: 4000, MemoryMB: 4000000, MaxTimeout: 24 * time.Hour, DiskBytes: 1 << 40}
	for i := range 100 {
		t, err := k.CreateTeam(ctx, fmt.Sprintf("other-%d", i), q)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := k.CreateKey(ctx, t.ID, "k", ""); err != nil {
			b.Fatal(err)
		}
	}
	t, err := k.CreateTeam(ctx, "bench", q)
	if err != nil {
		b.Fatal(err)
	}
	nk, err := k.CreateKey(ctx, t.ID, "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	// The first check records the key's last use off the request's path;
	// wait for that write so no benchmarked check makes another.
	if _, err := k.Authenticate(ctx, nk.Key); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		r, err := st.APIKeys().Get(ctx, Digest(nk.Key))
		if err != nil {
			b.Fatal(err)
		}
		if !r.LastUsed.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the key's last use was not recorded within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	return k, t.ID, nk.Key
}

// BenchmarkAuthenticateCached is a key checked again within CacheFor:
// its digest and a map lookup, what nearly every request pays.
func BenchmarkAuthenticateCached(b *testing.B) {
	k, _, key := benchKeys(b)
	ctx := context.Background()
	if _, err := k.Authenticate(ctx, key); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := k.Authenticate(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuthenticateUncached is the first check of a key after
// CacheFor: its record and its team's, read from the store.
func BenchmarkAuthenticateUncached(b *testing.B) {
	k, _, key := benchKeys(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		k.mu.Lock()
		clear(k.cache)
		k.mu.Unlock()
		if _, err := k.Authenticate(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuotasCached is a team's quotas read again within CacheFor,
// as every create of a team does (quota.Lookup).
func BenchmarkQuotasCached(b *testing.B) {
	k, team, _ := benchKeys(b)
	ctx := context.Background()
	if _, err := k.Quotas(ctx, team); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := k.Quotas(ctx, team); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuotasUncached is the first read of a team's quotas after
// CacheFor: the team's record.
func BenchmarkQuotasUncached(b *testing.B) {
	k, team, _ := benchKeys(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		k.mu.Lock()
		clear(k.quotas)
		k.mu.Unlock()
		if _, err := k.Quotas(ctx, team); err != nil {
			b.Fatal(err)
		}
	}
}
