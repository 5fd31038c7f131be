package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cube/internal/cube"
	"cube/internal/store"
)

// clock is a time tests move by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func open(t testing.TB) *store.Store {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func register(t *testing.T, st *store.Store, id string, c *clock) *Registry {
	t.Helper()
	return registerUsing(t, st, id, c, store.NodeUsage{CPUCount: 2, Sandboxes: 3})
}

// registerUsing registers a node whose heartbeats report usage.
func registerUsing(t testing.TB, st *store.Store, id string, c *clock, usage store.NodeUsage) *Registry {
	t.Helper()
	r, err := Register(context.Background(), Config{Store: st, ID: id, Address: "http://" + id, Version: "v1",
		Interval: time.Second, Now: c.now,
		Usage: func(context.Context) store.NodeUsage { return usage }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestStatusDecidesAdmissionAndOutlivesARestart(t *testing.T) {
	ctx := context.Background()
	st, c := open(t), &clock{time.Unix(1000, 0)}
	a := register(t, st, "a", c)
	if err := a.Admit(); err != nil {
		t.Fatalf("a new node refuses sandboxes: %v", err)
	}
	n, err := a.GetNode(ctx, "a")
	if err != nil || n.Status != cube.NodeReady || !n.Self || n.Address != "http://a" || n.Usage.Sandboxes != 3 {
		t.Fatalf("node a = %+v, %v", n, err)
	}
	for _, s := range []cube.NodeStatus{cube.NodeDraining, cube.NodeStandby} {
		if err := a.SetNodeStatus(ctx, "a", s); err != nil {
			t.Fatal(err)
		}
		err := a.Admit()
		if cube.KindOf(err) != cube.Unavailable || !strings.Contains(err.Error(), string(s)) || !strings.Contains(err.Error(), "uncordon") {
			t.Fatalf("%s node admits: %v", s, err)
		}
	}
	// Restarted, it is still set aside: an operator's decision.
	a = register(t, st, "a", c)
	if cube.KindOf(a.Admit()) != cube.Unavailable {
		t.Fatal("a restart made the node ready again")
	}
	if err := a.SetNodeStatus(ctx, "a", cube.NodeReady); err != nil || a.Admit() != nil {
		t.Fatalf("uncordon: %v, admit %v", err, a.Admit())
	}

	wantKind := func(what string, err error, k cube.Kind) {
		t.Helper()
		if cube.KindOf(err) != k {
			t.Fatalf("%s: %v, want kind %v", what, err, k)
		}
	}
	wantKind("unknown node", a.SetNodeStatus(ctx, "nope", cube.NodeDraining), cube.NotFound)
	wantKind("unhealthy is not set by hand", a.SetNodeStatus(ctx, "a", cube.NodeUnhealthy), cube.Invalid)
	wantKind("a node removing itself", a.RemoveNode(ctx, "a"), cube.Conflict)
	_, err = a.GetNode(ctx, "nope")
	wantKind("get unknown", err, cube.NotFound)
}

func TestPeersAreUnhealthyWhenTheirHeartbeatIsLate(t *testing.T) {
	ctx := context.Background()
	st, c := open(t), &clock{time.Unix(1000, 0)}
	a := register(t, st, "a", c)
	b := register(t, st, "b", c)
	// b drains a through the shared store; AdmitNow sees it at once,
	// a's heartbeat picks it up for Admit.
	if err := b.SetNodeStatus(ctx, "a", cube.NodeDraining); err != nil {
		t.Fatal(err)
	}
	if err := a.AdmitNow(ctx); cube.KindOf(err) != cube.Unavailable {
		t.Fatalf("AdmitNow of a drained node: %v", err)
	}
	c.t = c.t.Add(time.Second)
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if cube.KindOf(a.Admit()) != cube.Unavailable {
		t.Fatal("a drain set through another node did not reach this one")
	}
	list, err := a.ListNodes(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "a" || !list[0].Self || list[1].Status != cube.NodeReady {
		t.Fatalf("list = %+v, %v", list, err)
	}
	wantErr := func(err error) {
		t.Helper()
		if cube.KindOf(err) != cube.Conflict {
			t.Fatalf("removing a live node: %v", err)
		}
	}
	wantErr(a.RemoveNode(ctx, "b"))

	// b stops heartbeating: past the timeout (5 intervals) it is unhealthy,
	// and may then be removed.
	c.t = c.t.Add(6 * time.Second)
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.GetNode(ctx, "b"); n.Status != cube.NodeUnhealthy {
		t.Fatalf("silent node b is %s", n.Status)
	}
	if n, _ := a.GetNode(ctx, "a"); n.Status != cube.NodeDraining {
		t.Fatalf("heartbeating node a is %s", n.Status)
	}
	if err := a.RemoveNode(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetNode(ctx, "b"); cube.KindOf(err) != cube.NotFound {
		t.Fatalf("removed node: %v", err)
	}
}

// registerRoomy registers a node with free slots and memory.
func registerRoomy(t testing.TB, st *store.Store, id string, c *clock, freeMB int64) *Registry {
	t.Helper()
	return registerUsing(t, st, id, c, store.NodeUsage{CPUCount: 2, SlotsTotal: 10, Sandboxes: 2, MemoryTotalBytes: uint64(freeMB) << 20})
}

// A create goes to a node holding its template; when none of them takes
// sandboxes it goes to another node, which copies the template, but only
// while a holder heartbeats to copy it from; volumes pin their node.
func TestPlacementPrefersHoldersAndCopiesOnlyFromALiveOne(t *testing.T) {
	ctx := context.Background()
	st, c := open(t), &clock{time.Unix(1000, 0)}
	a := registerRoomy(t, st, "a", c, 1000)
	b := registerRoomy(t, st, "b", c, 4000) // the roomiest
	cr := registerRoomy(t, st, "c", c, 2000)
	place := func(want Want) (string, error) {
		t.Helper()
		node, release, err := b.Place(ctx, want)
		if err == nil {
			release()
		}
		return node, err
	}
	if got, err := place(Want{Holders: []string{"a"}}); err != nil || got != "a" {
		t.Fatalf("template on a: placed on %q, %v", got, err)
	}
	if got, err := place(Want{Holders: []string{"a", "c"}}); err != nil || got != "c" {
		t.Fatalf("template on a and c: placed on %q, %v; want c, the roomier holder", got, err)
	}
	if got, err := place(Want{}); err != nil || got != "b" {
		t.Fatalf("no template constraint: placed on %q, %v; want the roomiest", got, err)
	}
	// A node this create could not reach is passed over.
	if got, err := place(Want{Avoid: []string{"b"}}); err != nil || got != "c" {
		t.Fatalf("the roomiest avoided: placed on %q, %v; want c", got, err)
	}
	if got, err := place(Want{Holders: []string{"a", "c"}, Avoid: []string{"c"}}); err != nil || got != "a" {
		t.Fatalf("holder c avoided: placed on %q, %v; want a", got, err)
	}
	// b's CPUs all busy: the next roomiest, c, comes first.
	if err := st.Nodes().Update(ctx, "b", func(n *store.Node) error { n.Usage.CPUPercent = 99; return nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := place(Want{}); err != nil || got != "c" {
		t.Fatalf("the roomiest node's CPUs busy: placed on %q, %v; want c", got, err)
	}
	if err := st.Nodes().Update(ctx, "b", func(n *store.Node) error { n.Usage.CPUPercent = 10; return nil }); err != nil {
		t.Fatal(err)
	}
	// a drains: it still answers, so the template is copied elsewhere.
	if err := a.SetNodeStatus(ctx, "a", cube.NodeDraining); err != nil {
		t.Fatal(err)
	}
	if got, err := place(Want{Holders: []string{"a"}}); err != nil || got != "b" {
		t.Fatalf("holder draining: placed on %q, %v; want b", got, err)
	}
	// A volume on c: c, copying the template from a.
	if got, err := place(Want{Node: "c", Holders: []string{"a"}}); err != nil || got != "c" {
		t.Fatalf("volume on c: placed on %q, %v", got, err)
	}
	// a goes silent: nothing to copy from, and the error names it.
	c.t = c.t.Add(20 * time.Second)
	for _, r := range []*Registry{b, cr} {
		if err := r.heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err := place(Want{Holders: []string{"a"}})
	if cube.KindOf(err) != cube.Unavailable || !strings.Contains(err.Error(), "node a") || !strings.Contains(err.Error(), "unhealthy") {
		t.Fatalf("holder silent: %v", err)
	}
	_, err = place(Want{Node: "c", Holders: []string{"a"}})
	if cube.KindOf(err) != cube.Unavailable || !strings.Contains(err.Error(), "cannot be copied there while no node holding it (a) answers") {
		t.Fatalf("volume on c, template holder silent: %v", err)
	}
}

// Any node's /metrics carries the cluster's totals: nodes by status and
// the sum of the heartbeating nodes' use.
func TestClusterTotals(t *testing.T) {
	ctx := context.Background()
	st, c := open(t), &clock{time.Unix(1000, 0)}
	a := registerRoomy(t, st, "a", c, 1000)
	b := registerRoomy(t, st, "b", c, 3000)
	registerRoomy(t, st, "c", c, 500)
	if err := a.SetNodeStatus(ctx, "b", cube.NodeDraining); err != nil {
		t.Fatal(err)
	}
	// c stops heartbeating: it is counted unhealthy and its use left out.
	c.t = c.t.Add(20 * time.Second)
	for _, r := range []*Registry{a, b} {
		if err := r.heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"cube_cluster_state_readable": 1,
		"cube_cluster_nodes/ready":    1, "cube_cluster_nodes/draining": 1, "cube_cluster_nodes/standby": 0, "cube_cluster_nodes/unhealthy": 1,
		"cube_cluster_slots/total": 20, "cube_cluster_slots/used": 0,
		"cube_cluster_memory_bytes/total": 4000 << 20, "cube_cluster_memory_bytes/used": 0,
		"cube_cluster_sandboxes": 4,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// A peer seen late is read again before it is answered as such: a node
// back from a restart is alive to its peers at its first heartbeat, not
// when their copy of the node records next expires.
func TestPeerBackFromSilenceIsAliveAtOnce(t *testing.T) {
	ctx := context.Background()
	st, c := open(t), &clock{time.Unix(1000, 0)}
	a := registerRoomy(t, st, "a", c, 1000)
	b := registerRoomy(t, st, "b", c, 1000)
	c.t = c.t.Add(20 * time.Second) // b silent past the timeout
	if _, alive, err := a.Peer(ctx, "b"); err != nil || alive {
		t.Fatalf("b silent for 20 s: alive %v, %v", alive, err)
	}
	if err := b.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if addr, alive, err := a.Peer(ctx, "b"); err != nil || !alive || addr == "" {
		t.Fatalf("b heartbeats again: %q alive %v, %v; want alive at once", addr, alive, err)
	}
}
