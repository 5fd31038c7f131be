package cli

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func TestTplCreateUploadsLocalArchive(t *testing.T) {
	s := tplSetup(t)
	dataDir := t.TempDir()
	archive := filepath.Join(t.TempDir(), "image.tar")
	content := strings.Repeat("layer bytes ", 1000)
	os.WriteFile(archive, []byte(content), 0o644)

	out, errOut, err := run(t, "tpl", "create-from-image", "--data-dir", dataDir, "--image", "docker-archive:"+archive, "--template-id", "tpl1")
	if err != nil {
		t.Fatal(err, errOut)
	}
	if len(s.uploads) != 1 || string(s.uploads[0].body) != content || s.uploads[0].kind != "docker-archive" || s.uploads[0].contentType != "application/x-tar" {
		t.Fatalf("uploads = %d, %+v", len(s.uploads), s.uploads)
	}
	if got := s.created[0].Image; got != "docker-archive:/srv/imports/upload-1.tar" {
		t.Errorf("built from %q, want the uploaded archive", got)
	}
	if !strings.Contains(errOut, "UPLOADING") || out != "job_id: job1\ntemplate_id: tpl1\n" {
		t.Errorf("stdout %q, stderr %q; want the upload's progress on stderr", out, errOut)
	}

	// A relative path is this machine's too; a tag is kept.
	t.Chdir(filepath.Dir(archive))
	if _, errOut, err := run(t, "tpl", "create-from-image", "--data-dir", dataDir, "--image", "oci-archive:image.tar:v2"); err != nil {
		t.Fatal(err, errOut)
	}
	if len(s.uploads) != 2 || s.uploads[1].kind != "oci-archive" || s.created[1].Image != "oci-archive:/srv/imports/upload-2.tar:v2" {
		t.Fatalf("relative path: uploads %d, built from %q", len(s.uploads), s.created[1].Image)
	}
}

func TestTplCreateUploadsLayoutDirectoryAsTar(t *testing.T) {
	s := tplSetup(t)
	dir := filepath.Join(t.TempDir(), "layout")
	os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	os.WriteFile(filepath.Join(dir, "index.json"), []byte(`{}`), 0o644)
	os.WriteFile(filepath.Join(dir, "blobs", "sha256", "abc"), []byte("blob"), 0o644)

	if _, errOut, err := run(t, "tpl", "create-from-image", "--data-dir", t.TempDir(), "--image", "oci:"+dir+":v1"); err != nil {
		t.Fatal(err, errOut)
	}
	if len(s.uploads) != 1 || s.uploads[0].kind != "oci-archive" {
		t.Fatalf("uploads = %+v", s.uploads)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(s.uploads[0].body))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		names = append(names, h.Name+"="+string(b))
	}
	sort.Strings(names)
	want := `blobs/=,blobs/sha256/=,blobs/sha256/abc=blob,index.json={},oci-layout={"imageLayoutVersion":"1.0.0"}`
	if strings.Join(names, ",") != want {
		t.Errorf("tar holds %v, want %s", names, want)
	}
	if got := s.created[0].Image; got != "oci-archive:/srv/imports/upload-1.tar:v1" {
		t.Errorf("built from %q", got)
	}
}

func TestTplCreateLeavesServerPathsAlone(t *testing.T) {
	s := tplSetup(t)
	dataDir := t.TempDir()
	os.MkdirAll(filepath.Join(dataDir, "imports"), 0o700)
	inImports := filepath.Join(dataDir, "imports", "default-image.tar")
	os.WriteFile(inImports, []byte("x"), 0o644)
	other := filepath.Join(t.TempDir(), "elsewhere")
	os.MkdirAll(other, 0o700)
	os.WriteFile(filepath.Join(other, "x.tar"), []byte("x"), 0o644)

	for _, c := range []struct{ image string }{
		{"oci-archive:" + inImports},                     // the server's import directory, on this machine
		{"oci-archive:default-image.tar"},                // not here: named in the server's import directory
		{"oci-archive:/nonexistent/x.tar"},               // not here either
		{"docker.io/library/python:3.12"},                // a registry
		{"oci-archive:" + filepath.Join(other, "x.tar")}, // with --import-dir naming the server's
	} {
		args := []string{"tpl", "create-from-image", "--data-dir", dataDir, "--image", c.image}
		if strings.Contains(c.image, other) {
			args = append(args, "--import-dir", other)
		}
		if _, errOut, err := run(t, args...); err != nil {
			t.Fatal(c.image, err, errOut)
		}
		if got := s.created[len(s.created)-1].Image; got != c.image {
			t.Errorf("built from %q, want %q passed as it is", got, c.image)
		}
	}
	if len(s.uploads) != 0 {
		t.Errorf("uploaded %d archives, want none", len(s.uploads))
	}
}

func TestTplCreateUploadRefused(t *testing.T) {
	s := tplSetup(t)
	s.uploadLimit = 10
	archive := filepath.Join(t.TempDir(), "big.tar")
	os.WriteFile(archive, bytes.Repeat([]byte("x"), 100), 0o644)
	_, _, err := run(t, "tpl", "create-from-image", "--data-dir", t.TempDir(), "--image", "oci-archive:"+archive)
	if err == nil || !strings.Contains(err.Error(), "413") || !strings.Contains(err.Error(), "--max-image-bytes") {
		t.Fatalf("oversized upload: %v", err)
	}
	if len(s.created) != 0 {
		t.Errorf("a build was started after a refused upload: %+v", s.created)
	}
}
