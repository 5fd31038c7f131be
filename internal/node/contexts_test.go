package node_test

import (
	"net/http"
	"testing"
	"time"

	"cube/internal/envd/protocol"
	"cube/internal/nodetest"
)

// The code interpreter's context routes answer without the access token
// by default (the official SDKs send none there) and need it on a node
// told so, in sandboxes of a template built before the setting existed.
func TestCodeContextsNeedToken(t *testing.T) {
	for _, need := range []bool{false, true} {
		n := nodetest.New(t, nodetest.Options{MaxSandboxes: 2, CodeContextsNeedToken: need})
		n.TinyTemplate(t, "tiny")
		f := &fixture{n}
		sb := f.create(t, "tiny", time.Minute)
		target, err := f.Resolve(ctx(t), sb.ID, protocol.CodePort)
		if err != nil {
			t.Fatal(err)
		}
		get := func(token string) int {
			req, _ := http.NewRequest("GET", "http://"+target.Addr+"/contexts", nil)
			if token != "" {
				req.Header.Set("X-Access-Token", token)
			}
			resp, err := nodetest.NoKeepAlive.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := get(sb.EnvdAccessToken); got == http.StatusUnauthorized {
			t.Errorf("need=%v: GET /contexts with the token: 401", need)
		}
		if got := get(""); (got == http.StatusUnauthorized) != need {
			t.Errorf("need=%v: GET /contexts without the token: %d", need, got)
		}
		// envd itself always wants the token.
		if code, _ := f.envd(t, sb, "GET", "/envs", nil, ""); code != http.StatusUnauthorized {
			t.Errorf("need=%v: envd /envs without the token: %d", need, code)
		}
		n.Close()
	}
}
