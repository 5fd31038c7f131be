package node_test

// The TestFake tests run the node on nodefake's runtime, slots and agents
// with a real store: no root, no gVisor, a few seconds in all. They check
// the node's decisions through its API and what the fakes hold afterwards,
// never the node's internals.

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/node/nodefake"
)

func fctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// newFake starts a node on fakes with the template "tiny" (alias
// "tiny-alias") built and ready.
func newFake(t *testing.T, o nodefake.Options) *nodefake.Node {
	t.Helper()
	n := nodefake.New(t, o)
	n.AddTemplate(t, "tiny", "tiny-alias")
	return n
}

// fakeCreate creates a sandbox of "tiny" for a minute unless req says
// otherwise.
func fakeCreate(t *testing.T, n *nodefake.Node, req cube.CreateRequest) *cube.Sandbox {
	t.Helper()
	if req.Template == "" {
		req.Template = "tiny"
	}
	if req.Timeout == 0 {
		req.Timeout = time.Minute
	}
	sb, err := n.CreateSandbox(fctx(t), req)
	if err != nil {
		t.Fatalf("create from %s: %v", req.Template, err)
	}
	return sb
}

// served is the container and host address a running sandbox is served by.
func served(t *testing.T, n *nodefake.Node, sandboxID string) (string, netip.Addr) {
	t.Helper()
	target, err := n.Resolve(fctx(t), sandboxID, protocol.EnvdPort)
	if err != nil {
		t.Fatalf("resolve %s: %v", sandboxID, err)
	}
	ap, err := netip.ParseAddrPort(target.Addr)
	if err != nil {
		t.Fatalf("resolve %s: address %q: %v", sandboxID, target.Addr, err)
	}
	return target.Upstream, ap.Addr()
}

func wantKind(t *testing.T, what string, err error, k cube.Kind) {
	t.Helper()
	if got := cube.KindOf(err); got != k {
		t.Fatalf("%s: got kind %v (%v), want %v", what, got, err, k)
	}
}

func wantState(t *testing.T, n *nodefake.Node, sandboxID string, s cube.SandboxState) {
	t.Helper()
	sb, err := n.GetSandbox(fctx(t), sandboxID)
	if err != nil {
		t.Fatalf("get %s: %v", sandboxID, err)
	}
	if sb.State != s {
		t.Fatalf("sandbox %s is %s, want %s", sandboxID, sb.State, s)
	}
}

// wantHeld checks the fakes hold exactly these containers and slots.
func wantHeld(t *testing.T, n *nodefake.Node, containers []string, slots []int) {
	t.Helper()
	slices.Sort(containers)
	if got := n.Runtime.Containers(); !slices.Equal(got, containers) && !(len(got) == 0 && len(containers) == 0) {
		t.Fatalf("runtime holds containers %v, want %v", got, containers)
	}
	if got := n.Slots.Held(); !slices.Equal(got, slots) && !(len(got) == 0 && len(slots) == 0) {
		t.Fatalf("slot pool holds %v, want %v", got, slots)
	}
	if left := n.Slots.Leftovers(); len(left) != 0 {
		t.Fatalf("slots of a previous run left: %v", left)
	}
}

// eventually waits up to 10 seconds for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slotOf is the fake slot index of the host address a sandbox is served at.
func slotOf(t *testing.T, host netip.Addr) int {
	t.Helper()
	for i := range 64 {
		if nodefake.Slot(i).HostAddr == host {
			return i
		}
	}
	t.Fatalf("%v is no fake slot's address", host)
	return -1
}

func TestFakeSandboxStateTransitions(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	wantHeld(t, n, nil, nil) // the template build left nothing running
	a := fakeCreate(t, n, cube.CreateRequest{Template: "tiny-alias", EnvVars: map[string]string{"GREETING": "hi"}})
	if a.TemplateID != "tiny" || a.Alias != "tiny-alias" || a.State != cube.StateRunning || a.EnvdAccessToken == "" {
		t.Fatalf("created %+v", a)
	}
	cid, host := served(t, n, a.ID)
	wantHeld(t, n, []string{cid}, []int{slotOf(t, host)})
	// The container was restored from the template's image and its agent
	// handed the sandbox's token and environment.
	tpl, _ := n.Template(fctx(t), "tiny")
	if r := n.Runtime.Restores(); len(r) != 1 || r[0].Image != tpl.Checkpoint || r[0].Spec.ID != cid {
		t.Fatalf("restores = %+v, want one of %s", r, tpl.Checkpoint)
	}
	inits := n.Agents.Inits()
	if len(inits) != 1 || inits[0].Host != host || inits[0].Token != a.EnvdAccessToken || inits[0].OldToken != "" || inits[0].EnvVars["GREETING"] != "hi" {
		t.Fatalf("inits = %+v", inits)
	}
	m, err := n.SandboxMetrics(fctx(t), a.ID, time.Time{}, time.Time{})
	if err != nil || len(m) != 1 || m[0].MemUsed != 64<<20 || m[0].DiskUsed != 1<<20 || m[0].MemTotal != 512<<20 {
		t.Fatalf("metrics = %+v, %v", m, err)
	}

	// Pause, twice.
	if err := n.PauseSandbox(fctx(t), a.ID, true); err != nil {
		t.Fatal(err)
	}
	wantState(t, n, a.ID, cube.StatePaused)
	if s := n.Runtime.Container(cid).State(); s != nodefake.Paused {
		t.Fatalf("container of a paused sandbox is %q", s)
	}
	wantKind(t, "second pause", n.PauseSandbox(fctx(t), a.ID, true), cube.Conflict)
	if _, err := n.Resolve(fctx(t), a.ID, 8080); err == nil {
		t.Fatal("a paused sandbox without auto-resume resolved")
	}

	// Resume thaws the same container.
	_, resumed, err := n.ConnectSandbox(fctx(t), a.ID, cube.ConnectRequest{Timeout: time.Minute})
	if err != nil || !resumed {
		t.Fatalf("connect = %v, %v", resumed, err)
	}
	wantState(t, n, a.ID, cube.StateRunning)
	if c, _ := served(t, n, a.ID); c != cid || n.Runtime.Container(cid).State() != nodefake.Running {
		t.Fatalf("resumed into %s (%s), want %s thawed", c, n.Runtime.Container(c).State(), cid)
	}
	_, _, err = n.ConnectSandbox(fctx(t), a.ID, cube.ConnectRequest{Timeout: time.Minute, RequirePaused: true})
	wantKind(t, "resume of a running sandbox", err, cube.Conflict)

	// Kill, twice: the container and the slot go.
	if err := n.KillSandbox(fctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, n, nil, nil)
	wantKind(t, "second kill", n.KillSandbox(fctx(t), a.ID), cube.NotFound)
	_, err = n.GetSandbox(fctx(t), a.ID)
	wantKind(t, "get after kill", err, cube.NotFound)
	wantKind(t, "pause after kill", n.PauseSandbox(fctx(t), a.ID, true), cube.NotFound)
	if list, err := n.ListSandboxes(fctx(t), cube.ListFilter{}); err != nil || len(list) != 0 {
		t.Fatalf("list after kill = %v, %v", list, err)
	}
}

func TestFakePausedSandboxIsWrittenOutAndRestored(t *testing.T) {
	n := newFake(t, nodefake.Options{PauseWriteDelay: -1})
	a := fakeCreate(t, n, cube.CreateRequest{})
	cid, _ := served(t, n, a.ID)
	if err := n.PauseSandbox(fctx(t), a.ID, true); err != nil {
		t.Fatal(err)
	}
	// Written to disk: its memory (the container) and slot are freed.
	eventually(t, "the paused sandbox is written out", func() bool {
		return n.Runtime.Container(cid) == nil && len(n.Slots.Held()) == 0
	})
	wantState(t, n, a.ID, cube.StatePaused)

	if _, resumed, err := n.ConnectSandbox(fctx(t), a.ID, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
		t.Fatalf("connect = %v, %v", resumed, err)
	}
	now, host := served(t, n, a.ID)
	if now == cid {
		t.Fatal("resumed from disk into the container that was written out")
	}
	r := n.Runtime.Restores()
	last := r[len(r)-1]
	if last.Spec.ID != now || !strings.HasPrefix(last.Image, n.DataDir) {
		t.Fatalf("resumed by %+v", last)
	}
	// The envd inside the image holds the sandbox's own token.
	inits := n.Agents.Inits()
	if in := inits[len(inits)-1]; in.Host != host || in.Token != a.EnvdAccessToken || in.OldToken != a.EnvdAccessToken {
		t.Fatalf("init on resume = %+v", in)
	}
	wantHeld(t, n, []string{now}, []int{slotOf(t, host)})
	if err := n.KillSandbox(fctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, n, nil, nil)
}

func TestFakeWarmPoolHandsOutAndRefills(t *testing.T) {
	n := newFake(t, nodefake.Options{PoolSize: 1})
	eventually(t, "the pool is filled", func() bool { return n.Warm("tiny") == 1 })
	warm := n.Runtime.Containers()
	if len(warm) != 1 || !strings.HasPrefix(warm[0], "w") {
		t.Fatalf("containers with a full pool: %v", warm)
	}
	// Its agent was keyed ahead: handed a token of its own, authorised by
	// the image's (this template's has none), and nothing of a sandbox's
	// yet. That request also warmed it up: the pages its first request
	// writes are its own before a create waits on it.
	inits := n.Agents.Inits()
	if len(inits) != 1 || inits[0].Token == "" || inits[0].OldToken != "" || len(inits[0].EnvVars) != 0 || inits[0].Err != nil {
		t.Fatalf("a warm sandbox was keyed ahead with %+v, want one token-only /init", inits)
	}
	key := inits[0].Token
	// It was restored in the background, below requests' priority.
	if !n.Runtime.Container(warm[0]).Background() {
		t.Fatal("the warm sandbox runs at a request's priority before it is handed out")
	}

	// The warm sandbox is handed out at a request's priority; the sandbox
	// takes the token it was keyed with, and its /init, authorised by
	// that token, hands it the sandbox's environment.
	a := fakeCreate(t, n, cube.CreateRequest{EnvVars: map[string]string{"GREETING": "hi"}})
	cid, host := served(t, n, a.ID)
	if cid != warm[0] {
		t.Fatalf("created in %s, not the warm %s", cid, warm[0])
	}
	if n.Runtime.Container(cid).Background() {
		t.Fatal("the handed-out sandbox still runs at background priority")
	}
	if a.EnvdAccessToken != key {
		t.Fatalf("the sandbox's token %q is not the one its warm sandbox was keyed with, %q", a.EnvdAccessToken, key)
	}
	if inits := n.Agents.Inits(); len(inits) < 2 || inits[1].Host != host || inits[1].Token != key || inits[1].OldToken != key || inits[1].EnvVars["GREETING"] != "hi" {
		t.Fatalf("inits = %+v", inits)
	}
	// Taking the only warm sandbox deepened the pool to two.
	eventually(t, "the pool is refilled", func() bool { return n.Warm("tiny") == 2 && len(n.Runtime.Containers()) == 3 })

	// A warm sandbox whose agent refuses /init is thrown away and a fresh
	// one restored instead.
	var spares []string
	for _, c := range n.Runtime.Containers() {
		if c != cid {
			spares = append(spares, c)
		}
	}
	var keys []string
	for _, in := range n.Agents.Inits() {
		if in.OldToken == "" {
			keys = append(keys, in.Token) // a keying ahead
		}
	}
	before := len(n.Agents.Inits())
	n.Agents.RefuseNextAuthorisedBy(errors.New("tampered with"), keys...)
	b := fakeCreate(t, n, cube.CreateRequest{})
	bc, bHost := served(t, n, b.ID)
	gone := 0
	for _, c := range spares {
		if n.Runtime.Container(c) == nil {
			gone++
		}
	}
	if slices.Contains(spares, bc) || gone != 1 {
		t.Fatalf("created in %s; warm sandboxes %v, of which %d are gone (want the refusing one): %v", bc, spares, gone, n.Runtime.Containers())
	}
	if r := n.Runtime.Restores(); !slices.ContainsFunc(r, func(r nodefake.Restore) bool { return r.Spec.ID == bc }) {
		t.Fatalf("%s was not restored afresh: %+v", bc, r)
	}
	// The refused warm sandbox's key went with it: the fresh one got the
	// sandbox's own token, authorised by the image's.
	if slices.Contains(keys, b.EnvdAccessToken) {
		t.Fatalf("b kept the key %q of the warm sandbox that refused", b.EnvdAccessToken)
	}
	refused, fresh := 0, 0
	for _, in := range n.Agents.Inits()[before:] {
		switch {
		case in.Err != nil && slices.Contains(keys, in.OldToken):
			refused++
		case in.Host == bHost && in.Token == b.EnvdAccessToken && in.OldToken == "" && in.Err == nil:
			fresh++
		case in.Err == nil && in.OldToken == "" && len(in.EnvVars) == 0:
			// the pool keying its next warm sandbox
		default:
			t.Errorf("unexpected /init %+v", in)
		}
	}
	if refused != 1 || fresh != 1 {
		t.Fatalf("%d refused and %d fresh /inits, want one each: %+v", refused, fresh, n.Agents.Inits()[before:])
	}

	// A warm sandbox that cannot be promoted is thrown away too: a create
	// never runs at background priority.
	eventually(t, "the pool is refilled", func() bool { return n.Warm("tiny") == 2 })
	n.Runtime.Fail(nodefake.OpPromote, errors.New("no cgroup"))
	d := fakeCreate(t, n, cube.CreateRequest{})
	n.Runtime.Fail(nodefake.OpPromote, nil)
	dc, _ := served(t, n, d.ID)
	if n.Runtime.Container(dc).Background() {
		t.Fatalf("%s serves a create at background priority", dc)
	}
	if err := n.KillSandbox(fctx(t), d.ID); err != nil {
		t.Fatal(err)
	}

	// Closing drains the pool; sandboxes keep running.
	eventually(t, "the pool is refilled", func() bool { return n.Warm("tiny") == 2 })
	n.Close()
	wantHeld(t, n, []string{cid, bc}, []int{slotOf(t, host), slotOf(t, bHost)})
}

func TestFakeReaperKillsOrPausesExpiredSandboxes(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	expired := fakeCreate(t, n, cube.CreateRequest{Timeout: time.Millisecond})
	pauses := fakeCreate(t, n, cube.CreateRequest{Timeout: time.Millisecond, AutoPause: true, AutoPauseMemory: true})
	lives := fakeCreate(t, n, cube.CreateRequest{Timeout: time.Hour})
	expiredC, _ := served(t, n, expired.ID)
	pausesC, _ := served(t, n, pauses.ID)
	eventually(t, "the reaper kills the expired sandbox", func() bool {
		_, err := n.GetSandbox(fctx(t), expired.ID)
		return cube.KindOf(err) == cube.NotFound
	})
	eventually(t, "the reaper pauses the auto-pausing sandbox", func() bool {
		sb, err := n.GetSandbox(fctx(t), pauses.ID)
		return err == nil && sb.State == cube.StatePaused
	})
	wantState(t, n, lives.ID, cube.StateRunning)
	if n.Runtime.Container(expiredC) != nil || n.Runtime.Container(pausesC).State() != nodefake.Paused {
		t.Fatalf("containers after reaping: %v", n.Runtime.Containers())
	}

	// A sandbox that cannot be paused is killed at its end time.
	n.Runtime.Fail(nodefake.OpPause, errors.New("frozen solid"))
	stuck := fakeCreate(t, n, cube.CreateRequest{Timeout: time.Millisecond, AutoPause: true, AutoPauseMemory: true})
	eventually(t, "the reaper kills the sandbox it could not pause", func() bool {
		_, err := n.GetSandbox(fctx(t), stuck.ID)
		return cube.KindOf(err) == cube.NotFound
	})
}
