package server

import (
	"context"
	"errors"

	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/forward"
	"cube/internal/node"
)

// clustered is the service of a node of a cluster: the node's own service
// for what it holds, and placement for what is new. A create is placed on
// a node (where its template is, where there is room) and made there,
// here or through the peer client, from the request the API decoded once.
// Requests about what another node holds reach that node before the API
// (forward.Handler), so they come here only when this node holds it.
type clustered struct {
	*service
	// local creates here: the service, in a running server.
	local creator
	// placer picks the node of a create; peers create on another one.
	placer placer
	peers  peerCreator
	// want is what a create needs of its node.
	want func(ctx context.Context, req cube.CreateRequest) (cluster.Want, error)
}

type (
	creator interface {
		CreateSandbox(ctx context.Context, req cube.CreateRequest) (*cube.Sandbox, error)
	}
	placer interface {
		Self() string
		Place(ctx context.Context, want cluster.Want) (node string, release func(), err error)
	}
	peerCreator interface {
		CreateSandbox(ctx context.Context, node string, req cube.CreateRequest) (*cube.Sandbox, error)
	}
)

var (
	_ cube.Backend         = (*clustered)(nil)
	_ cube.Pauser          = (*clustered)(nil)
	_ cube.Snapshotter     = (*clustered)(nil)
	_ cube.NetworkUpdater  = (*clustered)(nil)
	_ cube.Volumes         = (*clustered)(nil)
	_ cube.TemplateBuilder = (*clustered)(nil)
	_ cube.ArchiveImporter = (*clustered)(nil)
	_ cube.StepBuilder     = (*clustered)(nil)
	_ cube.NodeAdmin       = (*clustered)(nil)
	_ cube.Secrets         = (*clustered)(nil)
	_ cube.Usage           = (*clustered)(nil)
)

// newClustered is svc in a cluster whose registry is reg and whose peers
// are called through peers.
func newClustered(svc *service, nd *node.Node, reg *cluster.Registry, peers *forward.Client) *clustered {
	return &clustered{service: svc, local: svc, placer: reg, peers: peers,
		want: func(ctx context.Context, req cube.CreateRequest) (cluster.Want, error) {
			return createWant(ctx, nd, req)
		}}
}

// CreateSandbox makes the sandbox on the node placement picks, holding
// room for it there until it runs. A template or volume that cannot be
// read for placement is left to the local create, which says what is
// wrong with it as a single node would; a database out of reach places
// nothing.
func (c *clustered) CreateSandbox(ctx context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	want, err := c.want(ctx, req)
	if cube.KindOf(err) == cube.Unavailable {
		return nil, err
	}
	if err != nil {
		return c.local.CreateSandbox(ctx, req)
	}
	target, release, err := c.placer.Place(ctx, want)
	if err != nil {
		return nil, err
	}
	defer release()
	if target == c.placer.Self() {
		return c.local.CreateSandbox(ctx, req)
	}
	sb, err := c.peers.CreateSandbox(ctx, target, req)
	if errors.Is(err, forward.ErrPeerTooOld) {
		// A node not yet upgraded takes no typed create: the sandbox runs
		// here, which copies the template from that node if need be.
		return c.local.CreateSandbox(ctx, req)
	}
	return sb, err
}

// createWant is what a create needs of a node: room for its memory, its
// template's files, and the node of any volume it mounts.
func createWant(ctx context.Context, nd *node.Node, req cube.CreateRequest) (cluster.Want, error) {
	t, err := nd.PlacementTemplate(ctx, req.Team, req.Template)
	if err != nil {
		return cluster.Want{}, err
	}
	want := cluster.Want{MemoryMB: max(req.MemoryMB, t.MemoryMB), Holders: t.Holders()}
	// Volumes do not move: a sandbox mounting one runs on its node.
	for _, m := range req.VolumeMounts {
		v, err := nd.VolumeNamed(ctx, req.Team, m.Name)
		if err != nil || v == nil {
			return cluster.Want{}, errors.New("unknown volume")
		}
		if want.Node == "" {
			want.Node = v.Node
		}
	}
	return want, nil
}
