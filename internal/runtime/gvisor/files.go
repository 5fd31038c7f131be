package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"cube/internal/runtime"
)

// A files image is the tar of a sandbox's writable layer that `runsc tar
// rootfs-upper` writes; a boot whose spec names a tar in the annotation
// annUpperTar starts with it as that layer.
//
// The annotation is a path, and a checkpoint keeps the spec it was taken
// with, which runsc insists a restore repeats exactly and opens again.
// Files images are gone soon after their boot, so no boot names one:
// every boot with files names filesLink instead, a symlink pointed at the
// image only while runsc run opens it (under filesMu) and at an empty tar
// otherwise. A restore takes its files from the checkpoint, so whatever
// filesLink holds then does not matter, only that it opens.
const (
	filesLink = "files-upper.tar"
	emptyTar  = "empty-upper.tar"
)

// SaveFiles writes the root overlay's writable layer as a tar: gVisor
// serialises its in-memory upper filesystem, whiteouts and all, in the
// form a boot with Spec.Files reads back.
func (s *sandbox) SaveFiles(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	_, err := s.r.runsc(ctx, s.id, nil, "tar", "rootfs-upper", "--file", filepath.Join(dir, runtime.FilesImage), s.id)
	return err
}

// bootWithFiles boots spec with spec.Files as its writable layer, named
// through filesLink.
func (r *Runtime) bootWithFiles(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	if _, err := os.Stat(spec.Files); err != nil {
		return nil, fmt.Errorf("files image: %w", err)
	}
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	link := filepath.Join(r.cfg.Bundles, filesLink)
	if err := pointAt(link, spec.Files); err != nil {
		return nil, err
	}
	// runsc run has opened the tar by the time it returns; the link may
	// then stop naming it.
	defer pointAt(link, filepath.Join(r.cfg.Bundles, emptyTar))
	spec.Files = link
	return r.start(ctx, spec, nil, "run", "--detach")
}

// prepareFiles puts the empty tar and filesLink in place, as restores of
// checkpoints taken after a boot with files expect them.
func (r *Runtime) prepareFiles() error {
	empty := filepath.Join(r.cfg.Bundles, emptyTar)
	// A tar with no entries: its end, two zero blocks.
	if err := os.WriteFile(empty, make([]byte, 1024), 0o600); err != nil {
		return err
	}
	return pointAt(filepath.Join(r.cfg.Bundles, filesLink), empty)
}

// pointAt makes link a symlink to target, replacing it atomically.
func pointAt(link, target string) error {
	tmp := link + ".new"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("files image link: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("files image link: %w", err)
	}
	return nil
}
