package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
	"cube/internal/treecopy"
)

// In a cluster, the children of a fork of a sandbox whose node takes no
// new sandboxes start on another node: the sandbox's node checkpoints it
// and offers the image (OfferForkImage), the other node fetches it, with
// the parent's template unless it has it, and starts the children
// (ForkFrom). The image goes once fetched, or after moveTimeout.

// OfferForkImage checkpoints a running sandbox, which keeps running, for
// children another node is to start, and names the image for it to fetch.
func (n *Node) OfferForkImage(ctx context.Context, sandboxID string) (string, error) {
	_, dir, err := n.checkpointForFork(ctx, sandboxID)
	if err != nil {
		return "", err
	}
	name := filepath.Base(dir)
	n.offered.Store(name, dir)
	time.AfterFunc(moveTimeout, func() { n.DropForkImage(name) })
	return name, nil
}

// ExportForkImage writes an offered fork image under fork/.
func (n *Node) ExportForkImage(ctx context.Context, name string, w io.Writer) error {
	dir, ok := n.offered.Load(name)
	if !ok {
		return cube.Errorf(cube.NotFound, "no fork image %q is offered by node %s", name, n.cfg.NodeID)
	}
	return treecopy.Write(w, treecopy.Tree{Name: "fork", Path: dir.(string)})
}

// DropForkImage removes an offered fork image.
func (n *Node) DropForkImage(name string) {
	if dir, ok := n.offered.LoadAndDelete(name); ok {
		if err := os.RemoveAll(dir.(string)); err != nil {
			n.log.Warn("fork: remove checkpoint image", "image", name, "err", err)
		}
	}
}

// ForkFrom starts req.Count children of a sandbox of node from, here,
// from the fork image that node offers as image.
func (n *Node) ForkFrom(ctx context.Context, from, parentID, image string, req cube.ForkRequest) ([]cube.ForkResult, error) {
	if n.cfg.FetchForkImage == nil {
		return nil, cube.Errorf(cube.Unavailable, "this node cannot start children of another node's sandbox")
	}
	parent, err := n.store.Sandboxes().Get(ctx, parentID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(parentID)
	}
	if err != nil {
		return nil, err
	}
	if parent.Node != from || parent.Boot == nil || len(parent.Boot.Mounts) > 0 {
		return nil, cube.Errorf(cube.Conflict, "sandbox %q cannot be forked on node %s: it mounts volumes, or is no longer on node %s", parentID, n.cfg.NodeID, from)
	}
	boot, err := n.copies.localTemplate(ctx, parent.Boot)
	if err != nil {
		return nil, err
	}
	body, err := n.cfg.FetchForkImage(ctx, from, image)
	if err != nil {
		return nil, cube.Errorf(cube.Unavailable, "the fork image of sandbox %q could not be fetched from node %s: %v", parentID, from, err).WithRetryAfter(5 * time.Second)
	}
	defer body.Close()
	if err := os.MkdirAll(filepath.Join(n.cfg.DataDir, "snapshots"), 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(n.cfg.DataDir, "snapshots"), "fork-from-")
	if err != nil {
		return nil, err
	}
	// Children hold their memory once restored: the image goes with the
	// request, and the reconciler removes one a crash left.
	defer os.RemoveAll(tmp)
	if _, err := treecopy.Extract(body, tmp); err != nil {
		return nil, fmt.Errorf("fork image of %s from node %s: %w", parentID, from, err)
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return nil, fmt.Errorf("fork image of %s from node %s: %w", parentID, from, err)
	}
	local := *parent
	b := *boot
	b.Aliases = nil
	local.Boot = &b
	results := n.startChildren(ctx, &local, filepath.Join(tmp, "fork"), req)
	n.event(parentID, "info", "forked into %d sandboxes on node %s", req.Count, n.cfg.NodeID)
	return results, nil
}
