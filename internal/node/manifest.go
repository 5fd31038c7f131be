package node

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"cube/internal/store"
	"cube/internal/treecopy"
)

// A node that copies a template (copies.go) checks the checkpoint it
// received against the checksum the builder recorded, but the rootfs and
// agent come from whichever node sent them, checked only against the
// digest that node computed itself. So the node that writes a template's
// checkpoint (a build, a snapshot) also writes a manifest into it before
// the checksum is taken: every file the template is served as (each
// one's type, mode, owner, size, SHA-256 of its content, link target or
// device), named as in the archive ExportTemplate writes. The checksum
// covers the manifest's whole content, so the manifest is the builder's
// word, and the receiving node checks every file it extracted against it
// (verifyManifest). A sender that changed, added, removed or re-moded a
// file, or sent another agent, is caught whatever the archive's digest
// says; one that dropped or edited the manifest fails the checksum.
//
// The manifest is two files. rootfsManifest lists the rootfs and the
// agent, which a template's snapshots share: a snapshot copies it as it
// is rather than hash the rootfs again. imageManifest lists the
// checkpoint's own files. Every restore checks the checksum, which hashes
// both in full, so the rootfs list is compressed: a Debian rootfs of
// 34,000 files lists in 4.8 MB, 1.3 MB compressed, which a restore's
// check hashes in about half a millisecond more.
//
// A template built before manifests has neither; its copies are checked
// as before (the checkpoint against the checksum) and logged as such.

// The manifest's files in a checkpoint directory. Any name but pages.img
// is hashed in full by imageChecksum.
const (
	rootfsManifest = "rootfs.manifest.gz"
	imageManifest  = "image.manifest"
)

// manifestHeader is each manifest file's first line, naming its format.
const manifestHeader = "cube-files 1"

// isManifest reports whether name, as the archive names files, is one of
// the manifest's own files, which it does not list: the checksum vouches
// for them.
func isManifest(name string) bool {
	return name == treeCheckpoint+"/"+rootfsManifest || name == treeCheckpoint+"/"+imageManifest
}

// Trees of the archive a template is served as, and so the names its
// manifest lists files under.
const (
	treeRootfs     = "rootfs"
	treeCheckpoint = "checkpoint"
	treeAgent      = "envd/cube-envd"
)

// templateTrees is what a template is served as: its rootfs, its
// checkpoint and the agent it was checkpointed with (envd is the
// directory holding cube-envd).
func templateTrees(rootfs, checkpoint, envd string) []treecopy.Tree {
	return []treecopy.Tree{
		{Name: treeRootfs, Path: rootfs},
		{Name: treeCheckpoint, Path: checkpoint},
		{Name: treeAgent, Path: filepath.Join(envd, "cube-envd")},
	}
}

// noSum stands for a regular file's content the manifest does not vouch
// for: a snapshot's pages.img, which only its size covers (see
// writeSnapshotManifest).
const noSum = "-"

// manifestEntry is one file of a template as its manifest records it.
type manifestEntry struct {
	Name     string // as in the archive: rootfs/etc/passwd
	Type     byte   // d, f (regular), l (symbolic link), c, b (devices), p (FIFO)
	Mode     uint32 // permissions with setuid, setgid and sticky
	UID, GID uint32
	Size     int64  // of a regular file
	Sum      string // hex SHA-256 of a regular file's content, or noSum
	Link     string // a symbolic link's target
	Dev      string // a device's "major,minor"
}

// manifest lists a template's files in the order they were walked.
type manifest struct {
	entries []manifestEntry
}

// hasher hashes files' contents, each inode once: a rootfs links some
// files under several names, and the archive carries them as links.
type hasher map[[2]uint64]string

func (h hasher) sum(p string, st *syscall.Stat_t) (string, error) {
	key := [2]uint64{st.Dev, st.Ino}
	if s, ok := h[key]; ok && st.Nlink > 1 {
		return s, nil
	}
	// O_NOFOLLOW and the check of the inode: the name is what was
	// walked, never something a link put in its place; O_NONBLOCK keeps
	// a FIFO swapped in from blocking the open.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return "", fmt.Errorf("%s changed while it was read", p)
	}
	d := sha256.New()
	if _, err := io.Copy(d, f); err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	s := hex.EncodeToString(d.Sum(nil))
	if st.Nlink > 1 {
		h[key] = s
	}
	return s, nil
}

// describe returns the entry of the file at p, walked as name, hashing
// a regular file's content unless sum says not to. ok is false for a
// socket, which an archive never carries.
func (h hasher) describe(name, p string, fi fs.FileInfo, sum bool) (e manifestEntry, ok bool, err error) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return e, false, fmt.Errorf("%s: no file status", p)
	}
	e = manifestEntry{Name: name, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Type = 'd'
	case unix.S_IFREG:
		e.Type, e.Size, e.Sum = 'f', st.Size, noSum
		if sum {
			if e.Sum, err = h.sum(p, st); err != nil {
				return e, false, err
			}
		}
	case unix.S_IFLNK:
		e.Type = 'l'
		if e.Link, err = os.Readlink(p); err != nil {
			return e, false, err
		}
	case unix.S_IFCHR, unix.S_IFBLK:
		e.Type = 'c'
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			e.Type = 'b'
		}
		e.Dev = fmt.Sprintf("%d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case unix.S_IFIFO:
		e.Type = 'p'
	case unix.S_IFSOCK:
		return e, false, nil
	default:
		return e, false, fmt.Errorf("%s: unknown file type %o", p, st.Mode&unix.S_IFMT)
	}
	return e, true, nil
}

// walkTrees calls fn for every file of trees as the archive names it
// (treecopy.Walk), the checkpoint's manifest aside.
func walkTrees(trees []treecopy.Tree, fn func(name, p string, fi fs.FileInfo) error) error {
	return treecopy.Walk(trees, func(name, p string, fi fs.FileInfo) error {
		if isManifest(name) {
			return nil
		}
		return fn(name, p, fi)
	})
}

// makeManifest lists every file of trees, hashing each regular file's
// content but for those skip names.
func makeManifest(trees []treecopy.Tree, skip func(name string) bool) (*manifest, error) {
	m := &manifest{}
	h := hasher{}
	err := walkTrees(trees, func(name, p string, fi fs.FileInfo) error {
		e, ok, err := h.describe(name, p, fi, skip == nil || !skip(name))
		if ok {
			m.entries = append(m.entries, e)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list the template's files: %w", err)
	}
	return m, nil
}

// writeTemplateManifest writes into the checkpoint image dir (before its
// checksum is taken) the manifest of a template booted from rootfs with
// the agent in envd: every file hashed, pages.img included. Hashing it is
// a build's cost, never a create's: imageChecksum, which every restore
// checks, still covers pages.img by its size, and a copy checks its
// content against the manifest. It returns how many files the manifest
// lists.
func writeTemplateManifest(dir, rootfs, envd string) (int, error) {
	trees := templateTrees(rootfs, dir, envd)
	shared, err := makeManifest([]treecopy.Tree{trees[0], trees[2]}, nil)
	if err != nil {
		return 0, err
	}
	own, err := makeManifest([]treecopy.Tree{trees[1]}, nil)
	if err != nil {
		return 0, err
	}
	if err := shared.write(filepath.Join(dir, rootfsManifest)); err != nil {
		return 0, err
	}
	return len(shared.entries) + len(own.entries), own.write(filepath.Join(dir, imageManifest))
}

// writeSnapshotManifest writes into the checkpoint image dir of a
// snapshot of a sandbox booted from boot the manifest of the snapshot's
// files: the rootfs and agent are boot's, so their list is boot's, copied
// as it is, and the checkpoint's are dir's own. pages.img, which holds
// the sandbox's memory, is listed by its size only: hashing it would add
// a tenth of a second per 60 MB of memory to every snapshot. It reports
// false, writing nothing, when boot has no manifest (built before them):
// the rootfs is not hashed here, and the snapshot's copies are checked as
// boot's are.
func writeSnapshotManifest(dir string, boot *store.Template) (bool, error) {
	if boot == nil || boot.Checkpoint == "" {
		return false, nil // nothing to name the rootfs's list by
	}
	shared, err := os.ReadFile(filepath.Join(boot.Checkpoint, rootfsManifest))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	own, err := makeManifest([]treecopy.Tree{{Name: treeCheckpoint, Path: dir}}, func(name string) bool {
		// An incremental image's parents (parents/<ID>/pages.img) too.
		return strings.HasPrefix(name, treeCheckpoint+"/") && path.Base(name) == "pages.img"
	})
	if err != nil {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(dir, rootfsManifest), shared, 0o600); err != nil {
		return false, err
	}
	return true, own.write(filepath.Join(dir, imageManifest))
}

// write stores m at p, compressed when p ends in .gz; the image it is in
// is synced as a whole.
func (m *manifest) write(p string) error {
	var b bytes.Buffer
	var w io.Writer = &b
	var zw *gzip.Writer
	if strings.HasSuffix(p, ".gz") {
		zw = gzip.NewWriter(&b)
		w = zw
	}
	bw := bufio.NewWriter(w)
	bw.WriteString(manifestHeader + "\n")
	for _, e := range m.entries {
		bw.WriteString(e.line())
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
	}
	return os.WriteFile(p, b.Bytes(), 0o600)
}

// line is e as the manifest holds it: type, octal mode, owner, group,
// size, then the content's SHA-256 (a regular file), major,minor (a
// device) or "-", then the quoted name and, for a symbolic link, its
// quoted target. Names come last and quoted, so any byte a name holds
// reads back.
func (e *manifestEntry) line() string {
	data := "-"
	switch e.Type {
	case 'f':
		data = e.Sum
	case 'c', 'b':
		data = e.Dev
	}
	s := fmt.Sprintf("%c %04o %d %d %d %s %s", e.Type, e.Mode, e.UID, e.GID, e.Size, data, strconv.Quote(e.Name))
	if e.Type == 'l' {
		s += " " + strconv.Quote(e.Link)
	}
	return s
}

// parseEntry reads one line written by line.
func parseEntry(s string) (manifestEntry, error) {
	var e manifestEntry
	f := strings.SplitN(s, " ", 7)
	if len(f) != 7 || len(f[0]) != 1 || !strings.Contains("dflcbp", f[0]) {
		return e, errors.New("malformed")
	}
	e.Type = f[0][0]
	mode, err1 := strconv.ParseUint(f[1], 8, 32)
	uid, err2 := strconv.ParseUint(f[2], 10, 32)
	gid, err3 := strconv.ParseUint(f[3], 10, 32)
	size, err4 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return e, err
	}
	e.Mode, e.UID, e.GID, e.Size = uint32(mode), uint32(uid), uint32(gid), size
	switch e.Type {
	case 'f':
		e.Sum = f[5]
	case 'c', 'b':
		e.Dev = f[5]
	}
	q, err := strconv.QuotedPrefix(f[6])
	if err != nil {
		return e, err
	}
	if e.Name, err = strconv.Unquote(q); err != nil {
		return e, err
	}
	rest := f[6][len(q):]
	if e.Type == 'l' {
		if !strings.HasPrefix(rest, " ") {
			return e, errors.New("a link without its target")
		}
		if e.Link, err = strconv.Unquote(rest[1:]); err != nil {
			return e, err
		}
	} else if rest != "" {
		return e, errors.New("trailing text")
	}
	return e, nil
}

// readManifest reads the manifest of the checkpoint image dir, or nil
// when it has none.
func readManifest(dir string) (*manifest, error) {
	m := &manifest{}
	var found []string
	for _, name := range []string{rootfsManifest, imageManifest} {
		ok, err := m.read(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if ok {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return nil, fmt.Errorf("the checkpoint holds %s without the rest of the manifest", found[0])
	}
	return m, nil
}

// read adds the entries of the manifest file p to m, reporting false when
// there is no such file.
func (m *manifest) read(p string) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	name := filepath.Base(p)
	var r io.Reader = f
	if strings.HasSuffix(p, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20) // a line is a name of up to 4 KiB, quoted, and its link's
	i := 0
	for ; sc.Scan(); i++ {
		if i == 0 {
			if sc.Text() != manifestHeader {
				return false, fmt.Errorf("%s: not a manifest this node reads (%.40q)", name, sc.Text())
			}
			continue
		}
		e, err := parseEntry(sc.Text())
		if err != nil {
			return false, fmt.Errorf("%s line %d: %w", name, i+1, err)
		}
		m.entries = append(m.entries, e)
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	if i == 0 {
		return false, fmt.Errorf("%s is empty", name)
	}
	return true, nil
}

// maxReported bounds the differences an error names; it counts them all.
const maxReported = 5

// verifyManifest checks the tree dir, a copy as treecopy.Extract wrote
// it, against m: every file m lists is there with its type, mode, owner,
// size, content, target or device, and nothing else is but the
// directories Extract made to hold a file sent alone (envd/). The copy is
// another node's word until this returns nil.
func verifyManifest(dir string, m *manifest) error {
	want := make(map[string]*manifestEntry, len(m.entries))
	for i := range m.entries {
		want[m.entries[i].Name] = &m.entries[i]
	}
	// The parents of a file sent alone are made by Extract, not sent.
	made := map[string]bool{}
	for _, e := range m.entries {
		for p := path.Dir(e.Name); p != "." && want[p] == nil && !made[p]; p = path.Dir(p) {
			made[p] = true
		}
	}
	var problems []string
	report := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	h := hasher{}
	seen := make(map[string]bool, len(want))
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		if isManifest(name) {
			return nil
		}
		w := want[name]
		if w == nil {
			if made[name] && d.IsDir() {
				return nil
			}
			report("%s is not in the template's manifest", shown(name))
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		seen[name] = true
		fi, err := d.Info()
		if err != nil {
			return err
		}
		got, ok, err := h.describe(name, p, fi, w.Type == 'f' && w.Sum != noSum)
		if err != nil {
			return err
		}
		if !ok {
			report("%s is a socket; the manifest has %s", shown(name), kind(w.Type))
			return nil
		}
		if diff := w.differs(&got); diff != "" {
			report("%s: %s", shown(name), diff)
		}
		if d.IsDir() && w.Type != 'd' {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check the copy against the template's manifest: %w", err)
	}
	for _, e := range m.entries {
		if !seen[e.Name] {
			report("%s is missing", shown(e.Name))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	n := len(problems)
	if n > maxReported {
		problems = append(problems[:maxReported], fmt.Sprintf("and %d more", n-maxReported))
	}
	places := "1 place"
	if n > 1 {
		places = fmt.Sprintf("%d places", n)
	}
	return fmt.Errorf("the copy differs from the template's manifest in %s: %s", places, strings.Join(problems, "; "))
}

// differs says how got differs from what e records, or "" when it does
// not.
func (e *manifestEntry) differs(got *manifestEntry) string {
	var d []string
	if got.Type != e.Type {
		return fmt.Sprintf("is %s, not %s", kind(got.Type), kind(e.Type))
	}
	if got.Mode != e.Mode {
		d = append(d, fmt.Sprintf("mode %04o, not %04o", got.Mode, e.Mode))
	}
	if got.UID != e.UID || got.GID != e.GID {
		d = append(d, fmt.Sprintf("owner %d:%d, not %d:%d", got.UID, got.GID, e.UID, e.GID))
	}
	switch e.Type {
	case 'f':
		if got.Size != e.Size {
			d = append(d, fmt.Sprintf("%d bytes, not %d", got.Size, e.Size))
		} else if e.Sum != noSum && got.Sum != e.Sum {
			d = append(d, fmt.Sprintf("content SHA-256 %.12s…, not %.12s…", got.Sum, e.Sum))
		}
	case 'l':
		if got.Link != e.Link {
			d = append(d, fmt.Sprintf("links to %q, not %q", got.Link, e.Link))
		}
	case 'c', 'b':
		if got.Dev != e.Dev {
			d = append(d, fmt.Sprintf("device %s, not %s", got.Dev, e.Dev))
		}
	}
	return strings.Join(d, ", ")
}

// shown is a name as an error shows it: quoted when it holds anything
// but printable characters, so a newline in a name cannot forge a line.
func shown(name string) string {
	for _, r := range name {
		if r == utf8.RuneError || !unicode.IsGraphic(r) || r == ' ' {
			return strconv.Quote(name)
		}
	}
	return name
}

func kind(t byte) string {
	switch t {
	case 'd':
		return "a directory"
	case 'f':
		return "a regular file"
	case 'l':
		return "a symbolic link"
	case 'c':
		return "a character device"
	case 'b':
		return "a block device"
	case 'p':
		return "a FIFO"
	}
	return "of an unknown type"
}
