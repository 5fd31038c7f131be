package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/forward"
)

// madeAt records where creates were made: here, or on which peer.
type madeAt struct{ here, on []string }

type hereCreates struct {
	forward.Local
	c *madeAt
}

func (h hereCreates) CreateSandbox(_ context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	h.c.here = append(h.c.here, req.Template)
	return &cube.Sandbox{ID: "here", Node: "node-a"}, nil
}

type peerCreates struct {
	peerService
	c   *madeAt
	err error
}

func (p peerCreates) CreateSandbox(_ context.Context, node string, req cube.CreateRequest) (*cube.Sandbox, error) {
	p.c.on = append(p.c.on, node+":"+req.Template)
	if p.err != nil {
		return nil, p.err
	}
	return &cube.Sandbox{ID: "there", Node: node}, nil
}

// placing places a create on the node its template names, "node-a" being
// this one, and counts the room it holds.
type placing struct{ held, calls int }

func (*placing) Self() string { return "node-a" }
func (p *placing) Place(_ context.Context, want cluster.Want) (string, func(), error) {
	p.held++
	p.calls++
	return want.Node, func() { p.held-- }, nil
}

// A create is placed once, from the request the API decoded: made on the
// node placement picks, here or through the peer client, with room held
// there until it is made. A template that cannot be read for placement is
// left to the local create, which says what is wrong; a database out of
// reach places nothing; a peer too old for typed calls leaves the create
// here.
func TestClusteredCreatesArePlaced(t *testing.T) {
	for _, c := range []struct {
		template  string
		peerErr   error
		here, on  string
		wantKind  cube.Kind
		wantPlace bool
	}{
		{template: "on-b", on: "node-b:on-b", wantPlace: true},
		{template: "on-a", here: "on-a", wantPlace: true},
		{template: "unknown", here: "unknown"},
		{template: "database down", wantKind: cube.Unavailable},
		{template: "on-b", peerErr: fmt.Errorf("node node-b: %w", forward.ErrPeerTooOld), on: "node-b:on-b", here: "on-b", wantPlace: true},
		{template: "on-b", peerErr: cube.Errorf(cube.Capacity, "full"), on: "node-b:on-b", wantKind: cube.Capacity, wantPlace: true},
	} {
		made, places, asked := &madeAt{}, &placing{}, 0
		cs := &clustered{local: hereCreates{c: made}, placer: places, peers: peerCreates{c: made, err: c.peerErr},
			want: func(_ context.Context, req cube.CreateRequest) (cluster.Want, error) {
				asked++
				switch req.Template {
				case "unknown":
					return cluster.Want{}, cube.Errorf(cube.NotFound, "no template")
				case "database down":
					return cluster.Want{}, cube.Errorf(cube.Unavailable, "the state database is out of reach")
				}
				return cluster.Want{Node: "node-" + req.Template[len("on-"):]}, nil
			}}
		_, err := cs.CreateSandbox(context.Background(), cube.CreateRequest{Template: c.template})
		name := fmt.Sprintf("%s (peer %v)", c.template, c.peerErr)
		if cube.KindOf(err) != c.wantKind {
			t.Errorf("%s: %v, want kind %v", name, err, c.wantKind)
		}
		if asked != 1 || places.held != 0 || (places.calls == 1) != c.wantPlace || places.calls > 1 {
			t.Errorf("%s: its template read %d times, placed %d times, %d rooms still held", name, asked, places.calls, places.held)
		}
		if got := fmt.Sprint(made.here); (c.here == "" && len(made.here) != 0) || (c.here != "" && got != "["+c.here+"]") {
			t.Errorf("%s: made here %v, want %q", name, made.here, c.here)
		}
		if got := fmt.Sprint(made.on); (c.on == "" && len(made.on) != 0) || (c.on != "" && got != "["+c.on+"]") {
			t.Errorf("%s: made on peers %v, want %q", name, made.on, c.on)
		}
	}
}

// calls records the calls on sandboxes made here and on peers.
type calls struct{ here, on []string }

// hereCalls is this node's own service, recording what it is asked.
type hereCalls struct {
	forward.Local
	c *calls
}

func (h hereCalls) GetSandbox(_ context.Context, id string) (*cube.Sandbox, error) {
	h.c.here = append(h.c.here, "get "+id)
	return &cube.Sandbox{ID: id}, nil
}

func (h hereCalls) DeleteVolume(_ context.Context, id string) error {
	h.c.here = append(h.c.here, "delete "+id)
	return nil
}

func (h hereCalls) GetVolume(_ context.Context, id string) (*cube.Volume, error) {
	h.c.here = append(h.c.here, "get "+id)
	return &cube.Volume{ID: id}, nil
}

func (h hereCalls) StartBuild(_ context.Context, team, templateID, buildID string, _ cube.BuildSpec) error {
	h.c.here = append(h.c.here, "build "+templateID)
	return nil
}

func (h hereCalls) PauseSandbox(_ context.Context, id string, _ bool) error {
	h.c.here = append(h.c.here, "pause "+id)
	return nil
}

func (h hereCalls) ConnectSandbox(_ context.Context, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	h.c.here = append(h.c.here, "connect "+id+" from "+req.MoveFrom)
	return &cube.Sandbox{ID: id}, true, nil
}

// peerCalls are the peer client's calls, each failing with err.
type peerCalls struct {
	peerService
	c   *calls
	err error
}

func (p peerCalls) GetSandbox(_ context.Context, node, id string) (*cube.Sandbox, error) {
	p.c.on = append(p.c.on, node+": get "+id)
	if p.err != nil {
		return nil, p.err
	}
	return &cube.Sandbox{ID: id, Node: node}, nil
}

func (p peerCalls) DeleteVolume(_ context.Context, node, id string) error {
	p.c.on = append(p.c.on, node+": delete "+id)
	return p.err
}

func (p peerCalls) GetVolume(_ context.Context, node, id string) (*cube.Volume, error) {
	p.c.on = append(p.c.on, node+": get "+id)
	if p.err != nil {
		return nil, p.err
	}
	return &cube.Volume{ID: id}, nil
}

func (p peerCalls) StartBuild(_ context.Context, node, team, templateID, buildID string, _ cube.BuildSpec) error {
	p.c.on = append(p.c.on, node+": build "+templateID)
	return p.err
}

func (p peerCalls) PauseSandbox(_ context.Context, node, id string, _ bool) error {
	p.c.on = append(p.c.on, node+": pause "+id)
	return p.err
}

func (p peerCalls) ConnectSandbox(_ context.Context, node, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	p.c.on = append(p.c.on, node+": connect "+id+" from "+req.MoveFrom)
	if p.err != nil {
		return nil, false, p.err
	}
	return &cube.Sandbox{ID: id, Node: node}, true, nil
}

// sandboxesOf is the cluster as node-a sees it: "held" runs here; "on-b",
// "moving" and "on-dead" are on node-b, node-c (draining) and node-d (not
// heartbeating); "unknown" has no record; "on-gone" names a node removed
// since; "outage" cannot be read.
type sandboxesOf struct{}

func (sandboxesOf) Holds(id string) bool { return id == "held" }
func (sandboxesOf) NodeOf(_ context.Context, id string) (string, error) {
	switch id {
	case "on-b":
		return "node-b", nil
	case "moving", "moving-here":
		return "node-c", nil
	case "on-dead":
		return "node-d", nil
	case "on-gone":
		return "node-e", nil
	case "outage":
		return "", errors.New("connection refused")
	}
	return "", nil
}
func (sandboxesOf) VolumeNodeOf(_ context.Context, id string) (string, error) {
	switch id {
	case "vol-on-b":
		return "node-b", nil
	case "vol-on-dead":
		return "node-d", nil
	}
	return "", nil
}
func (sandboxesOf) TemplateNodeOf(_ context.Context, id string) (string, error) {
	if id == "tpl-on-b" {
		return "node-b", nil
	}
	return "", nil
}
func (sandboxesOf) Peer(_ context.Context, node string) (string, bool, error) {
	if node == "node-e" {
		return "", false, cluster.ErrNoNode
	}
	return "http://" + node, node != "node-d", nil
}
func (sandboxesOf) Movable(_ context.Context, id string) (string, cluster.Want, bool) {
	if id == "moving-here" {
		return "node-c", cluster.Want{Node: "node-a"}, true
	}
	return "node-c", cluster.Want{Node: "node-b"}, id == "moving"
}

// A call on one sandbox goes to the node its record names: this node's
// own service for what it runs, has no node or does not exist; the peer
// client for a sandbox of a peer. A node that does not heartbeat has its
// sandboxes read here and their changes refused, saying which node; a
// peer that cannot be reached the same for reads; a database out of
// reach refuses. A peer of an earlier version gets the request passed on
// whole; when that cannot be, a read is answered here and a change is
// refused, never made here. A resume of a sandbox paused on disk on a
// draining node goes where placement puts it, with the node to take it
// from. A volume's record is read and deleted, and a template's build
// started, on its node the same way.
func TestClusteredCallsGoToTheHoldingNode(t *testing.T) {
	tooOld := fmt.Errorf("node node-b: %w", forward.ErrPeerTooOld)
	unreachable := &cube.Error{Kind: cube.Unavailable, Message: "the node holding this could not be reached", Err: forward.ErrUnreachable}
	for _, c := range []struct {
		call, id string
		peerErr  error
		passes   bool
		here, on string
		wantKind cube.Kind
		says     string
		passed   string
	}{
		{call: "get", id: "held", here: "get held"},
		{call: "get", id: "on-b", on: "node-b: get on-b"},
		{call: "pause", id: "on-b", on: "node-b: pause on-b"},
		{call: "get", id: "unknown", here: "get unknown"},
		{call: "pause", id: "on-gone", here: "pause on-gone"},
		{call: "get", id: "on-dead", here: "get on-dead"},
		{call: "pause", id: "on-dead", wantKind: cube.Unavailable, says: "sandbox on-dead is on node node-d, which is not answering"},
		{call: "get", id: "outage", wantKind: cube.Unavailable, says: "state database"},
		{call: "pause", id: "on-b", peerErr: cube.Errorf(cube.Conflict, "already paused"), on: "node-b: pause on-b", wantKind: cube.Conflict, says: "already paused"},
		{call: "get", id: "on-b", peerErr: unreachable, on: "node-b: get on-b", here: "get on-b"},
		{call: "pause", id: "on-b", peerErr: unreachable, on: "node-b: pause on-b", wantKind: cube.Unavailable, says: "could not be reached"},
		{call: "pause", id: "on-b", peerErr: tooOld, passes: true, on: "node-b: pause on-b", wantKind: cube.Unavailable, passed: "node-b from "},
		{call: "pause", id: "on-b", peerErr: tooOld, on: "node-b: pause on-b", wantKind: cube.Unavailable, says: "earlier version"},
		{call: "get", id: "on-b", peerErr: tooOld, on: "node-b: get on-b", here: "get on-b"},
		{call: "connect", id: "on-b", on: "node-b: connect on-b from "},
		{call: "connect", id: "moving", on: "node-b: connect moving from node-c"},
		{call: "connect", id: "moving-here", here: "connect moving-here from node-c"},
		{call: "build", id: "tpl-on-b", on: "node-b: build tpl-on-b"},
		{call: "build", id: "tpl-here", here: "build tpl-here"},
		{call: "get volume", id: "vol-on-b", on: "node-b: get vol-on-b"},
		{call: "delete volume", id: "vol-on-b", on: "node-b: delete vol-on-b"},
		{call: "delete volume", id: "vol-here", here: "delete vol-here"},
		{call: "get volume", id: "vol-on-dead", here: "get vol-on-dead"},
		{call: "delete volume", id: "vol-on-dead", wantKind: cube.Unavailable, says: "volume vol-on-dead is on node node-d, which is not answering"},
		{call: "delete volume", id: "vol-on-b", peerErr: tooOld, passes: true, on: "node-b: delete vol-on-b", wantKind: cube.Unavailable, passed: "node-b from "},
		{call: "connect", id: "moving", peerErr: tooOld, passes: true, on: "node-b: connect moving from node-c", wantKind: cube.Unavailable, passed: "node-b from node-c"},
	} {
		made := &calls{}
		places := &placing{}
		passed := ""
		cs := &clustered{local: hereCalls{c: made}, placer: places, peers: peerCalls{c: made, err: c.peerErr},
			where: sandboxesOf{},
			passOn: func(_ context.Context, node, from string) bool {
				if c.passes {
					passed = node + " from " + from
				}
				return c.passes
			}}
		var err error
		switch c.call {
		case "get":
			_, err = cs.GetSandbox(context.Background(), c.id)
		case "pause":
			err = cs.PauseSandbox(context.Background(), c.id, true)
		case "connect":
			_, _, err = cs.ConnectSandbox(context.Background(), c.id, cube.ConnectRequest{})
		case "build":
			err = cs.StartBuild(context.Background(), "t1", c.id, "b1", cube.BuildSpec{})
		case "get volume":
			_, err = cs.GetVolume(context.Background(), c.id)
		case "delete volume":
			err = cs.DeleteVolume(context.Background(), c.id)
		}
		name := fmt.Sprintf("%s %s (peer %v)", c.call, c.id, c.peerErr)
		if cube.KindOf(err) != c.wantKind || (c.says != "" && !strings.Contains(fmt.Sprint(err), c.says)) {
			t.Errorf("%s: %v, want kind %v saying %q", name, err, c.wantKind, c.says)
		}
		if c.passed != "" && !errors.Is(err, forward.ErrPassedOn) {
			t.Errorf("%s: %v, want the request passed on", name, err)
		}
		if passed != c.passed {
			t.Errorf("%s: passed on to %q, want %q", name, passed, c.passed)
		}
		if got := strings.Join(made.here, ","); got != c.here {
			t.Errorf("%s: made here %q, want %q", name, got, c.here)
		}
		if got := strings.Join(made.on, ","); got != c.on {
			t.Errorf("%s: made on peers %q, want %q", name, got, c.on)
		}
		if places.held != 0 {
			t.Errorf("%s: %d rooms still held", name, places.held)
		}
	}
}

// avoiding places on the first of its nodes the create does not avoid.
type avoiding struct {
	nodes      []string
	held, seen int
}

func (*avoiding) Self() string { return "node-a" }
func (p *avoiding) Place(_ context.Context, want cluster.Want) (string, func(), error) {
	p.seen++
	for _, n := range p.nodes {
		if !slices.Contains(want.Avoid, n) {
			p.held++
			return n, func() { p.held-- }, nil
		}
	}
	return "", nil, cube.Errorf(cube.Capacity, "every node is full")
}

// unreachablePeers cannot be connected to for the nodes in down.
type unreachablePeers struct {
	peerCreates
	down []string
}

func (u unreachablePeers) CreateSandbox(ctx context.Context, node string, req cube.CreateRequest) (*cube.Sandbox, error) {
	u.c.on = append(u.c.on, node)
	if slices.Contains(u.down, node) {
		return nil, &cube.Error{Kind: cube.Unavailable, Message: "could not be reached", Err: forward.ErrNotDelivered}
	}
	return &cube.Sandbox{ID: "there", Node: node}, nil
}

// A create whose peer cannot be connected to (a dying node not yet
// declared so) is placed again without it, at most three placements in
// all; a peer that took the request and then failed is not retried.
func TestClusteredCreateSkipsAPeerItCannotReach(t *testing.T) {
	for _, c := range []struct {
		nodes, down []string
		want        string
		tried       string
	}{
		{nodes: []string{"node-b", "node-c"}, down: []string{"node-b"}, want: "node-c", tried: "[node-b node-c]"},
		{nodes: []string{"node-b", "node-c", "node-d", "node-e"}, down: []string{"node-b", "node-c", "node-d"}, tried: "[node-b node-c node-d]"},
		{nodes: []string{"node-b"}, down: []string{"node-b"}, tried: "[node-b]"},
	} {
		made, places := &madeAt{}, &avoiding{nodes: c.nodes}
		cs := &clustered{local: hereCreates{c: made}, placer: places, peers: unreachablePeers{peerCreates{c: made}, c.down},
			want: func(context.Context, cube.CreateRequest) (cluster.Want, error) { return cluster.Want{}, nil }}
		sb, err := cs.CreateSandbox(context.Background(), cube.CreateRequest{Template: "t"})
		switch {
		case c.want != "" && (err != nil || sb.Node != c.want):
			t.Errorf("%v down: %+v, %v; want made on %s", c.down, sb, err, c.want)
		case c.want == "" && (cube.KindOf(err) != cube.Unavailable || !errors.Is(err, forward.ErrUnreachable)):
			t.Errorf("%v down: %v; want the peer's unreachable error", c.down, err)
		}
		if got := fmt.Sprint(made.on); got != c.tried || places.held != 0 || len(made.here) != 0 {
			t.Errorf("%v down: tried %s (want %s), %d rooms held, made here %v", c.down, got, c.tried, places.held, made.here)
		}
	}
	// A peer that failed after taking the request is not asked again.
	made, places := &madeAt{}, &avoiding{nodes: []string{"node-b", "node-c"}}
	cs := &clustered{local: hereCreates{c: made}, placer: places, peers: peerCreates{c: made, err: &cube.Error{Kind: cube.Unavailable, Message: "reset", Err: forward.ErrUnreachable}},
		want: func(context.Context, cube.CreateRequest) (cluster.Want, error) { return cluster.Want{}, nil }}
	if _, err := cs.CreateSandbox(context.Background(), cube.CreateRequest{Template: "t"}); !errors.Is(err, forward.ErrUnreachable) || places.seen != 1 {
		t.Errorf("delivered, then unreachable: %v after %d placements; want one placement and its error", err, places.seen)
	}
}
