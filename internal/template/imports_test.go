package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"cube/internal/cube"
)

// refused checks that a build request is answered 400 with every part of
// want in the message.
func refused(t *testing.T, f *fixture, req cube.BuildRequest, want ...string) {
	t.Helper()
	if req.ProbePort == 0 {
		req.ProbePort = f.port
	}
	_, err := f.b.BuildTemplate(context.Background(), req)
	if cube.KindOf(err) != cube.Invalid {
		t.Fatalf("BuildTemplate(%s) = %v, want Invalid", req.Image, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

func TestLocalSourcesOnlyFromImportDir(t *testing.T) {
	f := newFixture(t)
	inside := f.writeLayout(t, testImage(t))

	// The same layout outside the import directory.
	outside := filepath.Join(t.TempDir(), "layout")
	if err := os.Rename(f.writeLayout(t, testImage(t)), outside); err != nil {
		t.Fatal(err)
	}
	refused(t, f, cube.BuildRequest{Image: "oci:" + outside}, outside, "outside cube-server's import directory "+f.b.importDir, "let cubemastercli upload it")
	refused(t, f, cube.BuildRequest{Image: "oci-archive:/etc/passwd"}, "/etc/passwd", "import directory")
	refused(t, f, cube.BuildRequest{Image: "docker-archive:../../../../../../etc/passwd"}, "import directory")
	refused(t, f, cube.BuildRequest{Image: "oci-archive:/nonexistent/dir/x.tar"}, "import directory")
	// A link in the import directory to a file outside it is outside.
	link := filepath.Join(f.b.importDir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	refused(t, f, cube.BuildRequest{Image: "oci:" + link}, "a link to "+outside)

	// Inside, by absolute path or relative to the import directory.
	for _, ref := range []string{"oci:" + inside, "oci:" + filepath.Base(inside)} {
		if j := f.wait(t, f.build(t, cube.BuildRequest{Image: ref}).ID); j.Phase != "READY" {
			t.Fatalf("%s: %+v", ref, j)
		}
	}

	// What holds images is for root only.
	for _, d := range []string{"images", "rootfs", "imports"} {
		if st, err := os.Stat(filepath.Join(f.dataDir, d)); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want mode 0700", d, st.Mode(), err)
		}
	}
}

func dockerArchive(t *testing.T, img v1.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	tag, _ := name.NewTag("example.com/app:v1")
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestImportArchive(t *testing.T) {
	f := newFixture(t)
	image, err := f.b.ImportArchive(context.Background(), "docker-archive", bytes.NewReader(dockerArchive(t, testImage(t))))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(image, "docker-archive:"+f.b.importDir+"/upload-") {
		t.Fatalf("ImportArchive = %q, want docker-archive:%s/upload-...", image, f.b.importDir)
	}
	path := strings.TrimPrefix(image, "docker-archive:")
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("upload %s: %v %v", path, st, err)
	}
	if j := f.wait(t, f.build(t, cube.BuildRequest{Image: image}).ID); j.Phase != "READY" {
		t.Fatalf("build from the upload: %+v", j)
	}
	// The upload served its build and is gone.
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("upload still there after its build: %v", err)
	}

	_, err = f.b.ImportArchive(context.Background(), "oci", strings.NewReader("x"))
	if cube.KindOf(err) != cube.Invalid || !strings.Contains(err.Error(), "oci-archive or docker-archive") {
		t.Errorf("kind oci: %v", err)
	}
}

func TestImportArchiveTooLarge(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits.MaxBytes = 1 << 10 })
	_, err := f.b.ImportArchive(context.Background(), "oci-archive", io.LimitReader(zeros{}, 4<<10))
	if cube.KindOf(err) != cube.TooLarge || !strings.Contains(err.Error(), "--max-image-bytes") {
		t.Fatalf("oversized upload: %v, want TooLarge naming --max-image-bytes", err)
	}
	if ents, _ := os.ReadDir(f.b.importDir); len(ents) != 0 {
		t.Errorf("import directory holds %v after a refused upload", ents)
	}
}

// Uploads no build has used yet hold at most two images' worth of disk;
// an upload cut off half-way is the client's to send again and leaves
// nothing behind.
func TestUnusedUploadsAreBounded(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits.MaxBytes = 1 << 10 })
	for i := 0; i < 2; i++ {
		if _, err := f.b.ImportArchive(context.Background(), "oci-archive", io.LimitReader(zeros{}, 1<<10)); err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
	}
	_, err := f.b.ImportArchive(context.Background(), "oci-archive", io.LimitReader(zeros{}, 16))
	if cube.KindOf(err) != cube.Capacity || !strings.Contains(err.Error(), "build from them") {
		t.Fatalf("third upload while two wait: %v, want Capacity", err)
	}
	f.b.sweepUploads(0)
	_, err = f.b.ImportArchive(context.Background(), "oci-archive", io.MultiReader(io.LimitReader(zeros{}, 100), failing{}))
	if cube.KindOf(err) != cube.Invalid || !strings.Contains(err.Error(), "send it again") {
		t.Fatalf("cut-off upload: %v, want Invalid", err)
	}
	if ents, _ := os.ReadDir(f.b.importDir); len(ents) != 0 {
		t.Errorf("import directory holds %v after a cut-off upload", ents)
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// bombLayer is a gzip layer holding one file of n zero bytes.
func bombLayer(t *testing.T, n int64) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "srv/bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: n})
	io.CopyN(tw, zeros{}, n)
	tw.Close()
	zw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestUnpackLimitFailsBuild(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits.MaxFileBytes = 1 << 20 })
	dir := f.writeLayout(t, testImage(t, bombLayer(t, 32<<20)))
	failedBuild(t, f, cube.BuildRequest{Image: "oci:" + dir, TemplateID: "bomb"}, "/srv/bomb", "32 MiB, over the per-file limit of 1 MiB", "cube-server --max-file-bytes")
	if ents, _ := os.ReadDir(filepath.Join(f.dataDir, "rootfs")); len(ents) != 0 {
		t.Errorf("rootfs holds %v after a refused image", ents)
	}
	if tpl := f.template(t, "bomb"); tpl.Status != "failed" || !strings.Contains(tpl.Error, "--max-file-bytes") {
		t.Errorf("template = %s %q", tpl.Status, tpl.Error)
	}

	// The image limit names its own flag.
	g := newFixture(t, func(c *Config) { c.Limits.MaxBytes = 16 << 20 })
	dir = g.writeLayout(t, testImage(t, bombLayer(t, 32<<20)))
	failedBuild(t, g, cube.BuildRequest{Image: "oci:" + dir}, "more than the limit of 16 MiB", "/srv/bomb", "cube-server --max-image-bytes")
}

func TestPlainHTTPRegistryMustBeListed(t *testing.T) {
	host := pushed(t, testImage(t), func(h http.Handler) http.Handler { return h })
	f := newFixture(t)
	failedBuild(t, f, cube.BuildRequest{Image: host + "/demo/app:v1"}, "plain HTTP", "--insecure-registry "+host)
	refused(t, f, cube.BuildRequest{Image: host + "/demo/app:v1", InsecureRegistry: true}, "not listed as insecure", "--insecure-registry "+host)

	g := newFixture(t, func(c *Config) { c.InsecureRegistries = []string{host} })
	if j := g.wait(t, g.build(t, cube.BuildRequest{Image: host + "/demo/app:v1", InsecureRegistry: true}).ID); j.Phase != "READY" {
		t.Fatalf("listed registry: %+v", j)
	}
}

func TestImportsAtOnceAreBounded(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Concurrency = 1 })
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := f.b.ImportArchive(context.Background(), "oci-archive", pr)
		done <- err
	}()
	pw.Write([]byte("first bytes")) // returns once the upload is reading
	_, err := f.b.ImportArchive(context.Background(), "oci-archive", strings.NewReader("x"))
	if cube.KindOf(err) != cube.Capacity || !strings.Contains(err.Error(), "retry") {
		t.Errorf("second upload while one runs: %v, want Capacity", err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.ImportArchive(context.Background(), "oci-archive", strings.NewReader("x")); err != nil {
		t.Errorf("upload after the first ended: %v", err)
	}
}

func TestPullRefusesLayersOverImageLimit(t *testing.T) {
	img := testImage(t, bombLayer(t, 1<<20))
	ls, _ := img.Layers()
	var compressed int64
	for _, l := range ls {
		n, _ := l.Size()
		compressed += n
	}
	host := pushed(t, img, func(h http.Handler) http.Handler { return h })
	f := newFixture(t, func(c *Config) {
		c.InsecureRegistries = []string{host}
		c.Limits.MaxBytes = compressed - 1
	})
	failedBuild(t, f, cube.BuildRequest{Image: host + "/demo/app:v1"}, "compressed, more than the", "cube-server --max-image-bytes")
	if ents, _ := os.ReadDir(filepath.Join(f.dataDir, "images", "blobs", "sha256")); len(ents) != 0 {
		t.Errorf("blob cache holds %d blobs of a refused image", len(ents))
	}
}
