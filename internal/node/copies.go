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
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/store"
	"cube/internal/treecopy"
)

// In a cluster a template's files (rootfs, checkpoint, agent) are on the
// node that built it. Another node that is to run a sandbox of it first
// copies them, once, from a node that has them (the builder, else a node
// that copied them): the copy lands beneath <data-dir>/copies, named by
// the template and its build's checksum, is checked against that
// checksum and, file by file, against the manifest the checksum covers
// (manifest.go), and the node's name is added to the template's Copies,
// so placement prefers it next time. A copy goes when its template has gone
// or was rebuilt and no sandbox of this node boots from it.

// templateCopies are this node's copies of other nodes' templates.
type templateCopies struct {
	h *host
	// mu makes copies one at a time; a pull under way is a hidden
	// directory that the removal of stale copies must not take.
	mu sync.Mutex
}

// copiesDir holds this node's copies of other nodes' templates.
func (tc *templateCopies) copiesDir() string { return filepath.Join(tc.h.cfg.DataDir, "copies") }

// copyDir is where this node keeps its copy of tpl's current build.
func (tc *templateCopies) copyDir(tpl *store.Template) string {
	sum := tpl.Checksum
	if len(sum) > 16 {
		sum = sum[:16]
	}
	return filepath.Join(tc.copiesDir(), tpl.ID+"."+sum)
}

// copyMarker is written into a copy once it is whole and verified.
const copyMarker = "complete"

// localTemplate returns tpl with its files' paths on this host, copying
// them here first when this node has none. A template this node holds is
// returned as it is.
func (tc *templateCopies) localTemplate(ctx context.Context, tpl *store.Template) (*store.Template, error) {
	if local, ok := tc.heldFiles(tpl); ok {
		return local, nil
	}
	if err := tc.pullTemplate(ctx, tpl); err != nil {
		return nil, err
	}
	local, _ := tc.heldFiles(tpl)
	return local, nil
}

// heldFiles returns tpl with the paths of its files on this host, and
// whether this node has them: it built the template, or holds a whole
// copy of its current build.
func (tc *templateCopies) heldFiles(tpl *store.Template) (*store.Template, bool) {
	if tpl.HeldBy(tc.h.cfg.NodeID) {
		return tpl, true
	}
	dir := tc.copyDir(tpl)
	b, err := os.ReadFile(filepath.Join(dir, copyMarker))
	if err != nil || strings.TrimSpace(string(b)) != tpl.Checksum {
		return nil, false
	}
	local := *tpl
	local.Rootfs = filepath.Join(dir, "rootfs")
	local.Checkpoint = filepath.Join(dir, "checkpoint")
	local.Envd = filepath.Join(tc.h.cfg.DataDir, "envd", filepath.Base(tpl.Envd))
	if _, err := os.Stat(filepath.Join(local.Envd, "cube-envd")); err != nil {
		return nil, false
	}
	return &local, true
}

// pullTemplate copies tpl's current build from a node that has it: its
// builder first, then the nodes that copied it. Pulls run one at a time,
// so two creates of one template copy it once.
func (tc *templateCopies) pullTemplate(ctx context.Context, tpl *store.Template) error {
	if tc.h.cfg.FetchTemplate == nil {
		return cube.Errorf(cube.Unavailable, "template %s is held by node %s and this node cannot copy templates", tpl.ID, tpl.Node)
	}
	if tpl.Checksum == "" {
		return cube.Errorf(cube.Unavailable, "template %s on node %s has no checksum to verify a copy by: create the sandbox through node %s", tpl.ID, tpl.Node, tpl.Node)
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if _, ok := tc.heldFiles(tpl); ok {
		return nil
	}
	var errs []error
	for _, src := range tpl.Holders() {
		if src == tc.h.cfg.NodeID {
			continue
		}
		err := tc.pullFrom(ctx, tpl, src)
		if err == nil {
			return nil
		}
		tc.h.log.Warn("copy a template", "template", tpl.ID, "from", src, "err", err)
		errs = append(errs, fmt.Errorf("from node %s: %w", src, err))
		if ctx.Err() != nil {
			break
		}
	}
	return cube.Errorf(cube.Unavailable, "template %s could not be copied to node %s: %v", tpl.ID, tc.h.cfg.NodeID, errors.Join(errs...)).WithRetryAfter(5 * time.Second)
}

// pullFrom copies tpl's files from node src into this node's copies.
func (tc *templateCopies) pullFrom(ctx context.Context, tpl *store.Template, src string) error {
	start := time.Now()
	if err := os.MkdirAll(tc.copiesDir(), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(tc.copiesDir(), "."+tpl.ID+".")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	body, err := tc.h.cfg.FetchTemplate(ctx, src, tpl.ID)
	if err != nil {
		return err
	}
	defer body.Close()
	bytes, err := treecopy.Extract(body, tmp)
	if err == nil {
		// To the end of the stream, where its digest is checked.
		_, err = io.Copy(io.Discard, body)
	}
	if err != nil {
		return err
	}
	fault.Point(fault.TemplateCopyAfterExtract)
	if err := tc.keepCopy(ctx, tmp, tpl); err != nil {
		return err
	}
	tc.h.log.Info("copied template", "template", tpl.ID, "from", src, "bytes", bytes, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// keepCopy makes dir, holding rootfs/, checkpoint/ and envd/cube-envd
// as another node sent them, this node's copy of tpl's build: checked
// against its checksum and manifest, synced, moved into place and
// recorded in the template's Copies (when the template still exists).
// A copy that fails a check is left for the caller to remove, and its
// agent is not installed.
func (tc *templateCopies) keepCopy(ctx context.Context, dir string, tpl *store.Template) error {
	if err := tc.verifyCopy(dir, tpl); err != nil {
		return err
	}
	if err := tc.installCopiedAgent(dir, tpl); err != nil {
		return err
	}
	if err := syncFS(dir); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, copyMarker), []byte(tpl.Checksum+"\n"), 0o600); err != nil {
		return err
	}
	dst := tc.copyDir(tpl)
	if err := os.MkdirAll(tc.copiesDir(), 0o700); err != nil {
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.Rename(dir, dst); err != nil {
		return err
	}
	if err := fsyncPath(tc.copiesDir()); err != nil {
		return err
	}
	fault.Point(fault.TemplateCopyAfterRename)
	err := tc.h.store.Templates().Update(ctx, tpl.ID, func(t *store.Template) error {
		if t.Checksum == tpl.Checksum && !slices.Contains(t.Copies, tc.h.cfg.NodeID) {
			t.Copies = append(t.Copies, tc.h.cfg.NodeID)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil // a sandbox's boot template, deleted since
	}
	if err == nil {
		fault.Point(fault.TemplateCopyAfterRecord)
	}
	return err
}

// verifyCopy checks dir, a copy of tpl's files as another node sent
// them, against what tpl's builder recorded: the checkpoint against the
// checksum, and every file against the manifest the checksum covers. A
// template built before manifests has only its checkpoint checked; its
// rootfs and agent are what the sender's digest says they are.
func (tc *templateCopies) verifyCopy(dir string, tpl *store.Template) error {
	checkpoint := filepath.Join(dir, treeCheckpoint)
	sum, err := imageChecksum(checkpoint)
	if err != nil {
		return fmt.Errorf("the copy's checkpoint cannot be checked: %w", err)
	}
	if tpl.Checksum != "" && sum != tpl.Checksum {
		return fmt.Errorf("the copy's checkpoint does not match the template's checksum")
	}
	m, err := readManifest(checkpoint)
	if err != nil {
		return fmt.Errorf("the copy's manifest: %w", err)
	}
	if m == nil {
		tc.h.log.Warn("template copy unverified by manifest: the template was built before manifests, so its rootfs and agent are checked only against the sending node's digest; rebuild it to have them checked",
			"template", tpl.ID)
		return nil
	}
	return verifyManifest(dir, m)
}

// installCopiedAgent puts the agent a copied checkpoint was taken with in
// this node's envd directory, named as the template names it (by its
// hash), unless this node has it already.
func (tc *templateCopies) installCopiedAgent(tmp string, tpl *store.Template) error {
	dst := filepath.Join(tc.h.cfg.DataDir, "envd", filepath.Base(tpl.Envd))
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

// ExportTemplate writes the files of a ready template this node has (it
// built it or holds a copy), as the archive pullFrom reads: rootfs/,
// checkpoint/ and envd/cube-envd. It fails before writing anything when
// this node has no such template.
func (n *Node) ExportTemplate(ctx context.Context, templateID string, w io.Writer) error {
	tpl, err := n.store.Templates().Get(ctx, templateID)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Errorf(cube.NotFound, "template %s not found", templateID)
	}
	if err != nil {
		return err
	}
	local, ok := n.copies.heldFiles(tpl)
	if !ok || tpl.Status != store.TemplateReady {
		return cube.Errorf(cube.Conflict, "node %s has no ready copy of template %s", n.cfg.NodeID, templateID)
	}
	return treecopy.Write(w, templateTrees(local.Rootfs, local.Checkpoint, local.Envd)...)
}

// dropStaleCopies removes the copies of templates that are gone or were
// rebuilt since, unless a sandbox of this node boots from them, and the
// leftovers of pulls cut short.
func (tc *templateCopies) dropStaleCopies(ctx context.Context) error {
	tc.mu.Lock() // a pull under way is a hidden directory here
	defer tc.mu.Unlock()
	entries, err := os.ReadDir(tc.copiesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	recs, err := tc.h.ownSandboxes(ctx)
	if err != nil {
		return err
	}
	for _, e := range entries {
		dir := filepath.Join(tc.copiesDir(), e.Name())
		if strings.HasPrefix(e.Name(), ".") {
			os.RemoveAll(dir)
			continue
		}
		id := e.Name()
		if i := strings.LastIndexByte(id, '.'); i > 0 {
			id = id[:i] // <template>.<checksum>
		}
		tpl, err := tc.h.store.Templates().Get(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil && tc.copyDir(tpl) == dir {
			continue
		}
		if slices.ContainsFunc(recs, func(r *store.Sandbox) bool {
			return r.Boot != nil && strings.HasPrefix(r.Boot.Rootfs, dir+string(filepath.Separator))
		}) {
			continue
		}
		tc.h.log.Info("removing the copy of a template that is gone or rebuilt", "copy", e.Name())
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}
