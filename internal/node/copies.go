package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
	"cube/internal/store"
	"cube/internal/treecopy"
)

// In a cluster a template's files (rootfs, checkpoint, agent) are on the
// node that built it. Another node that is to run a sandbox of it first
// copies them from a node that has them, once: the copy lands beneath
// <data-dir>/copies/<template>, is checked against the template's
// checksum, and the node's name is added to the template's Copies, so
// placement prefers it next time. A copy goes when its template has gone
// and no sandbox of this node boots from it.

// copiesDir holds this node's copies of other nodes' templates.
func (n *Node) copiesDir() string { return filepath.Join(n.cfg.DataDir, "copies") }

// copyMarker is written into a copy once it is whole and verified.
const copyMarker = "complete"

// localTemplate returns tpl with its files' paths on this host, copying
// them here first when this node has none. A template this node holds is
// returned as it is.
func (n *Node) localTemplate(ctx context.Context, tpl *store.Template) (*store.Template, error) {
	if tpl.HeldBy(n.cfg.NodeID) {
		return tpl, nil
	}
	dir := filepath.Join(n.copiesDir(), tpl.ID)
	if !n.copyWhole(dir, tpl) {
		if err := n.pullTemplate(ctx, tpl, dir); err != nil {
			return nil, err
		}
	}
	local := *tpl
	local.Rootfs = filepath.Join(dir, "rootfs")
	local.Checkpoint = filepath.Join(dir, "checkpoint")
	local.Envd = filepath.Join(n.cfg.DataDir, "envd", filepath.Base(tpl.Envd))
	return &local, nil
}

// copyWhole reports whether dir holds a verified copy of tpl's build.
func (n *Node) copyWhole(dir string, tpl *store.Template) bool {
	b, err := os.ReadFile(filepath.Join(dir, copyMarker))
	if err != nil || strings.TrimSpace(string(b)) != tpl.Checksum {
		return false
	}
	_, err = os.Stat(filepath.Join(n.cfg.DataDir, "envd", filepath.Base(tpl.Envd), "cube-envd"))
	return err == nil
}

// pullTemplate copies tpl's files from the node holding them into dir.
// Pulls run one at a time: two creates of one template copy it once.
func (n *Node) pullTemplate(ctx context.Context, tpl *store.Template, dir string) error {
	if n.cfg.FetchTemplate == nil {
		return cube.Errorf(cube.Unavailable, "template %s is held by node %s and this node cannot copy templates", tpl.ID, tpl.Node)
	}
	n.pullMu.Lock()
	defer n.pullMu.Unlock()
	if n.copyWhole(dir, tpl) {
		return nil
	}
	if tpl.Checksum == "" {
		return cube.Errorf(cube.Unavailable, "template %s on node %s has no checksum to verify a copy by: create the sandbox through node %s", tpl.ID, tpl.Node, tpl.Node)
	}
	start := time.Now()
	if err := os.MkdirAll(n.copiesDir(), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(n.copiesDir(), "."+tpl.ID+".")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	body, err := n.cfg.FetchTemplate(ctx, tpl.Node, tpl.ID)
	if err != nil {
		return fmt.Errorf("copy template %s from node %s: %w", tpl.ID, tpl.Node, err)
	}
	bytes, err := treecopy.Extract(body, tmp)
	body.Close()
	if err != nil {
		return fmt.Errorf("copy template %s from node %s: %w", tpl.ID, tpl.Node, err)
	}
	if sum, err := imageChecksum(filepath.Join(tmp, "checkpoint")); err != nil || sum != tpl.Checksum {
		return cube.Errorf(cube.Damaged, "the copy of template %s from node %s does not match its checksum (%v): nothing was kept; try again", tpl.ID, tpl.Node, err)
	}
	if err := n.installCopiedAgent(tmp, tpl); err != nil {
		return err
	}
	if err := syncFS(tmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, copyMarker), []byte(tpl.Checksum+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if err := fsyncPath(n.copiesDir()); err != nil {
		return err
	}
	err = n.store.Templates().Update(ctx, tpl.ID, func(t *store.Template) error {
		if !slices.Contains(t.Copies, n.cfg.NodeID) {
			t.Copies = append(t.Copies, n.cfg.NodeID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	n.log.Info("copied template", "template", tpl.ID, "from", tpl.Node, "bytes", bytes, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// installCopiedAgent puts the agent a copied checkpoint was taken with in
// this node's envd directory, named as the template names it (by its
// hash), unless this node has it already.
func (n *Node) installCopiedAgent(tmp string, tpl *store.Template) error {
	dst := filepath.Join(n.cfg.DataDir, "envd", filepath.Base(tpl.Envd))
	if _, err := os.Stat(filepath.Join(dst, "cube-envd")); err == nil {
		return nil
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "envd", "cube-envd"), filepath.Join(dst, "cube-envd")); err != nil {
		return fmt.Errorf("install the agent of template %s: %w", tpl.ID, err)
	}
	return fsyncPath(dst)
}

// syncFS writes out everything of the filesystem holding p: a copy is
// tens of thousands of files, which one syncfs makes durable at once.
func syncFS(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// ExportTemplate writes the files of a template this node holds, as the
// archive pullTemplate reads: rootfs/, checkpoint/ and envd/cube-envd.
func (n *Node) ExportTemplate(ctx context.Context, templateID string, w io.Writer) error {
	tpl, err := n.store.Templates().Get(ctx, templateID)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Errorf(cube.NotFound, "template %s not found", templateID)
	}
	if err != nil {
		return err
	}
	if !tpl.HeldBy(n.cfg.NodeID) || tpl.Status != store.TemplateReady {
		return cube.Errorf(cube.Conflict, "template %s is not a ready template of node %s", templateID, n.cfg.NodeID)
	}
	return treecopy.Write(w,
		treecopy.Tree{Name: "rootfs", Path: tpl.Rootfs},
		treecopy.Tree{Name: "checkpoint", Path: tpl.Checkpoint},
		treecopy.Tree{Name: "envd/cube-envd", Path: filepath.Join(tpl.Envd, "cube-envd")})
}

// dropStaleCopies removes the copies of templates that no longer exist
// (or were rebuilt) that no sandbox of this node boots from.
func (n *Node) dropStaleCopies(ctx context.Context) error {
	n.pullMu.Lock() // a pull under way is a hidden directory here
	defer n.pullMu.Unlock()
	entries, err := os.ReadDir(n.copiesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	recs, err := n.ownSandboxes(ctx)
	if err != nil {
		return err
	}
	for _, e := range entries {
		dir := filepath.Join(n.copiesDir(), e.Name())
		if strings.HasPrefix(e.Name(), ".") {
			os.RemoveAll(dir) // a copy cut short
			continue
		}
		tpl, err := n.store.Templates().Get(ctx, e.Name())
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil && n.copyWhole(dir, tpl) {
			continue
		}
		if slices.ContainsFunc(recs, func(r *store.Sandbox) bool {
			return r.Boot != nil && strings.HasPrefix(r.Boot.Rootfs, dir+string(filepath.Separator))
		}) {
			continue
		}
		n.log.Info("removing the copy of a template that is gone", "template", e.Name())
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}
