package gvisor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cube/internal/runtime"
)

// A sandbox that shares its image's memory (Config.PrivateMemory unset)
// is checkpointed incrementally: the new image's pages.img holds only the
// pages the sandbox has of its own, and the pages it still shares stay in
// the images it was restored from, its parents. runsc names each image by
// the ID in its pages.id and lists the IDs an image needs in its
// pages.parents.
//
// An image carries its parents with it, hard-linked under parents/<ID>/:
// the file system counts the references, so deleting a template, a
// snapshot or a pause image never takes pages from an image that needs
// them, a crash cannot leave a reference behind, and a copy of the image
// directory (to another node) is complete. A sandbox keeps links to the
// images it maps in its bundle (images/<ID>/) for the same reason: its
// image may be deleted or replaced while it runs, and its next checkpoint
// links from there.
const (
	imageIDFile      = "pages.id"
	imageParentsFile = "pages.parents"
	imagePagesFile   = "pages.img"
	parentsDir       = runtime.ParentsDir
	keptImagesDir    = "images"
	// maxImageChain is the longest chain of images (the image and its
	// parents) a checkpoint may extend: past it the checkpoint is written
	// in full, so a restore never needs more than this many files.
	maxImageChain = 4
)

// imageChain lists the images a restore of image maps, by ID: image
// itself, when runsc gave it an ID (own, else ""), and every parent it
// carries.
func imageChain(image string) (own string, chain map[string]string, err error) {
	chain = map[string]string{}
	if id, err := readImageID(image); err == nil {
		own, chain[id] = id, image
	} else if !os.IsNotExist(err) {
		return "", nil, err
	}
	ents, err := os.ReadDir(filepath.Join(image, parentsDir))
	if os.IsNotExist(err) {
		return own, chain, nil
	}
	if err != nil {
		return "", nil, err
	}
	for _, e := range ents {
		dir := filepath.Join(image, parentsDir, e.Name())
		id, err := readImageID(dir)
		if err != nil {
			return "", nil, fmt.Errorf("parent image %s: %w", dir, err)
		}
		if id != e.Name() {
			return "", nil, fmt.Errorf("parent image %s says it is %s", dir, id)
		}
		chain[id] = dir
	}
	return own, chain, nil
}

// writeImageID names the image just checkpointed into dir, as runsc's
// checkpoint command does for an image a restore may map: a random ID in
// pages.id and, when the image builds on others, their IDs in
// pages.parents. The ID goes last: an image with an ID is complete.
func writeImageID(dir string, parents []string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	if len(parents) > 0 {
		if err := writeNew(filepath.Join(dir, imageParentsFile), strings.Join(parents, "\n")+"\n"); err != nil {
			return err
		}
	}
	return writeNew(filepath.Join(dir, imageIDFile), hex.EncodeToString(b[:])+"\n")
}

// writeNew writes a file that must not exist yet.
func writeNew(name, content string) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	return errors.Join(err, f.Close())
}

func readImageID(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, imageIDFile))
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" || strings.ContainsAny(id, "/.\x00") {
		return "", fmt.Errorf("%s: not an image ID: %q", filepath.Join(dir, imageIDFile), b)
	}
	return id, nil
}

// parentDirs are the directories of the parents in chain (all but own),
// in ID order: what a restore hands runsc as --cow-parent.
func parentDirs(own string, chain map[string]string) []string {
	var dirs []string
	for _, id := range slices.Sorted(maps.Keys(chain)) {
		if id != own {
			dirs = append(dirs, chain[id])
		}
	}
	return dirs
}

// linkImage hard-links the image files of src (an image or a kept copy)
// into dst, which it creates.
func linkImage(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, name := range []string{imagePagesFile, imageIDFile} {
		if err := os.Link(filepath.Join(src, name), filepath.Join(dst, name)); err != nil && !os.IsExist(err) {
			return err
		}
	}
	// The image's hot pages, if it has a list (hot.go): restores from the
	// images that carry it as a parent copy them too.
	if err := os.Link(filepath.Join(src, hotFile), filepath.Join(dst, hotFile)); err != nil && !os.IsExist(err) && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// keepImages links the images of chain, which a restore maps, into the
// bundle dir before the restore opens them, so the sandbox's checkpoints
// can link them into theirs whatever happens to the image meanwhile
// (incremental). An image without an ID, own, is one a runsc without
// one wrote: nothing is kept, and its sandbox is checkpointed in full, as
// it is when keeping fails.
func keepImages(dir, own string, chain map[string]string) error {
	kept := filepath.Join(dir, keptImagesDir)
	if err := os.RemoveAll(kept); err != nil || own == "" {
		return err
	}
	for id, src := range chain {
		if err := linkImage(src, filepath.Join(kept, id)); err != nil {
			os.RemoveAll(kept)
			return fmt.Errorf("keep image %s: %w", src, err)
		}
	}
	return nil
}

// incremental reports whether the sandbox with bundle dir may be
// checkpointed incrementally: keepImages kept its images (it keeps none
// of an image without an ID) and they are fewer than maxImageChain.
func incremental(dir string) bool {
	ents, err := os.ReadDir(filepath.Join(dir, keptImagesDir))
	return err == nil && len(ents) > 0 && len(ents) < maxImageChain
}

// linkParents gives the image a checkpoint just wrote into image the
// parents its pages.parents names, from the sandbox's kept images.
func linkParents(dir, image string) error {
	b, err := os.ReadFile(filepath.Join(image, imageParentsFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(string(b)) {
		src := filepath.Join(dir, keptImagesDir, id)
		if _, err := os.Stat(src); err != nil {
			return errors.Join(fmt.Errorf("the checkpoint needs image %s, which the sandbox does not keep", id), err)
		}
		if err := linkImage(src, filepath.Join(image, parentsDir, id)); err != nil {
			return fmt.Errorf("link parent image %s: %w", id, err)
		}
	}
	return nil
}
