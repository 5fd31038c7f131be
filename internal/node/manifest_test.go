package node

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cube/internal/treecopy"
)

// For the fake tests in node_test.
var ImageChecksum = imageChecksum

// ManifestFiles are the manifest's files in a checkpoint directory.
var ManifestFiles = []string{rootfsManifest, imageManifest}

// odd names a manifest must read back byte for byte.
var oddNames = []string{"with space", "new\nline", `quote"d`, "tab\there", "bad-utf8-\xff\xfe", "ünïcode", "-"}

// makeTree writes a root filesystem holding every type a template's files
// can be, under oddly named entries, and returns its trees as a template
// is served.
func makeTree(t *testing.T) []treecopy.Tree {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "rootfs")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "dir", "sub"), 0o755))
	// Raw modes: os.Chmod takes setuid and sticky as FileMode bits.
	must(unix.Chmod(filepath.Join(root, "dir"), 0o1777))
	for i, name := range oddNames {
		must(os.WriteFile(filepath.Join(root, "dir", name), []byte(strings.Repeat(name, i+1)), 0o640))
	}
	must(os.WriteFile(filepath.Join(root, "suid"), []byte("x"), 0o755))
	must(os.Lchown(filepath.Join(root, "suid"), 1000, 1001))
	must(unix.Chmod(filepath.Join(root, "suid"), 0o4755))
	must(os.Link(filepath.Join(root, "suid"), filepath.Join(root, "dir", "sub", "hard")))
	must(os.Symlink("../../etc/with space\nand newline", filepath.Join(root, "dir", "link")))
	must(os.Symlink("/", filepath.Join(root, "abs")))
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	must(unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mknod(filepath.Join(root, "loop"), unix.S_IFBLK|0o660, int(unix.Mkdev(7, 0))))
	must(unix.Chmod(filepath.Join(root, "null"), 0o666))
	must(unix.Chmod(filepath.Join(root, "loop"), 0o660))
	checkpoint := filepath.Join(base, "checkpoint")
	must(os.MkdirAll(checkpoint, 0o700))
	must(os.WriteFile(filepath.Join(checkpoint, "checkpoint.img"), []byte("kernel"), 0o600))
	must(os.WriteFile(filepath.Join(checkpoint, "pages.img"), make([]byte, 8192), 0o600))
	envd := filepath.Join(base, "envd")
	must(os.MkdirAll(envd, 0o755))
	must(os.WriteFile(filepath.Join(envd, "cube-envd"), []byte("agent"), 0o755))
	return templateTrees(root, checkpoint, envd)
}

// A manifest lists every type of file a rootfs holds, reads back as it
// was written whatever bytes names hold, and a tree sent through
// treecopy matches it.
func TestManifestRoundTrip(t *testing.T) {
	trees := makeTree(t)
	checkpoint := trees[1].Path
	n, err := writeTemplateManifest(checkpoint, trees[0].Path, filepath.Dir(trees[2].Path))
	if err != nil {
		t.Fatal(err)
	}
	m, err := readManifest(checkpoint)
	if err != nil || m == nil {
		t.Fatalf("read the manifest: %v", err)
	}
	if len(m.entries) != n {
		t.Fatalf("read %d entries; wrote %d", len(m.entries), n)
	}
	byName := map[string]manifestEntry{}
	for _, e := range m.entries {
		byName[e.Name] = e
	}
	for _, name := range oddNames {
		if e, ok := byName["rootfs/dir/"+name]; !ok || e.Type != 'f' || e.Mode != 0o640 || len(e.Sum) != 64 {
			t.Errorf("entry of %q: %+v", name, e)
		}
	}
	for name, want := range map[string]manifestEntry{
		"rootfs/dir":           {Type: 'd', Mode: 0o1777},
		"rootfs/suid":          {Type: 'f', Mode: 0o4755, UID: 1000, GID: 1001, Size: 1},
		"rootfs/dir/sub/hard":  {Type: 'f', Mode: 0o4755, UID: 1000, GID: 1001, Size: 1},
		"rootfs/dir/link":      {Type: 'l', Mode: 0o777, Link: "../../etc/with space\nand newline"},
		"rootfs/fifo":          {Type: 'p', Mode: 0o600},
		"rootfs/null":          {Type: 'c', Mode: 0o666, Dev: "1,3"},
		"rootfs/loop":          {Type: 'b', Mode: 0o660, Dev: "7,0"},
		"checkpoint/pages.img": {Type: 'f', Mode: 0o600, Size: 8192},
		"envd/cube-envd":       {Type: 'f', Mode: 0o755, Size: 5},
	} {
		got, ok := byName[name]
		want.Name, want.Sum = name, got.Sum
		if !ok || got != want {
			t.Errorf("entry of %s: %+v; want %+v", name, got, want)
		}
	}
	for _, name := range []string{rootfsManifest, imageManifest} {
		if _, ok := byName["checkpoint/"+name]; ok {
			t.Errorf("the manifest lists its own %s", name)
		}
	}
	if byName["rootfs/suid"].Sum != byName["rootfs/dir/sub/hard"].Sum {
		t.Error("two names of one file have different sums")
	}

	dst := t.TempDir()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(treecopy.Write(pw, trees...)) }()
	if _, err := treecopy.Extract(pr, dst); err != nil {
		t.Fatal(err)
	}
	if err := verifyManifest(dst, m); err != nil {
		t.Fatalf("a true copy: %v", err)
	}
	// A FIFO where a file was, and a file where a device was.
	victim := filepath.Join(dst, "rootfs", "dir", oddNames[1])
	os.Remove(victim)
	if err := unix.Mkfifo(victim, 0o640); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dst, "rootfs", "null"))
	os.WriteFile(filepath.Join(dst, "rootfs", "null"), nil, 0o666)
	err = verifyManifest(dst, m)
	if err == nil || !strings.Contains(err.Error(), "in 2 places") || !strings.Contains(err.Error(), `rootfs/dir/new`) ||
		!strings.Contains(err.Error(), "is a FIFO, not a regular file") || !strings.Contains(err.Error(), "rootfs/null: is a regular file, not a character device") {
		t.Fatalf("a copy with two files of another type: %v", err)
	}
}

// The checksum a template records covers its manifest's content, not
// only its size: either file of it changed in place fails it, and one
// without the other is refused.
func TestChecksumCoversManifest(t *testing.T) {
	trees := makeTree(t)
	checkpoint := trees[1].Path
	if _, err := writeTemplateManifest(checkpoint, trees[0].Path, filepath.Dir(trees[2].Path)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{rootfsManifest, imageManifest} {
		before, err := imageChecksum(checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(checkpoint, name)
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 1
		os.WriteFile(p, b, 0o600)
		if after, _ := imageChecksum(checkpoint); after == before {
			t.Fatalf("%s changed in place keeps the image's checksum", name)
		}
	}
	if _, err := writeTemplateManifest(checkpoint, trees[0].Path, filepath.Dir(trees[2].Path)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(checkpoint, imageManifest))
	if _, err := readManifest(checkpoint); err == nil || !strings.Contains(err.Error(), "without the rest of the manifest") {
		t.Fatalf("a manifest without its image list: %v", err)
	}
}
