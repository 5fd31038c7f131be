package api

import (
	"net/http"
	"testing"
)

// E2B's fields that change what a sandbox may do are refused by name when
// this server does not implement them, never accepted and ignored.
func TestUnsupportedE2BFieldsRefused(t *testing.T) {
	e := newEnv(t)
	refused := []struct{ body, field string }{
		{`{"templateID":"base","network":{"egressProxy":{"address":"proxy.example.com:1080"}}}`, "network.egressProxy"},
		{`{"templateID":"base","iam":{"tokens":{"aws":{"audience":"sts.amazonaws.com","tokenType":"jwt"}}}}`, "iam"},
		{`{"templateID":"base","mcp":{"github":{"token":"x"}}}`, "mcp"},
		// encoding/json matches names without regard to case; so does the refusal.
		{`{"templateID":"base","Network":{"EgressProxy":{"address":"p.example:1080"}}}`, "network.egressProxy"},
	}
	for _, route := range []string{"/sandboxes", "/v2/sandboxes"} {
		for _, c := range refused {
			e.do("POST", route, c.body).wantError(t, http.StatusBadRequest, c.field+" is not supported by this server")
		}
	}
	if n := len(e.fake.sandboxes); n != 0 {
		t.Fatalf("%d sandboxes created from refused requests", n)
	}

	// Empty values ask for nothing; fields E2B does not define are ignored
	// so newer SDKs keep working.
	accepted := []string{
		`{"templateID":"base","network":{"rules":{},"egressProxy":null},"iam":null,"mcp":null,"volumeMounts":[]}`,
		`{"templateID":"base","someFutureField":{"rules":{"x":1}}}`,
	}
	for _, body := range accepted {
		e.do("POST", "/v2/sandboxes", body).decode(t, http.StatusCreated, nil)
	}

	sb := e.create("base", nil)
	path := "/sandboxes/" + sb.SandboxID + "/network"
	for _, c := range []struct{ body, field string }{
		{`{"egressProxy":{"address":"proxy.example.com:1080","username":"u","password":"p"}}`, "egressProxy"},
	} {
		e.do("PUT", path, c.body).wantError(t, http.StatusBadRequest, c.field+" is not supported by this server")
	}
	if e.fake.lastNetwork.AllowOut != nil {
		t.Errorf("a refused network update reached the backend: %+v", e.fake.lastNetwork)
	}
	e.do("PUT", path, `{"allowOut":["1.1.1.1"],"rules":{},"egressProxy":null}`).decode(t, http.StatusNoContent, nil)
}
