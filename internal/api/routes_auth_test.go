package api

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"cube/internal/api/wire"
	"cube/internal/proxy"
)

// publicRoutes are the only routes served without an API key, each with
// the reason. Anything else a router registers answers 401 without one.
var publicRoutes = map[string]string{
	// Load balancers and orchestrators probe liveness without credentials;
	// the answer holds only "ok" and the server version.
	"GET /health": "liveness probe",
	// Prometheus scrapes without the API key; the answer holds counters
	// and gauges (requests by route and status, sandboxes by state), no
	// IDs, tokens or metadata.
	"GET /metrics": "Prometheus scrape",
	// The API's description is documentation, the same for every server.
	"GET /openapi.yml": "API description",
	// A CA certificate is public by nature: clients fetch it to trust the
	// HTTPS listener, before they could send a key safely.
	"GET /tls/ca.pem": "local CA certificate",
	// The SDKs PUT a COPY step's files to the link GET
	// /templates/{templateID}/files/{hash} answered, without the API key;
	// the link's HMAC signature, bound to the template, hash and expiry,
	// is its authority (checkUploadSignature).
	"PUT " + UploadPath: "signed upload link",
	// The web console's page, script and style hold no data: the browser
	// needs them to show the sign-in form. What the console shows comes
	// from keyed routes (GET /console/api/summary among them).
	"GET /console":               "web console page",
	"GET /console/assets/{file}": "web console script and style",
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// TestEveryRouteNeedsAPIKey walks every route the router registers, so a
// route added later is covered without touching this test.
func TestEveryRouteNeedsAPIKey(t *testing.T) {
	s, err := NewServer(Config{Teams: adminKeys(testKey)}, newFake())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s, newFake(), proxy.Config{})
	wrong := []struct {
		name string
		hdr  http.Header
	}{
		{"no credentials", http.Header{}},
		{"wrong key", http.Header{"X-Api-Key": {"e2b_wrong"}}},
		{"wrong bearer", http.Header{"Authorization": {"Bearer e2b_wrong"}}},
		{"key as basic auth", http.Header{"Authorization": {"Basic " + testKey}}},
		{"empty key", http.Header{"X-Api-Key": {" "}}},
	}
	marked := map[string]bool{}
	for _, rt := range s.routes() {
		op := rt.method + " " + rt.path
		if rt.access == open {
			marked[op] = true
		}
		// Any value works for path parameters: authentication comes first.
		path := pathParam.ReplaceAllString(rt.path, "abc123")
		for _, w := range wrong {
			req, _ := http.NewRequest(rt.method, srv.URL+path, strings.NewReader(`{}`))
			for k, v := range w.hdr {
				req.Header[k] = v
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body wire.Error
			decodeErr := json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			if _, public := publicRoutes[op]; public {
				if res.StatusCode == http.StatusUnauthorized {
					t.Errorf("%s (public) with %s: 401", op, w.name)
				}
				continue
			}
			if res.StatusCode != http.StatusUnauthorized || decodeErr != nil ||
				body.Code != http.StatusUnauthorized || !strings.Contains(body.Message, "API key") {
				t.Errorf("%s with %s: %d %+v (%v), want 401 in E2B's error shape", op, w.name, res.StatusCode, body, decodeErr)
			}
		}
	}
	for op := range marked {
		if _, ok := publicRoutes[op]; !ok {
			t.Errorf("%s is public in the router but not in publicRoutes; say there why it needs no key", op)
		}
	}
	for op := range publicRoutes {
		if !marked[op] {
			t.Errorf("publicRoutes names %s, which the router does not serve as public", op)
		}
	}
}
