package api

import (
	"io"
	"net/http"
	"testing"

	"cube/internal/proxy"
)

// The console's routes reach Config.Console, the data route only with the
// key; a server without a console answers 404 in E2B's error shape.
func TestConsoleRoutes(t *testing.T) {
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "console "+r.URL.Path)
	})
	s, err := NewServer(Config{Teams: adminKeys(testKey), Console: console}, newFake())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s, newFake(), proxy.Config{})
	get := func(path, key string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, key string
		status    int
		body      string
	}{
		{"/console", "", 200, "console /console"},
		{"/console/assets/app.js", "", 200, "console /console/assets/app.js"},
		{"/console/api/summary", testKey, 200, "console /console/api/summary"},
		{"/console/api/summary", "", 401, `{"code":401,"message":"missing or invalid API key: send it in the X-API-Key header"}`},
	} {
		status, body := get(tc.path, tc.key)
		if status != tc.status || body != tc.body && body != tc.body+"\n" {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, status, body, tc.status, tc.body)
		}
	}

	bare, err := NewServer(Config{Teams: adminKeys(testKey)}, newFake())
	if err != nil {
		t.Fatal(err)
	}
	srv = serve(t, bare, newFake(), proxy.Config{})
	if status, body := get("/console", ""); status != 404 || body != `{"code":404,"message":"this server has no web console"}`+"\n" {
		t.Errorf("GET /console without a console: %d %q", status, body)
	}
}
