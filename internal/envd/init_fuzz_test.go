package envd_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"cube/internal/envd"
	"cube/internal/envd/protocol"
	"cube/internal/envd/state"
)

// FuzzInit sends arbitrary /init bodies, with or without the current
// token, and checks that envd answers with a status the protocol allows,
// that a refused request changes nothing, and that no accepted request was
// stamped further ahead than the allowed clock skew.
func FuzzInit(f *testing.F) {
	now := time.Now()
	for _, seed := range []string{
		``,
		`{}`,
		`{"accessToken":"t2","timestamp":"` + now.Format(time.RFC3339Nano) + `"}`,
		`{"accessToken":"t3","timestamp":"` + now.Add(time.Hour).Format(time.RFC3339Nano) + `"}`,
		`{"timestamp":"` + now.Add(-time.Hour).Format(time.RFC3339Nano) + `"}`,
		`{"timestamp":"9999-12-31T23:59:59Z"}`,
		`{"timestamp":"0001-01-01T00:00:00Z"}`,
		`{"envVars":{"A":"b"},"defaultUser":"root","defaultWorkdir":"/tmp"}`,
		`{"defaultWorkdir":"relative"}`,
		`{"timestamp":12}`,
		`{not json`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	srv, err := envd.New(envd.Options{Logger: slog.New(slog.DiscardHandler), DefaultUser: currentUser(f), AccessToken: "t1"})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte, withToken bool) {
		before := srv.State.Token()
		req := httptest.NewRequest("POST", "/init", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if withToken {
			req.Header.Set("X-Access-Token", before)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusNoContent:
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusConflict, http.StatusRequestEntityTooLarge:
			if got := srv.State.Token(); got != before {
				t.Fatalf("/init %q answered %d but changed the token to %q", body, rec.Code, got)
			}
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != rec.Code || e.Message == "" {
				t.Fatalf("/init %q answered %d with %q, not the E2B error shape", body, rec.Code, rec.Body)
			}
			return
		default:
			t.Fatalf("/init %q: status %d %s", body, rec.Code, rec.Body)
		}
		if !withToken {
			t.Fatalf("/init %q without the token was applied", body)
		}
		var in protocol.Init
		if len(strings.TrimSpace(string(body))) > 0 {
			if err := json.Unmarshal(body, &in); err != nil {
				t.Fatalf("/init %q applied although it is not valid JSON: %v", body, err)
			}
		}
		if in.Timestamp != nil && in.Timestamp.Sub(time.Now()) > state.MaxInitClockSkew {
			t.Fatalf("/init stamped %s was applied, more than %s ahead", in.Timestamp, state.MaxInitClockSkew)
		}
	})
}
