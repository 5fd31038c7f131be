package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/node/nodefake"
)

// A template build restores its new image once, makes the requests a
// create makes, checkpoints that sandbox and hands the checkpoint to the
// runtime to learn the image's hot pages from, before the image is
// published; then nothing of that sandbox or its slot is left.
func TestBuildLearnsHotPages(t *testing.T) {
	type call struct{ image, probe, checkpoint string }
	var calls []call
	n := nodefake.New(t, nodefake.Options{LearnHotPages: func(image, probe string) (int64, error) {
		b, err := os.ReadFile(filepath.Join(probe, "checkpoint.img"))
		calls = append(calls, call{image, probe, string(b)})
		if err != nil {
			return 0, err
		}
		return 4096, os.WriteFile(filepath.Join(image, "pages.hot"), []byte("id x\n0 4096\n"), 0o644)
	}})
	tpl := n.AddTemplate(t, "hot")
	if len(calls) != 1 {
		t.Fatalf("%d calls to learn hot pages, want 1", len(calls))
	}
	c := calls[0]
	if c.image != tpl.Checkpoint+".tmp" {
		t.Errorf("learnt from image %s, want the unpublished %s.tmp", c.image, tpl.Checkpoint)
	}
	if !strings.Contains(c.checkpoint, "restored from \""+c.image+"\"") {
		t.Errorf("the probe is not a checkpoint of a sandbox restored from the new image: %q", c.checkpoint)
	}
	// The list is part of the published image.
	if _, err := os.Stat(filepath.Join(tpl.Checkpoint, "pages.hot")); err != nil {
		t.Errorf("the published template has no hot list: %v", err)
	}
	// ...and of its manifest, or a copy on another node would not check
	// out against it.
	if m, err := os.ReadFile(filepath.Join(tpl.Checkpoint, "image.manifest")); err != nil || !strings.Contains(string(m), "pages.hot") {
		t.Errorf("the template's manifest does not list its hot list (%v):\n%s", err, m)
	}
	if _, err := os.Stat(c.probe); !os.IsNotExist(err) {
		t.Errorf("the probe image is left: %v", err)
	}
	// Its sandbox got the /init a create sends, and is gone.
	var restored string
	for _, r := range n.Runtime.Restores() {
		if r.Image == c.image {
			restored = r.Spec.ID
		}
	}
	if restored == "" {
		t.Fatal("the new image was never restored")
	}
	if n.Runtime.Container(restored) != nil {
		t.Errorf("the sandbox %s that learnt the hot pages is left", restored)
	}
	if len(n.Agents.Inits()) == 0 {
		t.Error("no /init was sent")
	}
	if held := n.Slots.Held(); len(held) != 0 {
		t.Errorf("slots %v held after the build", held)
	}
}

// Learning is best effort: a template whose hot pages could not be
// learnt is built all the same, without a list.
func TestBuildWithoutHotPages(t *testing.T) {
	n := nodefake.New(t, nodefake.Options{LearnHotPages: func(image, probe string) (int64, error) {
		return 0, errors.New("no")
	}})
	tpl := n.AddTemplate(t, "cold")
	if _, err := os.Stat(filepath.Join(tpl.Checkpoint, "checkpoint.img")); err != nil {
		t.Fatal(err)
	}
	n.Agents.Refuse(errors.New("agent down"))
	tpl2 := n.AddTemplate(t, "cold2")
	if _, err := os.Stat(filepath.Join(tpl2.Checkpoint, "checkpoint.img")); err != nil {
		t.Fatal(err)
	}
}
