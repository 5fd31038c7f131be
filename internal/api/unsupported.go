package api

import (
	"encoding/json"
	"reflect"
	"strings"

	"cube/internal/api/wire"
)

// unsupportedFields are the request fields of E2B's API (spec/openapi.yml of
// e2b-dev/E2B) that this server does not implement. Each changes what a
// sandbox may do or reach, so a sandbox served without it is not the one
// asked for: a request that sets one is refused with 400 naming it, on
// every route whose body is of that type. Fields E2B does not define are
// still ignored, so newer SDKs keep working. Implementing a field means
// deleting its line here (and its mention in api/openapi.yml, which a test
// keeps in step).
var unsupportedFields = []unsupportedField{
	{wire.NewSandbox{}, "network.egressProxy"}, // SOCKS5 proxy for egress
	{wire.NewSandbox{}, "iam"},                 // workload identity tokens
	{wire.NewSandbox{}, "mcp"},                 // MCP gateway
	{wire.NetworkUpdate{}, "egressProxy"},      // as network.egressProxy, on a running sandbox
}

// unsupportedField is one dotted JSON path in the body of one wire type.
type unsupportedField struct {
	body any
	path string
}

// refuseUnsupported returns a 400 naming the first field of unsupportedFields
// that body (a valid JSON object decoded into v) sets. A field set to null,
// {} or [] asks for nothing and passes. Keys match without regard to case,
// as encoding/json matches them.
func refuseUnsupported(body []byte, v any) error {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for _, f := range unsupportedFields {
		if reflect.TypeOf(f.body) != t {
			continue
		}
		if sets(body, strings.Split(f.path, ".")) {
			return badRequest("%s is not supported by this server: send the request without it", f.path)
		}
	}
	return nil
}

// sets reports whether the JSON value raw has a non-empty value at path.
func sets(raw []byte, path []string) bool {
	if len(path) == 0 {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return false
		}
		switch x := v.(type) {
		case nil:
			return false
		case map[string]any:
			return len(x) > 0
		case []any:
			return len(x) > 0
		}
		return true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return false
	}
	// encoding/json gives an exact match precedence over a case-insensitive
	// one; any key naming the field sets it here.
	for k, v := range obj {
		if strings.EqualFold(k, path[0]) && sets(v, path[1:]) {
			return true
		}
	}
	return false
}
