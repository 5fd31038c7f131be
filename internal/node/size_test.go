package node

import (
	"os"
	"path/filepath"
	"testing"
)

// An incremental image's size is its own files: the parents it links
// are counted with the images they belong to.
func TestDirSizeLeavesOutLinkedParents(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pages.img"), make([]byte, 300), 0o600)
	os.WriteFile(filepath.Join(dir, "checkpoint.img"), make([]byte, 20), 0o600)
	parent := filepath.Join(dir, "parents", "abc")
	os.MkdirAll(parent, 0o700)
	os.WriteFile(filepath.Join(parent, "pages.img"), make([]byte, 5000), 0o600)
	if got := dirSize(dir); got != 320 {
		t.Fatalf("dirSize = %d, want 320", got)
	}
}
