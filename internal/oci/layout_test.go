package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func TestLayoutLinksStayInside(t *testing.T) {
	img := testImage(t)
	dir := filepath.Join(t.TempDir(), "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigName()
	blob := filepath.Join(dir, "blobs", "sha256", cfg.Hex)

	// A link inside the layout is followed.
	os.Rename(blob, blob+".real")
	os.Symlink(cfg.Hex+".real", blob)
	if _, err := Open(context.Background(), Source{Kind: KindOCILayout, Path: dir}, PullOptions{}); err != nil {
		t.Fatalf("link inside the layout: %v", err)
	}

	// The same bytes, but outside the layout: the server would read any
	// file of its host this way.
	outside := filepath.Join(t.TempDir(), "config.json")
	os.Rename(blob+".real", outside)
	os.Remove(blob)
	os.Symlink(outside, blob)
	_, err = Open(context.Background(), Source{Kind: KindOCILayout, Path: dir}, PullOptions{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "outside the layout") {
		t.Fatalf("link out of the layout: %v, want it refused", err)
	}
}
