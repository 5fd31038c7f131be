package gvisor

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestLearnHotPages(t *testing.T) {
	r := &Runtime{}
	dir := t.TempDir()
	image, probe := filepath.Join(dir, "image"), filepath.Join(dir, "probe")
	for _, d := range []string{image, probe} {
		os.MkdirAll(d, 0o700)
	}
	os.WriteFile(filepath.Join(image, imageIDFile), []byte("aaaa\n"), 0o644)
	// The probe copied pages of its image and of another one; ranges
	// come unsorted and touching.
	os.WriteFile(filepath.Join(probe, copiedFile), []byte(
		"aaaa 8192 4096\nbbbb 0 4096\naaaa 0 4096\naaaa 4096 4096\n\naaaa 65536 8192\n"), 0o644)
	n, err := r.LearnHotPages(image, probe)
	if err != nil || n != 12288+8192 {
		t.Fatalf("LearnHotPages = %d, %v; want %d", n, err, 12288+8192)
	}
	id, rs, err := readHot(image)
	if err != nil || id != "aaaa" || !reflect.DeepEqual(rs, []pageRange{{0, 12288}, {65536, 8192}}) {
		t.Fatalf("pages.hot = %q %v %v", id, rs, err)
	}
	if _, err := os.Stat(probe); !os.IsNotExist(err) {
		t.Errorf("the probe image is left: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(image, hotFile))
	if string(b) != "id aaaa\n0 12288\n65536 8192\n" {
		t.Errorf("pages.hot reads %q", b)
	}

	// A probe that copied nothing of the image leaves its list alone.
	os.MkdirAll(probe, 0o700)
	os.WriteFile(filepath.Join(probe, copiedFile), []byte("bbbb 0 4096\n"), 0o644)
	if n, err := r.LearnHotPages(image, probe); n != 0 || err != nil {
		t.Fatalf("LearnHotPages with nothing of the image = %d, %v", n, err)
	}
	if id, _, _ := readHot(image); id != "aaaa" {
		t.Error("a probe with nothing to say replaced the list")
	}
	// Malformed records are errors, not lists.
	os.MkdirAll(probe, 0o700)
	os.WriteFile(filepath.Join(probe, copiedFile), []byte("aaaa 0\n"), 0o644)
	if _, err := r.LearnHotPages(image, probe); err == nil {
		t.Error("a malformed pages.copied was taken")
	}
	// An image without an ID (written by a runsc without one) learns
	// nothing.
	os.Remove(filepath.Join(image, imageIDFile))
	os.MkdirAll(probe, 0o700)
	if _, err := r.LearnHotPages(image, probe); err == nil {
		t.Error("an image without an ID learnt hot pages")
	}
}

func TestReadHot(t *testing.T) {
	dir := t.TempDir()
	if id, rs, err := readHot(dir); id != "" || rs != nil || err != nil {
		t.Fatalf("no pages.hot = %q %v %v", id, rs, err)
	}
	for _, bad := range []string{"0 4096\n", "id\n", "id a\n0\n", "id a\n-1 4096\n", "id a\n0 0\n", "id a\nx 4096\n"} {
		os.WriteFile(filepath.Join(dir, hotFile), []byte(bad), 0o644)
		if _, _, err := readHot(dir); err == nil {
			t.Errorf("pages.hot %q was taken", bad)
		}
	}
}

// An incremental image's own pages are all hot up to maxOwnHot.
func TestOwnHot(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, imageIDFile), []byte("cccc\n"), 0o644)
	os.WriteFile(filepath.Join(dir, imagePagesFile), make([]byte, 3*4096), 0o644)
	if err := ownHot(dir); err != nil {
		t.Fatal(err)
	}
	if id, rs, err := readHot(dir); err != nil || id != "cccc" || !reflect.DeepEqual(rs, []pageRange{{0, 3 * 4096}}) {
		t.Fatalf("pages.hot = %q %v %v", id, rs, err)
	}
	os.Remove(filepath.Join(dir, hotFile))
	if err := os.Truncate(filepath.Join(dir, imagePagesFile), maxOwnHot+4096); err != nil {
		t.Fatal(err)
	}
	if err := ownHot(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, hotFile)); !os.IsNotExist(err) {
		t.Errorf("an image past maxOwnHot got a hot list: %v", err)
	}
}

// A parent carried by an image brings its hot list along, when it has one.
func TestLinkImageCarriesHotList(t *testing.T) {
	dir := t.TempDir()
	src, dst, dst2 := filepath.Join(dir, "src"), filepath.Join(dir, "dst"), filepath.Join(dir, "dst2")
	os.MkdirAll(src, 0o700)
	for _, f := range []string{imagePagesFile, imageIDFile} {
		os.WriteFile(filepath.Join(src, f), []byte("x"), 0o644)
	}
	if err := linkImage(src, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, hotFile)); !os.IsNotExist(err) {
		t.Fatalf("a hot list appeared from nowhere: %v", err)
	}
	os.WriteFile(filepath.Join(src, hotFile), []byte("id x\n"), 0o644)
	if err := linkImage(src, dst2); err != nil {
		t.Fatal(err)
	}
	if !sameFile(t, filepath.Join(src, hotFile), filepath.Join(dst2, hotFile)) {
		t.Error("the hot list is not linked")
	}
}
