package envd_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"cube/internal/envd/users"
)

// uploadLayout is a directory an unprivileged user may enter, holding a
// root-owned directory with a root file in it, and a directory of the
// user's own.
type uploadLayout struct {
	rootDir, victim, userDir string
	user                     *users.User
}

func newUploadLayout(t *testing.T) uploadLayout {
	t.Helper()
	nobody, err := users.Lookup("nobody")
	if err != nil {
		t.Skip("no nobody account: ", err)
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := uploadLayout{rootDir: filepath.Join(base, "root-owned"), userDir: filepath.Join(base, "nobodys"), user: nobody}
	l.victim = filepath.Join(l.rootDir, "victim")
	os.Mkdir(l.rootDir, 0o755)
	if err := os.WriteFile(l.victim, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(l.userDir, "d"), 0o755)
	for _, d := range []string{l.userDir, filepath.Join(l.userDir, "d")} {
		if err := os.Chown(d, int(nobody.UID), int(nobody.GID)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// intact fails unless root's file still holds its content and no metadata.
func (l uploadLayout) intact(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(l.victim)
	if err != nil || string(b) != "root's" {
		t.Fatalf("root's file: %q, %v", b, err)
	}
	if n, _ := unix.Listxattr(l.victim, make([]byte, 1024)); n > 0 {
		t.Fatalf("root's file gained extended attributes")
	}
}

// redirect swaps the user's directory d for a symlink to the root-owned
// one, as the user could do while an upload into d is under way.
func (l uploadLayout) redirect(t *testing.T) {
	t.Helper()
	d := filepath.Join(l.userDir, "d")
	if err := os.Rename(d, d+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(l.rootDir, d); err != nil {
		t.Fatal(err)
	}
}

// Uploading as a user over or into a root-owned location fails.
func TestUploadAsUserCannotReplaceRootFiles(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	l := newUploadLayout(t)
	asNobody := map[string]string{"Authorization": basic("nobody"), "Content-Type": "application/octet-stream"}
	for _, dest := range []string{l.victim, filepath.Join(l.rootDir, "new")} {
		st, body, _ := s.do("POST", "/files?path="+dest, bytes.NewReader([]byte("mine")), asNobody)
		if st != 403 {
			t.Fatalf("upload as nobody to %s: %d %s", dest, st, body)
		}
	}
	l.intact(t)
	if _, err := os.Stat(filepath.Join(l.rootDir, "new")); err == nil {
		t.Fatal("an upload as nobody created a file in a root-owned directory")
	}
}

// A failed upload removes its partial file as the user: when the user has
// meanwhile pointed the path at a root-owned directory, root's file stays.
func TestFailedUploadCleansUpAsTheUser(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	l := newUploadLayout(t)
	dest := filepath.Join(l.userDir, "d", "victim")

	var head bytes.Buffer
	zw := gzip.NewWriter(&head)
	zw.Write([]byte("partial"))
	zw.Flush()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", s.url+"/files?path="+dest, pr)
	req.Header.Set("Authorization", basic("nobody"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	done := make(chan int, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	pw.Write(head.Bytes())
	eventually(t, "the upload to open its file", func() bool {
		b, _ := os.ReadFile(dest)
		return string(b) == "partial"
	})
	l.redirect(t)
	// A corrupt deflate block makes the upload fail after the swap.
	pw.Write(bytes.Repeat([]byte{0xff}, 64))
	pw.Close()
	if st := <-done; st != 400 {
		t.Fatalf("corrupt upload answered %d, want 400", st)
	}
	l.intact(t)
}

// Metadata of an upload lands on the uploaded file, never on whatever its
// path leads to by the time the body is read.
func TestUploadMetadataFollowsTheOpenedFile(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	l := newUploadLayout(t)
	dest := filepath.Join(l.userDir, "d", "victim")

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", s.url+"/files?path="+dest, pr)
	req.Header.Set("Authorization", basic("nobody"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Metadata-Planted", "yes")
	done := make(chan int, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	pw.Write([]byte("mine"))
	eventually(t, "the upload to open its file", func() bool {
		b, _ := os.ReadFile(dest)
		return string(b) == "mine"
	})
	l.redirect(t)
	pw.Close()
	if st := <-done; st != 200 {
		t.Fatalf("upload answered %d", st)
	}
	l.intact(t)
	got := make([]byte, 16)
	n, err := unix.Getxattr(filepath.Join(l.userDir, "d.old", "victim"), "user.e2b.planted", got)
	if err != nil || string(got[:n]) != "yes" {
		t.Fatalf("metadata of the uploaded file: %q, %v", got[:n], err)
	}
}
