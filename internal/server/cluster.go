package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/forward"
	"cube/internal/node"
	"cube/internal/proxy"
	"cube/internal/store"
)

// clusterHandler puts the forwarding between nodes in front of local when
// the store is shared (a cluster on PostgreSQL). A single node has nothing
// to forward and no placement to pay for.
func clusterHandler(o Options, st *store.Store, nd *node.Node, reg *cluster.Registry, px *proxy.Proxy, local http.Handler, log *slog.Logger) http.Handler {
	if o.Store == "" {
		return local
	}
	return forward.New(forward.Config{
		Peers: reg, Secret: []byte(o.ClusterSecret), Local: local, Logger: log,
		SandboxOf: func(r *http.Request) (string, bool) {
			sid, _, ok := px.Match(r)
			return sid, ok
		},
		Runs: nd.Holds,
		SandboxNode: func(ctx context.Context, id string) (string, error) {
			rec, err := st.Sandboxes().Get(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			return rec.Node, nil
		},
		TemplateNode: func(ctx context.Context, id string) (string, error) {
			return templateNode(ctx, nd, id)
		},
		VolumeNode: func(ctx context.Context, id string) (string, error) {
			rec, err := st.Volumes().Get(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			return rec.Node, nil
		},
		Want: func(ctx context.Context, body []byte) (cluster.Want, error) {
			return createWant(ctx, nd, body)
		},
	})
}

// templateNode names the node holding a template's files: "" for a
// template that does not exist (the local API says so).
func templateNode(ctx context.Context, nd *node.Node, idOrAlias string) (string, error) {
	t, err := nd.Template(ctx, idOrAlias)
	if cube.KindOf(err) == cube.NotFound {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return t.Node, nil
}

// createWant reads what a create (E2B's NewSandbox body) needs of a node.
func createWant(ctx context.Context, nd *node.Node, body []byte) (cluster.Want, error) {
	var req struct {
		TemplateID   string `json:"templateID"`
		MemoryMB     int    `json:"memoryMB"`
		VolumeMounts []struct {
			Name string `json:"name"`
		} `json:"volumeMounts"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return cluster.Want{}, err
	}
	t, err := nd.Template(ctx, req.TemplateID)
	if err != nil {
		return cluster.Want{}, err
	}
	want := cluster.Want{Node: t.Node, MemoryMB: max(req.MemoryMB, t.MemoryMB)}
	for _, m := range req.VolumeMounts {
		v, err := nd.VolumeNamed(ctx, m.Name)
		if err != nil || v == nil {
			return cluster.Want{}, errors.New("unknown volume")
		}
		if want.Node == "" {
			want.Node = v.Node
		}
	}
	return want, nil
}
