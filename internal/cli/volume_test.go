package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/api/wire"
)

// volServer plays the volume routes for one volume "data", whose files
// live in dir.
type volServer struct {
	dir   string
	reqs  []string
	gone  bool
	token string
}

const volID = "vol-aaaaaaaaaaaaaaaaaaaa"

func (s *volServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.reqs = append(s.reqs, r.Method+" "+r.URL.Path)
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	if r.Header.Get("X-API-Key") != "e2b_cli" {
		reply(401, wire.Error{Code: 401, Message: "missing or invalid API key"})
		return
	}
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	q := r.URL.Query()
	switch r.Method + " " + r.URL.Path {
	case "GET /volumes":
		reply(200, []wire.Volume{{VolumeID: volID, Name: "data", SizeMB: 16, CreatedAt: created}})
	case "POST /volumes":
		var nv wire.NewVolume
		json.NewDecoder(r.Body).Decode(&nv)
		reply(201, wire.VolumeAndToken{VolumeID: volID, Name: nv.Name, Token: s.token, SizeMB: *nv.SizeMB, CreatedAt: created})
	case "GET /volumes/" + volID:
		used := int64(1)
		reply(200, wire.VolumeAndToken{VolumeID: volID, Name: "data", Token: s.token, SizeMB: 16, UsedMB: &used, CreatedAt: created})
	case "DELETE /volumes/" + volID:
		s.gone = true
		w.WriteHeader(204)
	case "PUT /volumecontent/" + volID + "/file":
		data, _ := io.ReadAll(r.Body)
		os.WriteFile(filepath.Join(s.dir, q.Get("path")), data, 0o644)
		reply(201, wire.VolumeEntryStat{Name: filepath.Base(q.Get("path")), Path: q.Get("path"), Type: "file", Size: int64(len(data))})
	case "GET /volumecontent/" + volID + "/file":
		data, err := os.ReadFile(filepath.Join(s.dir, q.Get("path")))
		if err != nil {
			reply(404, wire.Error{Code: 404, Message: "path not found in the volume"})
			return
		}
		w.Write(data)
	case "GET /volumecontent/" + volID + "/dir":
		reply(200, []wire.VolumeEntryStat{{Name: "a.txt", Path: "/a.txt", Type: "file", Size: 5, Mode: 0o644, UID: 1000, GID: 1000, Mtime: created}})
	default:
		reply(404, wire.Error{Code: 404, Message: "no route"})
	}
}

func TestVolumeCommands(t *testing.T) {
	s := &volServer{dir: t.TempDir(), token: "vtk_secret"}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Setenv("CUBE_API_URL", srv.URL)
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("CUBE_API_KEY", "e2b_cli")

	out, _, err := run(t, "volume", "create", "data", "--size-mb", "16")
	if err != nil || !strings.Contains(out, "volume_id: "+volID) || !strings.Contains(out, "16.0 MiB") {
		t.Fatalf("create: %q, %v", out, err)
	}
	out, _, err = run(t, "volume", "list")
	if err != nil || !strings.Contains(fieldsOf(out), volID+" data 16.0 MiB 2026-03-04T05:06:07Z") {
		t.Fatalf("list: %q, %v", out, err)
	}
	out, _, err = run(t, "volume", "info", "data")
	if err != nil || !strings.Contains(out, "token: vtk_secret") || !strings.Contains(out, "used: 1.0 MiB") {
		t.Fatalf("info: %q, %v", out, err)
	}

	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, []byte("hello"), 0o600)
	out, _, err = run(t, "volume", "put", "data", "/a.txt", src)
	if err != nil || !strings.Contains(out, "/a.txt (5 bytes)") {
		t.Fatalf("put: %q, %v", out, err)
	}
	out, _, err = run(t, "volume", "get", "data", "/a.txt")
	if err != nil || out != "hello" {
		t.Fatalf("get: %q, %v", out, err)
	}
	_, _, err = run(t, "volume", "get", "data", "/missing")
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("get of a missing file: %v", err)
	}
	out, _, err = run(t, "volume", "ls", volID)
	if err != nil || !strings.Contains(fieldsOf(out), "file 0644 1000:1000 5 2026-03-04T05:06:07Z /a.txt") {
		t.Fatalf("ls: %q, %v", out, err)
	}

	_, errOut, err := run(t, "volume", "rm", "nope", "data")
	if err == nil || !strings.Contains(errOut, `no volume is called "nope"`) || !s.gone {
		t.Fatalf("rm: %q, %v (deleted: %v)", errOut, err, s.gone)
	}
}
