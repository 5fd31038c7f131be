package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPeer is the lookup of a peer's address every forwarded request
// and typed call makes, in a cluster of 100 nodes.
func BenchmarkPeer(b *testing.B) {
	ctx := context.Background()
	st, c := open(b), &clock{time.Unix(1000, 0)}
	var r *Registry
	for i := range 100 {
		r = registerRoomy(b, st, fmt.Sprintf("n%03d", i), c, 1000)
	}
	if _, _, err := r.Peer(ctx, "n050"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, alive, err := r.Peer(ctx, "n050"); err != nil || !alive {
			b.Fatal(alive, err)
		}
	}
}
