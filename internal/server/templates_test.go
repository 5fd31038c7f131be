package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"cube/internal/nodetest"
	"cube/internal/oci"
	"cube/internal/testenv"
)

// TestTemplateFromEveryImageSource builds templates through the CLI
// against a running server from each image source form (registry,
// oci-archive, oci layout directory, docker-archive: uploaded by the CLI;
// an archive in the import directory: read in place), then starts a
// sandbox from each and reads a file of the image through envd.
func TestTemplateFromEveryImageSource(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()

	// An image made from a directory, written in every form.
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"etc", "tmp", "home"} {
		os.MkdirAll(filepath.Join(rootfs, d), 0o755)
	}
	os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "etc", "group"), []byte("root:x:0:\n"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "hello.txt"), []byte("hello from the image"), 0o644)
	archive := filepath.Join(dir, "image.oci.tar")
	if err := oci.WriteArchive(rootfs, archive, oci.ImageConfig{Env: []string{"GREETING=hi"}}, oci.ArchiveOptions{}); err != nil {
		t.Fatal(err)
	}
	src, _ := oci.ParseSource("oci-archive:" + archive)
	img, err := oci.Open(context.Background(), src, oci.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("example.com/app:v1")
	dockerArchive := filepath.Join(dir, "image.docker.tar")
	if err := tarball.WriteToFile(dockerArchive, tag, img); err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	regRef := strings.TrimPrefix(reg.URL, "http://") + "/app:v1"
	if err := remote.Write(mustTag(t, regRef), img); err != nil {
		t.Fatal(err)
	}

	dataDir := t.TempDir()
	prefix, cidr := nodetest.SlotRange()
	regHost := strings.TrimPrefix(reg.URL, "http://")
	d := startDaemon(t, dataDir, prefix, cidr.String(), freeAddr(t), "--insecure-registry", regHost)
	run := func(args ...string) (string, error) { return d.cli(t, args...) }

	// Local images are read from the server's import directory; the CLI
	// uploads the others (the archives above are all elsewhere). One is
	// hard-linked into the import directory, as make template does.
	importDir := filepath.Join(dataDir, "imports")
	linked := filepath.Join(importDir, "linked.oci.tar")
	if err := os.Link(archive, linked); err != nil {
		t.Fatal(err)
	}

	forms := map[string]string{
		"registry":       regRef,
		"oci-archive":    "oci-archive:" + archive,
		"oci-dir":        "oci:" + string(lp) + ":v1",
		"docker-archive": "docker-archive:" + dockerArchive,
		"import-dir":     "oci-archive:" + linked,
	}
	for form, ref := range forms {
		t.Run(form, func(t *testing.T) {
			if out, err := run("tpl", "create-from-image", "--image", ref, "--template-id", form,
				"--writable-layer-size", "64M", "--import-dir", importDir, "--wait"); err != nil {
				t.Fatalf("create-from-image %s: %v\n%s", ref, err, out)
			}
			code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": form}, nil)
			if code != 201 {
				t.Fatalf("create from %s: %d %s", form, code, body)
			}
			var sb struct{ SandboxID, EnvdAccessToken string }
			json.Unmarshal(body, &sb)
			if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "GET", "/files?path=/hello.txt", nil); code != 200 || out != "hello from the image" {
				t.Fatalf("file from the image: %d %q", code, out)
			}
			if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "GET", "/envs", nil); code != 200 || !strings.Contains(out, `"GREETING":"hi"`) {
				t.Fatalf("image env: %d %s", code, out)
			}
		})
	}

	out, err := run("tpl", "list", "--json")
	if err != nil {
		t.Fatalf("tpl list: %v\n%s", err, out)
	}
	for form := range forms {
		if !strings.Contains(out, `"`+form+`"`) {
			t.Errorf("tpl list lacks %s:\n%s", form, out)
		}
	}
	// Uploads served their builds and are gone; the linked image stays.
	if ents, _ := os.ReadDir(importDir); len(ents) != 1 || ents[0].Name() != "linked.oci.tar" {
		t.Errorf("import directory holds %v, want only linked.oci.tar", ents)
	}
	// A server path outside the import directory is refused, with what
	// to do instead.
	if code, body := d.do(t, "POST", "/templates", map[string]any{"image": "oci-archive:" + archive}, nil); code != 400 ||
		!strings.Contains(string(body), "outside cube-server's import directory") || !strings.Contains(string(body), "upload") {
		t.Errorf("archive outside the import directory: %d %s", code, body)
	}
	// A missing image fails the build with a reason, and the CLI says so.
	out, err = run("tpl", "create-from-image", "--image", strings.TrimPrefix(reg.URL, "http://")+"/nope:v1", "--template-id", "missing", "--wait")
	if err == nil || !strings.Contains(out, "not found") {
		t.Fatalf("missing image: err=%v\n%s", err, out)
	}
}

func mustTag(t *testing.T, ref string) name.Tag {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}
