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
	"cube/internal/fault"
	"cube/internal/store"
	"cube/internal/treecopy"
)

// A sandbox paused on disk may resume on another node than the one that
// paused it, when that one takes no new sandboxes (draining, standby):
// the other node asks for it, the first hands over its pause image (and
// the files of the template it boots from, unless the other has them),
// and the other takes the record, which says whose the sandbox is. The
// first node does nothing to the sandbox meanwhile (stateMoving), and
// lets it go once the record names the other node, or takes it back when
// the move failed. A sandbox mounting volumes stays: volumes do not move.

// moveTimeout is how long a node waits to hear how a hand-over went
// before it reads the record to know.
const moveTimeout = 10 * time.Minute

// errNotMovable: the record is not (or no longer) a sandbox paused on
// disk on the node it is asked of.
var errNotMovable = errors.New("not a sandbox paused on disk of that node")

// HandOver writes a sandbox this node holds paused on disk, for another
// node to resume it: its pause image under pause/, and with withTemplate
// the files of its boot template under template/. The sandbox stays this
// node's, and untouchable, until HandedOver.
func (n *Node) HandOver(ctx context.Context, sandboxID string, withTemplate bool, w io.Writer) error {
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return err
	}
	this, err := sb.beginHandOver(rec)
	sb.mu.Unlock()
	if err != nil {
		return err
	}
	time.AfterFunc(moveTimeout, func() { sb.handedOver(context.Background(), this) })
	trees := []treecopy.Tree{{Name: "pause", Path: rec.PauseImage}}
	if withTemplate {
		trees = append(trees,
			treecopy.Tree{Name: "template/rootfs", Path: rec.Boot.Rootfs},
			treecopy.Tree{Name: "template/checkpoint", Path: rec.Boot.Checkpoint},
			treecopy.Tree{Name: "template/envd/cube-envd", Path: filepath.Join(rec.Boot.Envd, "cube-envd")})
	}
	if err := treecopy.Write(w, trees...); err != nil {
		sb.handedOver(context.WithoutCancel(ctx), this)
		return err
	}
	return nil
}

// HandedOver ends a hand-over of the sandbox by what its record says: if
// it names another node, the sandbox is that node's and this one lets go
// of it and its files; else it is paused on disk here again.
func (n *Node) HandedOver(ctx context.Context, sandboxID string) {
	if sb := n.get(sandboxID); sb != nil {
		sb.handedOver(ctx, 0)
	}
}

// beginHandOver marks a sandbox paused on disk as moving, which keeps
// every other operation off it until the hand-over ends, and returns the
// hand-over's number. The caller holds its lock. Moving is not recorded:
// the record stays paused on disk, which is what a crash should find.
func (s *sandbox) beginHandOver(rec *store.Sandbox) (uint64, error) {
	if err := s.requireState("move", statePausedOnDisk); err != nil {
		return 0, err
	}
	if rec.Boot == nil || len(rec.Boot.Mounts) > 0 || rec.PauseImage == "" {
		return 0, cube.Errorf(cube.Conflict, "sandbox %q cannot move: it mounts volumes, which stay on node %s", s.id, s.h.cfg.NodeID)
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.state = stateMoving
	s.handOvers++
	return s.handOvers, nil
}

// handedOver ends hand-over number which of the sandbox (0: the one
// under way). A hand-over's own ends (its write failing, its timeout)
// name it: a receiver that gave up on a first hand-over may have asked
// for a second one since, and the first one's write can fail only then,
// under load; that must not end the second.
func (s *sandbox) handedOver(ctx context.Context, which uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone || !s.state.moving() || which != 0 && which != s.handOvers {
		return
	}
	h := s.h
	rec, err := h.store.Sandboxes().Get(ctx, s.id)
	switch {
	case err == nil && rec.Node != h.cfg.NodeID, errors.Is(err, store.ErrNotFound):
		h.untrack(s)
		if err := os.RemoveAll(h.sandboxDir(s.id)); err != nil {
			h.log.Warn("remove a sandbox handed over", "sandbox", s.id, "err", err)
		}
		h.log.Info("sandbox handed over", "sandbox", s.id, "to", rec.Node)
	case err != nil:
		// The database is out of reach: ask again later.
		time.AfterFunc(moveTimeout, func() { s.handedOver(context.Background(), which) })
	default:
		h.mu.Lock()
		s.state = statePausedOnDisk
		h.mu.Unlock()
	}
}

// adoptMoved takes over a sandbox paused on disk on node from, which is
// asked to hand it over, so that it resumes here; on success the record
// names this node and the sandbox is tracked paused on disk.
func (n *Node) adoptMoved(ctx context.Context, sandboxID, from string) error {
	if n.cfg.FetchSandbox == nil {
		return cube.Errorf(cube.Unavailable, "sandbox %q is on node %s and this node cannot take sandboxes over", sandboxID, from)
	}
	rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return notFound(sandboxID)
	}
	if err != nil {
		return err
	}
	if rec.Node != from || !recordIn(rec, statePausedOnDisk) || rec.PauseImage == "" || rec.Boot == nil {
		return fmt.Errorf("move sandbox %s from node %s: %w", sandboxID, from, errNotMovable)
	}
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	if n.Holds(sandboxID) {
		return nil // taken over by a request just before this one
	}
	// The move must be over well before the node handing over stops
	// waiting and reads the record (moveTimeout).
	ctx, cancel := context.WithTimeout(ctx, moveTimeout/2)
	defer cancel()
	_, haveTemplate := n.copies.heldFiles(rec.Boot)
	body, err := n.cfg.FetchSandbox(ctx, from, sandboxID, !haveTemplate)
	if err != nil {
		return cube.Errorf(cube.Unavailable, "sandbox %q could not be moved from node %s: %v", sandboxID, from, err).WithRetryAfter(5 * time.Second)
	}
	// It handed the sandbox over: whatever happens now, it is told to
	// look at the record.
	defer n.cfg.SandboxMoved(context.WithoutCancel(ctx), from, sandboxID)
	defer body.Close()
	if err := os.MkdirAll(n.sandboxDir(sandboxID), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(n.sandboxDir(sandboxID), ".moving.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := treecopy.Extract(body, tmp); err != nil {
		return fmt.Errorf("move sandbox %s from node %s: %w", sandboxID, from, err)
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return fmt.Errorf("move sandbox %s from node %s: %w", sandboxID, from, err)
	}
	fault.Point(fault.SandboxMoveAfterExtract)
	if !haveTemplate {
		if err := n.copies.keepCopy(ctx, filepath.Join(tmp, "template"), rec.Boot); err != nil {
			return fmt.Errorf("move sandbox %s from node %s: its template: %w", sandboxID, from, err)
		}
	}
	boot, ok := n.copies.heldFiles(rec.Boot)
	if !ok {
		return fmt.Errorf("move sandbox %s from node %s: its template's files are not here", sandboxID, from)
	}
	image := filepath.Join(n.sandboxDir(sandboxID), "pause")
	if err := os.RemoveAll(image); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "pause"), image); err != nil {
		return err
	}
	if rec.PauseChecksum != "" && !imageIntact(image, rec.PauseChecksum) {
		os.RemoveAll(image)
		return cube.Errorf(cube.Damaged, "the pause image of sandbox %q arrived from node %s damaged; it stays there", sandboxID, from)
	}
	if err := syncFS(image); err != nil {
		return err
	}
	fault.Point(fault.SandboxMoveAfterRename)
	err = n.store.Sandboxes().Update(ctx, sandboxID, func(r *store.Sandbox) error {
		if r.Node != from || !recordIn(r, statePausedOnDisk) || r.PauseImage != rec.PauseImage {
			return errNotMovable
		}
		r.Node, r.PauseImage = n.cfg.NodeID, image
		b := *boot
		b.Aliases = nil
		r.Boot = &b
		return nil
	})
	if err != nil {
		os.RemoveAll(image)
		return fmt.Errorf("move sandbox %s from node %s: %w", sandboxID, from, err)
	}
	fault.Point(fault.SandboxMoveAfterRecord)
	n.trackOnDisk(sandboxID)
	n.event(sandboxID, "info", "moved from node %s, paused on disk", from)
	return nil
}
