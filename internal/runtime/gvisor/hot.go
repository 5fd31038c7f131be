package gvisor

import (
	"bufio"
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Hot pages. A sandbox restored with shared memory copies each page of its
// image on the first write to it, a page fault of 120–340 µs each on
// systrap; the agent's first request after a restore writes a few hundred.
// An image's pages.hot names the pages a restore is known to write first:
// runsc --cow-eager (scripts/runsc-patches/0003-cow-eager.patch) copies
// them into the sandbox's own memory in one pass at restore and shares the
// rest as before.
//
// pages.hot's first line is "id <ID>", the image's pages.id: runsc ignores
// a list written for another image. Each further line is "<offset>
// <length>" in bytes of pages.img. Any list is correct (a page copied early
// holds the same bytes); a wrong one only costs memory or faults.
//
// Where lists come from:
//   - A template's: a sandbox restored from the new image takes the
//     requests a create makes, and is checkpointed; runsc writes the pages
//     that writes copied out of each image the sandbox mapped to that
//     checkpoint's pages.copied ("<ID> <offset> <length>" lines), and
//     LearnHotPages keeps the template's (node.BuildSnapshot).
//   - An incremental image's (a snapshot or pause image of a sandbox that
//     shared memory): its own pages.img holds only the pages the sandbox
//     wrote since its restore, the ones its next restores write again, so
//     all of it is hot while it is at most maxOwnHot.
const (
	hotFile    = "pages.hot"
	copiedFile = "pages.copied"
	// maxOwnHot bounds the own pages of an incremental image that its
	// restores copy at once: past it they are shared as before.
	maxOwnHot = 16 << 20
)

// pageRange is [Off, Off+Len) of a pages.img.
type pageRange struct{ Off, Len int64 }

// readCopied reads the ranges of image id that a checkpoint's
// pages.copied in dir lists. A checkpoint that copied nothing has none.
func readCopied(dir, id string) ([]pageRange, error) {
	f, err := os.Open(filepath.Join(dir, copiedFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []pageRange
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s:%d: want \"<ID> <offset> <length>\"", copiedFile, n)
		}
		r, err := parseRange(fs[1], fs[2])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", copiedFile, n, err)
		}
		if fs[0] == id {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// writeCopied writes a checkpoint's pages.copied into dir from the
// sandbox's answer: by image ID, the [start, end) ranges writes copied.
// Nothing copied, no file.
func writeCopied(dir string, copied map[string][][2]uint64) error {
	if len(copied) == 0 {
		return nil
	}
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(copied)) {
		for _, r := range copied[id] {
			fmt.Fprintf(&b, "%s %d %d\n", id, r[0], r[1]-r[0])
		}
	}
	return writeNew(filepath.Join(dir, copiedFile), b.String())
}

func parseRange(off, n string) (pageRange, error) {
	o, err1 := strconv.ParseInt(off, 10, 64)
	l, err2 := strconv.ParseInt(n, 10, 64)
	if err1 != nil || err2 != nil || o < 0 || l <= 0 || o+l < o {
		return pageRange{}, fmt.Errorf("bad range %q %q", off, n)
	}
	return pageRange{o, l}, nil
}

// readHot reads dir's pages.hot: the image ID it was written for and its
// ranges. A missing file is no ranges and no ID.
func readHot(dir string) (string, []pageRange, error) {
	b, err := os.ReadFile(filepath.Join(dir, hotFile))
	if os.IsNotExist(err) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	head := strings.Fields(lines[0])
	if len(head) != 2 || head[0] != "id" {
		return "", nil, fmt.Errorf("%s: no \"id <ID>\" line", filepath.Join(dir, hotFile))
	}
	var out []pageRange
	for i, l := range lines[1:] {
		fs := strings.Fields(l)
		if len(fs) == 0 {
			continue
		}
		if len(fs) != 2 {
			return "", nil, fmt.Errorf("%s:%d: want \"<offset> <length>\"", hotFile, i+2)
		}
		r, err := parseRange(fs[0], fs[1])
		if err != nil {
			return "", nil, fmt.Errorf("%s:%d: %w", hotFile, i+2, err)
		}
		out = append(out, r)
	}
	return head[1], out, nil
}

// mergeRanges sorts rs and joins ranges that touch or overlap.
func mergeRanges(rs []pageRange) []pageRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b pageRange) int { return cmp.Compare(a.Off, b.Off) })
	var out []pageRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.Off <= out[n-1].Off+out[n-1].Len {
			out[n-1].Len = max(out[n-1].Len, r.Off+r.Len-out[n-1].Off)
			continue
		}
		out = append(out, r)
	}
	return out
}

// writeHot writes dir's pages.hot for image id with ranges rs (sorted and
// disjoint, as mergeRanges leaves them), replacing any: under a temporary
// name, then renamed, so a restore reads a whole list or the one before.
func writeHot(dir, id string, rs []pageRange) error {
	var b strings.Builder
	fmt.Fprintf(&b, "id %s\n", id)
	for _, r := range rs {
		fmt.Fprintf(&b, "%d %d\n", r.Off, r.Len)
	}
	tmp := filepath.Join(dir, hotFile+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, hotFile))
}

// hotBytes is the total length of rs.
func hotBytes(rs []pageRange) int64 {
	var n int64
	for _, r := range rs {
		n += r.Len
	}
	return n
}

// LearnHotPages implements runtime.HotPageLearner: image's pages.hot
// becomes the ranges of image that the checkpoint in probe says its
// sandbox copied. probe is removed.
func (r *Runtime) LearnHotPages(image, probe string) (int64, error) {
	defer os.RemoveAll(probe)
	id, err := readImageID(image)
	if err != nil {
		return 0, fmt.Errorf("image %s has no ID: %w", image, err)
	}
	rs, err := readCopied(probe, id)
	if err != nil {
		return 0, err
	}
	if len(rs) == 0 {
		return 0, nil
	}
	rs = mergeRanges(rs)
	if err := writeHot(image, id, rs); err != nil {
		return 0, err
	}
	return hotBytes(rs), nil
}

// ownHot makes all of an incremental image's own pages.img hot when it is
// at most maxOwnHot (see hotFile). The copies a checkpoint's pages.copied
// lists are of its parents' pages and need nothing here.
func ownHot(image string) error {
	id, err := readImageID(image)
	if err != nil {
		return err
	}
	st, err := os.Stat(filepath.Join(image, imagePagesFile))
	if err != nil {
		return err
	}
	if st.Size() == 0 || st.Size() > maxOwnHot {
		return nil
	}
	return writeHot(image, id, []pageRange{{0, st.Size()}})
}
