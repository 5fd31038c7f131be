package envd_test

import (
	"bytes"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/envd"
	"cube/internal/envd/users"
)

// inside reports whether a relative request path stays under dir once
// resolved; the fuzzer only sends those (below a directory of its own in
// the user's home, where relative paths resolve), because envd (correctly)
// writes wherever a path says and this runs on the host.
func inside(dir, p string) bool {
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "~") || strings.ContainsRune(p, 0) {
		return false
	}
	rel, err := filepath.Rel(dir, filepath.Join(dir, p))
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

// FuzzUpload sends arbitrary uploads (octet-stream or multipart, with
// arbitrary names) and checks that envd answers with a status the
// protocol allows, writes nothing outside the paths asked for, and keeps
// serving.
func FuzzUpload(f *testing.F) {
	f.Add("a.txt", "", []byte("hello"), false)
	f.Add("dir/b.bin", "", []byte{0, 1, 2}, false)
	f.Add("", "c.txt", []byte("multi"), true)
	f.Add("d", "../x", []byte("traversal"), true)
	f.Add("e/", "", []byte{}, false)
	me, err := users.Current()
	if err != nil {
		f.Fatal(err)
	}
	dir, err := os.MkdirTemp(me.Home, "cube-envd-fuzz-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	below := func(p string) string { return filepath.Base(dir) + "/" + p }
	srv, err := envd.New(envd.Options{Logger: slog.New(slog.DiscardHandler), DefaultWorkdir: f.TempDir(), DefaultUser: me.Name})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, path, filename string, data []byte, multi bool) {
		var body bytes.Buffer
		ctype := "application/octet-stream"
		if multi {
			if (path == "" && !inside(dir, filename)) || (path != "" && !inside(dir, path)) {
				return
			}
			if path == "" {
				filename = below(filename)
			} else {
				path = below(path)
			}
			mw := multipart.NewWriter(&body)
			part, err := mw.CreateFormFile("file", filename)
			if err != nil {
				return
			}
			part.Write(data)
			mw.Close()
			ctype = mw.FormDataContentType()
		} else {
			if !inside(dir, path) {
				return
			}
			path = below(path)
			body.Write(data)
		}
		q := url.Values{}
		if path != "" {
			q.Set("path", path)
		}
		req := httptest.NewRequest("POST", "/files?"+q.Encode(), &body)
		req.Header.Set("Content-Type", ctype)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 403, 404, 409, 413, 415, 507:
		default:
			t.Fatalf("upload path=%q filename=%q multi=%v: status %d %s", path, filename, multi, rec.Code, rec.Body)
		}
		health := httptest.NewRecorder()
		h.ServeHTTP(health, httptest.NewRequest("GET", "/health", nil))
		if health.Code != http.StatusNoContent {
			t.Fatalf("envd stopped answering /health: %d", health.Code)
		}
		io.Copy(io.Discard, rec.Body)
	})
}

// currentUser is the account the test runs as, the default user of the
// envd under test.
func currentUser(tb testing.TB) string {
	u, err := users.Current()
	if err != nil {
		tb.Fatal(err)
	}
	return u.Name
}
