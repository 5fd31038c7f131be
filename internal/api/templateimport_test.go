package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/proxy"
	"cube/internal/testenv"
)

// fakeImporter stores uploads in memory.
type fakeImporter struct {
	*fakeBackend
	max  int64
	got  string
	kind string
}

func (f *fakeImporter) MaxImportBytes() int64 { return f.max }

func (f *fakeImporter) ImportArchive(ctx context.Context, kind string, body io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(body, f.max+1))
	if err != nil {
		return "", err
	}
	if int64(len(b)) > f.max {
		return "", cube.Errorf(cube.TooLarge, "too large")
	}
	f.got, f.kind = string(b), kind
	return kind + ":/imports/upload-1.tar", nil
}

func importEnv(t *testing.T, b cube.Backend) *testEnv {
	t.Helper()
	logs := &testenv.LogBuffer{}
	s, err := NewServer(Config{
		Teams: adminKeys(testKey), MaxTimeout: time.Hour, MaxBodyBytes: 1 << 10,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}, b)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{t: t, srv: serve(t, s, newFake(), proxy.Config{}), logs: logs}
}

func TestImportArchiveRoute(t *testing.T) {
	imp := &fakeImporter{fakeBackend: newFake(), max: 64 << 10}
	e := importEnv(t, imp)

	// Larger than the API's 1 KiB body limit, within the importer's.
	archive := strings.Repeat("x", 32<<10)
	r := e.do("POST", ImportsPath+"?kind=docker-archive", archive, "Content-Type", "application/x-tar")
	var out ImportedArchive
	r.decode(t, http.StatusCreated, &out)
	if out.Image != "docker-archive:/imports/upload-1.tar" || imp.got != archive || imp.kind != "docker-archive" {
		t.Fatalf("answer %+v; importer got %d bytes of %s", out, len(imp.got), imp.kind)
	}
	e.do("POST", ImportsPath, "tar").decode(t, http.StatusCreated, &out)
	if imp.kind != "oci-archive" {
		t.Errorf("default kind %q, want oci-archive", imp.kind)
	}

	e.do("POST", ImportsPath, strings.Repeat("x", 65<<10)).wantError(t, http.StatusRequestEntityTooLarge, "--max-image-bytes")
	e.do("POST", ImportsPath, "tar", "X-API-Key", "wrong").wantError(t, http.StatusUnauthorized, "API key")
	if !strings.Contains(e.logs.String(), `"route":"POST /templates/imports"`) {
		t.Errorf("upload not in the access log:\n%s", e.logs.String())
	}
	// Everything else is the API as before, body limit included.
	r = e.do("POST", "/sandboxes", strings.Repeat(" ", 2<<10))
	if r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("POST /sandboxes with 2 KiB: %d, want 413", r.status)
	}
	var health map[string]any
	if r := e.do("GET", "/health", nil); r.status != 200 || json.Unmarshal(r.body, &health) != nil {
		t.Errorf("GET /health beside uploads: %d %s", r.status, r.body)
	}

	// A backend without uploads answers 501.
	importEnv(t, newFake()).do("POST", ImportsPath, "tar").wantError(t, http.StatusNotImplemented, "not supported")
}

// onlyReader hides a body's length, so the client sends it chunked.
type onlyReader struct{ io.Reader }

// A chunked upload (cubemastercli streams layout directories so) learns
// it is too large only half-way; it still gets 413, not 500.
func TestImportArchiveChunkedTooLarge(t *testing.T) {
	imp := &fakeImporter{fakeBackend: newFake(), max: 64 << 10}
	e := importEnv(t, imp)
	req, _ := http.NewRequest("POST", e.srv.URL+ImportsPath, onlyReader{strings.NewReader(strings.Repeat("x", 80<<10))})
	req.Header.Set("X-API-Key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--max-image-bytes") {
		t.Fatalf("chunked upload over the limit: %d %s, want 413 naming --max-image-bytes", resp.StatusCode, body)
	}
}
