package server

import (
	"context"
	"errors"
	"time"

	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/forward"
	"cube/internal/node"
	"cube/internal/store"
)

// clustered is the service of a node of a cluster, and where a request
// goes in a cluster is decided here, once the API has decoded it:
//
//   - A create is placed on a node (where its template is, where there is
//     room) and made there: here, or through the peer client.
//   - A call on one sandbox (read, kill, timeout, connect or resume,
//     pause, network, metrics, logs, snapshot, fork, rollback) goes to the
//     node its record names: this node's own service, or that node's
//     through the peer client (forward.Client, answered by the peer's
//     forward.ServeSandboxes over its own service). A node that stopped
//     heartbeating, or cannot be reached, has its sandboxes read here
//     from the store (shown lost) and their changes refused.
//   - A volume's record is read, and the volume deleted, on the node
//     holding its files, the same way; so is a call on one template (read,
//     delete, make public, tags, start and follow a build) on the node
//     holding it.
//   - A resume of a sandbox paused on disk on a node that takes no new
//     sandboxes goes to a node placement picks, which takes it over
//     (cube.ConnectRequest.MoveFrom).
//   - A node of an earlier version takes no typed calls: the request is
//     passed to it whole (forward.PassOn), as it answered requests before.
//
// Everything else is the node's own service: lists and counts read the
// store every node shares. Sandbox traffic, signed file URLs, a volume's
// content and a template's build files (upload links and uploads) that
// another node holds reach that node before the API (forward.Handler).
type clustered struct {
	*service
	// local is this node's own service: the embedded one, in a running
	// server.
	local forward.Local
	// placer picks the node of a create or a move; peers are called on
	// the node picked, or the node holding what a call is about.
	placer placer
	peers  peerService
	// want is what a create needs of its node.
	want func(ctx context.Context, req cube.CreateRequest) (cluster.Want, error)
	// where finds the node of a sandbox, template or volume.
	where finder
	// passOn passes the request a call serves to a node of an earlier
	// version (forward.PassOn), reporting whether it will.
	passOn func(ctx context.Context, node, moveFrom string) bool
}

type (
	placer interface {
		Self() string
		Place(ctx context.Context, want cluster.Want) (node string, release func(), err error)
	}
	peerCreator interface {
		CreateSandbox(ctx context.Context, node string, req cube.CreateRequest) (*cube.Sandbox, error)
	}
	// peerService is the peer client's typed calls (forward.Client).
	peerService interface {
		peerCreator
		GetSandbox(ctx context.Context, node, id string) (*cube.Sandbox, error)
		KillSandbox(ctx context.Context, node, id string) error
		SetTimeout(ctx context.Context, node, id string, timeout time.Duration, extendOnly bool) error
		ConnectSandbox(ctx context.Context, node, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error)
		PauseSandbox(ctx context.Context, node, id string, keepMemory bool) error
		UpdateNetwork(ctx context.Context, node, id string, n cube.Network) error
		SandboxMetrics(ctx context.Context, node, id string, start, end time.Time) ([]cube.Metric, error)
		SandboxLogs(ctx context.Context, node, id string) ([]cube.LogEntry, error)
		CreateSnapshot(ctx context.Context, node, id, name string) (*cube.Snapshot, error)
		ForkSandbox(ctx context.Context, node, id string, req cube.ForkRequest) ([]cube.ForkResult, error)
		RollbackSandbox(ctx context.Context, node, id, snapshotID string) (*cube.Rollback, error)
		GetVolume(ctx context.Context, node, id string) (*cube.Volume, error)
		DeleteVolume(ctx context.Context, node, id string) error
		GetTemplate(ctx context.Context, node, team, idOrAlias string) (*cube.Template, error)
		DeleteTemplate(ctx context.Context, node, team, idOrAlias string) error
		StartBuild(ctx context.Context, node, team, templateID, buildID string, spec cube.BuildSpec) error
		BuildStatus(ctx context.Context, node, team, templateID, buildID string, logsOffset int) (*cube.BuildStatus, error)
		BuildLogs(ctx context.Context, node, team, templateID, buildID string, q cube.BuildLogQuery) ([]cube.BuildLogEntry, error)
		TemplateTags(ctx context.Context, node, team, idOrName string) ([]cube.TemplateTag, error)
		SetPublic(ctx context.Context, node, team, idOrName string, public bool) ([]string, error)
	}
	// finder finds where a sandbox, template or volume is.
	finder interface {
		// Holds says whether this node runs a sandbox, without a
		// database read.
		Holds(id string) bool
		// NodeOf and VolumeNodeOf are the node a sandbox's or volume's
		// record names: "" for none, or no record.
		NodeOf(ctx context.Context, id string) (string, error)
		VolumeNodeOf(ctx context.Context, id string) (string, error)
		// TemplateNodeOf is the node holding a template (by ID or alias):
		// "" for none, or no such template.
		TemplateNodeOf(ctx context.Context, idOrAlias string) (string, error)
		// Peer says whether a node heartbeats (cluster.ErrNoNode: there is
		// no such node).
		Peer(ctx context.Context, node string) (addr string, alive bool, err error)
		// Movable says whether a resume should take the sandbox to another
		// node, and if so its node and what placing it needs.
		Movable(ctx context.Context, id string) (from string, want cluster.Want, ok bool)
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
	_ peerService          = (*forward.Client)(nil)
)

// newClustered is svc in a cluster whose registry is reg and whose peers
// are called through peers.
func newClustered(svc *service, nd *node.Node, st *store.Store, reg *cluster.Registry, peers *forward.Client) *clustered {
	return &clustered{service: svc, local: svc, placer: reg, peers: peers,
		want: func(ctx context.Context, req cube.CreateRequest) (cluster.Want, error) {
			return createWant(ctx, nd, req)
		},
		where:  storeFinder{nd: nd, st: st, reg: reg},
		passOn: forward.PassOn,
	}
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
	// A peer that cannot be connected to (it is dying, and its heartbeat
	// does not say so yet) did nothing: the create is placed again
	// without it, twice at most.
	var unreached error
	for tries := 0; ; tries++ {
		target, release, err := c.placer.Place(ctx, want)
		if err != nil {
			if unreached != nil {
				return nil, unreached
			}
			return nil, err
		}
		if target == c.placer.Self() {
			defer release()
			return c.local.CreateSandbox(ctx, req)
		}
		sb, err := c.peers.CreateSandbox(ctx, target, req)
		switch {
		case errors.Is(err, forward.ErrPeerTooOld):
			// A node not yet upgraded takes no typed create: the sandbox
			// runs here, which copies the template from that node if
			// need be.
			defer release()
			return c.local.CreateSandbox(ctx, req)
		case errors.Is(err, forward.ErrNotDelivered) && tries < 2:
			release()
			unreached = err
			want.Avoid = append(want.Avoid, target)
			continue
		}
		release()
		return sb, err
	}
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

// Calls on one sandbox, template or volume.

// access is what a call does to what it is about: reads are answered here
// from the store when the node holding it cannot answer, changes are
// refused.
type access bool

const (
	read   access = true
	change access = false
)

// sandboxCall runs a call on sandbox id where the sandbox is: here (local)
// or on its node (remote).
func sandboxCall[T any](c *clustered, ctx context.Context, id string, a access, local func() (T, error), remote func(ctx context.Context, node string) (T, error)) (T, error) {
	return heldCall(c, ctx, "sandbox "+id, a, func(ctx context.Context) (string, error) {
		if c.where.Holds(id) {
			return "", nil
		}
		return c.where.NodeOf(ctx, id)
	}, local, remote)
}

// volumeCall is sandboxCall for a volume's record; its content (files,
// streamed) reaches its node before the API (forward.Handler).
func volumeCall[T any](c *clustered, ctx context.Context, id string, a access, local func() (T, error), remote func(ctx context.Context, node string) (T, error)) (T, error) {
	return heldCall(c, ctx, "volume "+id, a, func(ctx context.Context) (string, error) {
		return c.where.VolumeNodeOf(ctx, id)
	}, local, remote)
}

// templateCall is sandboxCall for a template (by ID or alias); its build
// files (upload links and uploads) reach its node before the API
// (forward.Handler).
func templateCall[T any](c *clustered, ctx context.Context, idOrAlias string, a access, local func() (T, error), remote func(ctx context.Context, node string) (T, error)) (T, error) {
	return heldCall(c, ctx, "template "+idOrAlias, a, func(ctx context.Context) (string, error) {
		return c.where.TemplateNodeOf(ctx, idOrAlias)
	}, local, remote)
}

// heldCall runs a call on what, held by the node holder names: here
// (local) or on that node (remote).
func heldCall[T any](c *clustered, ctx context.Context, what string, a access, holder func(context.Context) (string, error), local func() (T, error), remote func(ctx context.Context, node string) (T, error)) (T, error) {
	var zero T
	node, addr, err := c.nodeOf(ctx, what, a, holder)
	if err != nil {
		return zero, err
	}
	if node == "" {
		return local()
	}
	v, err := remote(forward.AtAddress(ctx, node, addr), node)
	switch {
	case errors.Is(err, forward.ErrPeerTooOld):
		// A node of an earlier version: the request goes to it whole, as
		// it did before typed calls; a read that cannot is answered here,
		// a change is never made elsewhere than on the node holding it.
		if c.passOn(ctx, node, "") {
			return zero, passedOn(node)
		}
		if a == read {
			return local()
		}
		return zero, cube.Errorf(cube.Unavailable, "%s is on node %s, which runs an earlier version that takes this call only as a request sent to it: send it to that node, or try again once it is upgraded", what, node).WithRetryAfter(10 * time.Second)
	case errors.Is(err, forward.ErrUnreachable) && a == read:
		// As for a node that stopped heartbeating: it soon will.
		return local()
	}
	return v, err
}

// passedOn is what a call returns once its request is passed on to node,
// which answers the client instead (forward.PassOn).
func passedOn(node string) error {
	return &cube.Error{Kind: cube.Unavailable, Message: "node " + node + " answers this request", Err: forward.ErrPassedOn}
}

// nodeOf is the node a call on what goes to: "" for this one. What this
// node holds, or whose record names no node (or none there is), or that
// does not exist (the local service says so) is answered here. A node
// that stopped heartbeating is not tried: reads are answered here from
// the store, whose views show its sandboxes lost; changes are refused for
// now.
func (c *clustered) nodeOf(ctx context.Context, what string, a access, holder func(context.Context) (string, error)) (node, addr string, err error) {
	node, err = holder(ctx)
	if err != nil {
		return "", "", outage(err)
	}
	if node == "" || node == c.placer.Self() {
		return "", "", nil
	}
	addr, alive, err := c.where.Peer(ctx, node)
	switch {
	case errors.Is(err, cluster.ErrNoNode):
		return "", "", nil
	case err != nil:
		return "", "", outage(err)
	case !alive && a == read:
		return "", "", nil
	case !alive:
		return "", "", cube.Errorf(cube.Unavailable, "%s is on node %s, which is not answering: it is lost until that node is back (see `cubemastercli node list`)", what, node).WithRetryAfter(10 * time.Second)
	}
	return node, addr, nil
}

// outage is a failure to read the cluster's state: the database is out of
// reach, so the caller should come back.
func outage(err error) error {
	if cube.KindOf(err) != 0 {
		return err
	}
	return cube.Errorf(cube.Unavailable, "the state database is out of reach (%v); try again shortly", err).WithRetryAfter(5 * time.Second)
}

func (c *clustered) GetSandbox(ctx context.Context, id string) (*cube.Sandbox, error) {
	return sandboxCall(c, ctx, id, read,
		func() (*cube.Sandbox, error) { return c.local.GetSandbox(ctx, id) },
		func(ctx context.Context, node string) (*cube.Sandbox, error) {
			return c.peers.GetSandbox(ctx, node, id)
		})
}

func (c *clustered) KillSandbox(ctx context.Context, id string) error {
	_, err := sandboxCall(c, ctx, id, change,
		func() (none, error) { return none{}, c.local.KillSandbox(ctx, id) },
		func(ctx context.Context, node string) (none, error) {
			return none{}, c.peers.KillSandbox(ctx, node, id)
		})
	return err
}

func (c *clustered) SetTimeout(ctx context.Context, id string, timeout time.Duration, extendOnly bool) error {
	_, err := sandboxCall(c, ctx, id, change,
		func() (none, error) { return none{}, c.local.SetTimeout(ctx, id, timeout, extendOnly) },
		func(ctx context.Context, node string) (none, error) {
			return none{}, c.peers.SetTimeout(ctx, node, id, timeout, extendOnly)
		})
	return err
}

func (c *clustered) PauseSandbox(ctx context.Context, id string, keepMemory bool) error {
	_, err := sandboxCall(c, ctx, id, change,
		func() (none, error) { return none{}, c.local.PauseSandbox(ctx, id, keepMemory) },
		func(ctx context.Context, node string) (none, error) {
			return none{}, c.peers.PauseSandbox(ctx, node, id, keepMemory)
		})
	return err
}

func (c *clustered) UpdateNetwork(ctx context.Context, id string, n cube.Network) error {
	_, err := sandboxCall(c, ctx, id, change,
		func() (none, error) { return none{}, c.local.UpdateNetwork(ctx, id, n) },
		func(ctx context.Context, node string) (none, error) {
			return none{}, c.peers.UpdateNetwork(ctx, node, id, n)
		})
	return err
}

func (c *clustered) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]cube.Metric, error) {
	return sandboxCall(c, ctx, id, read,
		func() ([]cube.Metric, error) { return c.local.SandboxMetrics(ctx, id, start, end) },
		func(ctx context.Context, node string) ([]cube.Metric, error) {
			return c.peers.SandboxMetrics(ctx, node, id, start, end)
		})
}

func (c *clustered) SandboxLogs(ctx context.Context, id string) ([]cube.LogEntry, error) {
	return sandboxCall(c, ctx, id, read,
		func() ([]cube.LogEntry, error) { return c.local.SandboxLogs(ctx, id) },
		func(ctx context.Context, node string) ([]cube.LogEntry, error) {
			return c.peers.SandboxLogs(ctx, node, id)
		})
}

func (c *clustered) CreateSnapshot(ctx context.Context, id, name string) (*cube.Snapshot, error) {
	return sandboxCall(c, ctx, id, change,
		func() (*cube.Snapshot, error) { return c.local.CreateSnapshot(ctx, id, name) },
		func(ctx context.Context, node string) (*cube.Snapshot, error) {
			return c.peers.CreateSnapshot(ctx, node, id, name)
		})
}

// ForkSandbox forks the sandbox on its node, which starts the children
// itself, or on another node when it takes no new sandboxes.
func (c *clustered) ForkSandbox(ctx context.Context, id string, req cube.ForkRequest) ([]cube.ForkResult, error) {
	return sandboxCall(c, ctx, id, change,
		func() ([]cube.ForkResult, error) { return c.local.ForkSandbox(ctx, id, req) },
		func(ctx context.Context, node string) ([]cube.ForkResult, error) {
			return c.peers.ForkSandbox(ctx, node, id, req)
		})
}

func (c *clustered) RollbackSandbox(ctx context.Context, id, snapshotID string) (*cube.Rollback, error) {
	return sandboxCall(c, ctx, id, change,
		func() (*cube.Rollback, error) { return c.local.RollbackSandbox(ctx, id, snapshotID) },
		func(ctx context.Context, node string) (*cube.Rollback, error) {
			return c.peers.RollbackSandbox(ctx, node, id, snapshotID)
		})
}

// ConnectSandbox resumes the sandbox where it is, or, when it is paused
// on disk on a node that takes no new sandboxes, on a node placement picks
// (this one or another), which takes it over from its node first. A
// sandbox placement leaves where it is resumes there, as always.
func (c *clustered) ConnectSandbox(ctx context.Context, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	type connected struct {
		sb      *cube.Sandbox
		resumed bool
	}
	local := func(req cube.ConnectRequest) (connected, error) {
		sb, resumed, err := c.local.ConnectSandbox(ctx, id, req)
		return connected{sb, resumed}, err
	}
	remote := func(ctx context.Context, node string, req cube.ConnectRequest) (connected, error) {
		sb, resumed, err := c.peers.ConnectSandbox(ctx, node, id, req)
		return connected{sb, resumed}, err
	}
	if from, want, ok := c.where.Movable(ctx, id); ok && req.MoveFrom == "" {
		target, release, err := c.placer.Place(ctx, want)
		if err == nil {
			defer release()
		}
		if err == nil && target != from {
			req.MoveFrom = from
			if target == c.placer.Self() {
				return c.local.ConnectSandbox(ctx, id, req)
			}
			v, err := remote(ctx, target, req)
			if !errors.Is(err, forward.ErrPeerTooOld) {
				return v.sb, v.resumed, err
			}
			if c.passOn(ctx, target, from) {
				return nil, false, passedOn(target)
			}
			// Resumed where it is, as when placement keeps it there.
			req.MoveFrom = ""
		}
	}
	v, err := sandboxCall(c, ctx, id, change,
		func() (connected, error) { return local(req) },
		func(ctx context.Context, node string) (connected, error) { return remote(ctx, node, req) })
	return v.sb, v.resumed, err
}

// Volumes: a volume's record is read, and the volume deleted, on the node
// holding its files.

func (c *clustered) GetVolume(ctx context.Context, id string) (*cube.Volume, error) {
	return volumeCall(c, ctx, id, read,
		func() (*cube.Volume, error) { return c.local.GetVolume(ctx, id) },
		func(ctx context.Context, node string) (*cube.Volume, error) { return c.peers.GetVolume(ctx, node, id) })
}

func (c *clustered) DeleteVolume(ctx context.Context, id string) error {
	_, err := volumeCall(c, ctx, id, change,
		func() (none, error) { return none{}, c.local.DeleteVolume(ctx, id) },
		func(ctx context.Context, node string) (none, error) {
			return none{}, c.peers.DeleteVolume(ctx, node, id)
		})
	return err
}

// Templates: a template is read and changed, and its builds started and
// followed, on the node holding it, which requested the build and holds
// its files.

func (c *clustered) GetTemplate(ctx context.Context, team, idOrAlias string) (*cube.Template, error) {
	return templateCall(c, ctx, idOrAlias, read,
		func() (*cube.Template, error) { return c.local.GetTemplate(ctx, team, idOrAlias) },
		func(ctx context.Context, node string) (*cube.Template, error) {
			return c.peers.GetTemplate(ctx, node, team, idOrAlias)
		})
}

func (c *clustered) DeleteTemplate(ctx context.Context, team, idOrAlias string) error {
	_, err := templateCall(c, ctx, idOrAlias, change,
		func() (none, error) { return none{}, c.local.DeleteTemplate(ctx, team, idOrAlias) },
		func(ctx context.Context, node string) (none, error) {
			return none{}, c.peers.DeleteTemplate(ctx, node, team, idOrAlias)
		})
	return err
}

func (c *clustered) StartBuild(ctx context.Context, team, templateID, buildID string, spec cube.BuildSpec) error {
	_, err := templateCall(c, ctx, templateID, change,
		func() (none, error) { return none{}, c.local.StartBuild(ctx, team, templateID, buildID, spec) },
		func(ctx context.Context, node string) (none, error) {
			return none{}, c.peers.StartBuild(ctx, node, team, templateID, buildID, spec)
		})
	return err
}

func (c *clustered) BuildStatus(ctx context.Context, team, templateID, buildID string, logsOffset int) (*cube.BuildStatus, error) {
	return templateCall(c, ctx, templateID, read,
		func() (*cube.BuildStatus, error) {
			return c.local.BuildStatus(ctx, team, templateID, buildID, logsOffset)
		},
		func(ctx context.Context, node string) (*cube.BuildStatus, error) {
			return c.peers.BuildStatus(ctx, node, team, templateID, buildID, logsOffset)
		})
}

func (c *clustered) BuildLogs(ctx context.Context, team, templateID, buildID string, q cube.BuildLogQuery) ([]cube.BuildLogEntry, error) {
	return templateCall(c, ctx, templateID, read,
		func() ([]cube.BuildLogEntry, error) { return c.local.BuildLogs(ctx, team, templateID, buildID, q) },
		func(ctx context.Context, node string) ([]cube.BuildLogEntry, error) {
			return c.peers.BuildLogs(ctx, node, team, templateID, buildID, q)
		})
}

func (c *clustered) TemplateTags(ctx context.Context, team, idOrName string) ([]cube.TemplateTag, error) {
	return templateCall(c, ctx, idOrName, read,
		func() ([]cube.TemplateTag, error) { return c.local.TemplateTags(ctx, team, idOrName) },
		func(ctx context.Context, node string) ([]cube.TemplateTag, error) {
			return c.peers.TemplateTags(ctx, node, team, idOrName)
		})
}

func (c *clustered) SetPublic(ctx context.Context, team, idOrName string, public bool) ([]string, error) {
	return templateCall(c, ctx, idOrName, change,
		func() ([]string, error) { return c.local.SetPublic(ctx, team, idOrName, public) },
		func(ctx context.Context, node string) ([]string, error) {
			return c.peers.SetPublic(ctx, node, team, idOrName, public)
		})
}

// none is the result of a call that answers nothing.
type none struct{}

// storeFinder finds sandboxes and volumes through the node, the shared
// store and the cluster's registry.
type storeFinder struct {
	nd  *node.Node
	st  *store.Store
	reg *cluster.Registry
}

func (s storeFinder) Holds(id string) bool { return s.nd.Holds(id) }

func (s storeFinder) NodeOf(ctx context.Context, id string) (string, error) {
	rec, err := s.st.Sandboxes().Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return rec.Node, nil
}

func (s storeFinder) VolumeNodeOf(ctx context.Context, id string) (string, error) {
	rec, err := s.st.Volumes().Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return rec.Node, nil
}

func (s storeFinder) TemplateNodeOf(ctx context.Context, idOrAlias string) (string, error) {
	return templateNode(ctx, s.nd, idOrAlias)
}

func (s storeFinder) Peer(ctx context.Context, node string) (string, bool, error) {
	return s.reg.Peer(ctx, node)
}

// Movable: a sandbox paused on disk without volumes, whose node answers
// but takes no new sandboxes (draining, standby), resumes elsewhere: where
// its template is, or wherever there is room.
func (s storeFinder) Movable(ctx context.Context, id string) (string, cluster.Want, bool) {
	rec, err := s.st.Sandboxes().Get(ctx, id)
	if err != nil || !rec.PausedOnDisk() || rec.PauseImage == "" ||
		rec.Boot == nil || len(rec.Boot.Mounts) > 0 || rec.Node == "" {
		return "", cluster.Want{}, false
	}
	n, err := s.reg.GetNode(ctx, rec.Node)
	if err != nil || n.Status == cube.NodeReady || n.Status == cube.NodeUnhealthy {
		return "", cluster.Want{}, false
	}
	return rec.Node, cluster.Want{MemoryMB: rec.MemoryMB, Holders: rec.Boot.Holders()}, true
}
