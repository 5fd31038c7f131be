package server

import (
	"context"
	"fmt"
	"testing"

	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/forward"
)

// madeAt records where creates were made: here, or on which peer.
type madeAt struct{ here, on []string }

type hereCreates struct{ c *madeAt }

func (h hereCreates) CreateSandbox(_ context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	h.c.here = append(h.c.here, req.Template)
	return &cube.Sandbox{ID: "here", Node: "node-a"}, nil
}

type peerCreates struct {
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
		cs := &clustered{local: hereCreates{made}, placer: places, peers: peerCreates{made, c.peerErr},
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
