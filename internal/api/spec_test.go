package api

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	spec "cube/api"
	"cube/internal/api/wire"
	"cube/internal/proxy"
)

// loadSpec parses api/openapi.yml into plain maps.
func loadSpec(t *testing.T) map[string]any {
	t.Helper()
	var raw any
	if err := yaml.Unmarshal(spec.OpenAPI, &raw); err != nil {
		t.Fatalf("api/openapi.yml: %v", err)
	}
	doc, ok := plain(raw).(map[string]any)
	if !ok {
		t.Fatal("api/openapi.yml is not a mapping")
	}
	return doc
}

func plain(v any) any {
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, v := range x {
			m[fmt.Sprint(k)] = plain(v)
		}
		return m
	case []any:
		for i := range x {
			x[i] = plain(x[i])
		}
	}
	return v
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// TestSpecMatchesRouter keeps api/openapi.yml and the served routes in step:
// every route is documented and every documented operation is served.
func TestSpecMatchesRouter(t *testing.T) {
	doc := loadSpec(t)
	var inSpec []string
	for path, item := range obj(doc["paths"]) {
		for _, m := range httpMethods {
			if _, ok := obj(item)[m]; ok {
				inSpec = append(inSpec, strings.ToUpper(m)+" "+path)
			}
		}
	}
	s, err := NewServer(Config{Teams: adminKeys("k")}, newFake())
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, rt := range s.routes() {
		served = append(served, rt.method+" "+rt.path)
	}
	sort.Strings(inSpec)
	sort.Strings(served)
	for _, op := range served {
		if !slices.Contains(inSpec, op) {
			t.Errorf("%s is served but not in api/openapi.yml", op)
		}
	}
	for _, op := range inSpec {
		if !slices.Contains(served, op) {
			t.Errorf("%s is in api/openapi.yml but not served", op)
		}
	}
	// Public routes are exactly those the spec exempts from security.
	for _, rt := range s.routes() {
		op := obj(obj(obj(doc["paths"])[rt.path])[strings.ToLower(rt.method)])
		sec, declared := op["security"]
		unsecured := declared && len(sec.([]any)) == 0
		if unsecured != (rt.access == open) {
			t.Errorf("%s %s: public=%v in the router, open=%v in the spec", rt.method, rt.path, rt.access == open, unsecured)
		}
	}
}

// TestSpecIsWellFormed checks what a spec reader relies on: every $ref
// resolves, every path parameter is declared, every operation has a
// success answer and the 4xx answers the router can give.
func TestSpecIsWellFormed(t *testing.T) {
	doc := loadSpec(t)
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				if resolve(doc, ref) == nil {
					t.Errorf("%s: $ref %q does not resolve", at, ref)
				}
			}
			for k, v := range x {
				walk(v, at+"/"+k)
			}
		case []any:
			for i, v := range x {
				walk(v, fmt.Sprintf("%s[%d]", at, i))
			}
		}
	}
	walk(doc, "")

	for path, item := range obj(doc["paths"]) {
		declared := map[string]bool{}
		collect := func(params any) {
			for _, p := range params.([]any) {
				p := obj(p)
				if ref, ok := p["$ref"].(string); ok {
					p = obj(resolve(doc, ref))
				}
				if p["in"] == "path" {
					declared[p["name"].(string)] = true
				}
			}
		}
		if ps, ok := obj(item)["parameters"]; ok {
			collect(ps)
		}
		for _, m := range httpMethods {
			op, ok := obj(item)[m]
			if !ok {
				continue
			}
			opDeclared := map[string]bool{}
			for k := range declared {
				opDeclared[k] = true
			}
			if ps, ok := obj(op)["parameters"]; ok {
				for _, p := range ps.([]any) {
					p := obj(p)
					if ref, ok := p["$ref"].(string); ok {
						p = obj(resolve(doc, ref))
					}
					if p["in"] == "path" {
						opDeclared[p["name"].(string)] = true
					}
				}
			}
			for _, seg := range strings.Split(path, "/") {
				if strings.HasPrefix(seg, "{") && !opDeclared[strings.Trim(seg, "{}")] {
					t.Errorf("%s %s: path parameter %s not declared", m, path, seg)
				}
			}
			responses := obj(obj(op)["responses"])
			ok2xx := false
			for code := range responses {
				ok2xx = ok2xx || strings.HasPrefix(code, "2")
			}
			if !ok2xx {
				t.Errorf("%s %s: no 2xx response", m, path)
			}
			if _, public := obj(op)["security"]; !public {
				if _, ok := responses["401"]; !ok {
					t.Errorf("%s %s: authenticated but no 401 response", m, path)
				}
			}
			if strings.Contains(path, "{sandboxID}") {
				for _, code := range []string{"400", "404"} {
					if _, ok := responses[code]; !ok {
						t.Errorf("%s %s: takes a sandbox id but documents no %s", m, path, code)
					}
				}
			}
		}
	}
}

func resolve(doc map[string]any, ref string) any {
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	var cur any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		cur = obj(cur)[part]
		if cur == nil {
			return nil
		}
	}
	return cur
}

// schemaTypes maps every object schema of the spec to the Go type that is
// encoded or decoded for it.
var schemaTypes = map[string]any{
	"Error": wire.Error{}, "AuditEntry": wire.AuditEntry{}, "ProxyError": proxy.ErrorBody{}, "Health": wire.Health{}, "ImportedArchive": ImportedArchive{},
	"NetworkConfig": wire.NetworkConfig{}, "NetworkUpdate": wire.NetworkUpdate{},
	"NetworkRule": wire.NetworkRule{}, "NetworkTransform": wire.NetworkTransform{},
	"Node": wire.Node{}, "NodeStatusChange": wire.NodeStatusChange{},
	"Team": wire.Team{}, "NewTeam": wire.NewTeam{}, "Quotas": wire.Quotas{}, "NewTeamAPIKey": wire.NewTeamAPIKey{},
	"IdentifierMaskingDetails": wire.IdentifierMaskingDetails{}, "TeamAPIKey": wire.TeamAPIKey{},
	"CreatedTeamAPIKey": wire.CreatedTeamAPIKey{}, "AdminSandboxKillResult": wire.AdminSandboxKillResult{},
	"AdminBuildCancelResult": wire.AdminBuildCancelResult{}, "TeamMetric": wire.TeamMetric{},
	"MaxTeamMetric": wire.MaxTeamMetric{}, "TeamUsage": wire.TeamUsage{},
	"NewSecret": wire.NewSecret{}, "SecretUpdate": wire.SecretUpdate{}, "Secret": wire.Secret{},
	"AutoResume": wire.AutoResume{}, "NewSandbox": wire.NewSandbox{},
	"Sandbox": wire.Sandbox{}, "Lifecycle": wire.Lifecycle{}, "SandboxDetail": wire.SandboxDetail{},
	"ListedSandbox": wire.ListedSandbox{}, "TimeoutRequest": wire.TimeoutRequest{},
	"RefreshRequest": wire.RefreshRequest{}, "ConnectRequest": wire.ConnectRequest{},
	"PauseRequest": wire.PauseRequest{}, "SandboxMetric": wire.SandboxMetric{},
	"SandboxesWithMetrics": wire.SandboxesWithMetrics{}, "SandboxLog": wire.SandboxLog{},
	"SandboxLogEntry": wire.SandboxLogEntry{}, "SandboxLogs": wire.SandboxLogs{},
	"SandboxLogsV2": wire.SandboxLogsV2{}, "TeamUser": wire.TeamUser{}, "Template": wire.Template{},
	"TemplateBuild": wire.TemplateBuild{}, "TemplateWithBuilds": wire.TemplateWithBuilds{},
	"SnapshotRequest": wire.SnapshotRequest{}, "SnapshotInfo": wire.SnapshotInfo{}, "TemplateAliasResponse": wire.TemplateAliasResponse{},
	"ForkRequest": wire.ForkRequest{}, "CloneRequest": wire.CloneRequest{}, "ForkResult": wire.ForkResult{},
	"RollbackRequest": wire.RollbackRequest{}, "RollbackResult": wire.RollbackResult{},
	"VolumeMount": wire.VolumeMount{}, "NewVolume": wire.NewVolume{}, "Volume": wire.Volume{},
	"VolumeAndToken": wire.VolumeAndToken{}, "VolumeEntryStat": wire.VolumeEntryStat{}, "VolumeAttr": wire.VolumeAttr{},
}

// TestSpecSchemasMatchWireTypes checks each schema's properties against the
// JSON fields of its Go type: the same names, and "required" exactly for
// the fields always encoded (nullable fields may be either).
func TestSpecSchemasMatchWireTypes(t *testing.T) {
	doc := loadSpec(t)
	schemas := obj(obj(doc["components"])["schemas"])
	for name, sc := range schemas {
		sc := obj(sc)
		if sc["type"] != "object" {
			continue
		}
		goType, ok := schemaTypes[name]
		if !ok {
			t.Errorf("schema %s has no Go type in schemaTypes", name)
			continue
		}
		props := obj(sc["properties"])
		required := map[string]bool{}
		if req, ok := sc["required"].([]any); ok {
			for _, r := range req {
				required[r.(string)] = true
			}
		}
		rt := reflect.TypeOf(goType)
		seen := map[string]bool{}
		for i := 0; i < rt.NumField(); i++ {
			tag := rt.Field(i).Tag.Get("json")
			field, opts, _ := strings.Cut(tag, ",")
			if field == "" || field == "-" {
				continue
			}
			seen[field] = true
			p, ok := props[field]
			if !ok {
				t.Errorf("%s: Go field %q is not a property in the spec", name, field)
				continue
			}
			nullable := obj(p)["nullable"] == true
			omitempty := strings.Contains(opts, "omitempty")
			if omitempty && required[field] {
				t.Errorf("%s.%s is required in the spec but may be omitted", name, field)
			}
			if !omitempty && !nullable && !required[field] {
				t.Errorf("%s.%s is always sent but not required in the spec", name, field)
			}
		}
		for p := range props {
			if !seen[p] {
				t.Errorf("%s: spec property %q has no Go field", name, p)
			}
		}
	}
	for name := range schemaTypes {
		if _, ok := schemas[name]; !ok {
			t.Errorf("schemaTypes names %s, which the spec lacks", name)
		}
	}
}

// TestSpecNamesUnsupportedFields keeps the spec's word on refused E2B
// fields in step with unsupportedFields: each schema names exactly the
// fields refused in its bodies.
func TestSpecNamesUnsupportedFields(t *testing.T) {
	schemas := obj(obj(loadSpec(t)["components"])["schemas"])
	for name, goType := range schemaTypes {
		desc, _ := obj(schemas[name])["description"].(string)
		_, listed, _ := strings.Cut(desc, "anything but null, {} or []:")
		listed, _, _ = strings.Cut(listed, ". ")
		var inSpec []string
		for _, f := range strings.Split(listed, ",") {
			if f = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), ".")); f != "" {
				inSpec = append(inSpec, f)
			}
		}
		var refused []string
		for _, f := range unsupportedFields {
			if reflect.TypeOf(f.body) == reflect.TypeOf(goType) {
				refused = append(refused, f.path)
			}
		}
		sort.Strings(inSpec)
		sort.Strings(refused)
		if !slices.Equal(inSpec, refused) {
			t.Errorf("schema %s names refused fields %q; the server refuses %q", name, inSpec, refused)
		}
	}
}
