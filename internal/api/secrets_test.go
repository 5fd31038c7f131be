package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/secrets"
)

// secretsBackend is the fake node with a real secret store behind the
// /secrets routes, as the server's service keeps it.
type secretsBackend struct {
	*fakeBackend
	store *secrets.Store
}

func (b secretsBackend) CreateSecret(_ context.Context, team, name, value string, md map[string]string) (cube.SecretInfo, error) {
	i, err := b.store.Create(team, name, value, md)
	return secretInfoOf(i), err
}

func (b secretsBackend) UpdateSecret(_ context.Context, team, ref, value string, md map[string]string) (cube.SecretInfo, error) {
	i, err := b.store.Update(team, ref, value, md)
	return secretInfoOf(i), err
}

func (b secretsBackend) GetSecret(_ context.Context, team, ref string) (cube.SecretInfo, error) {
	i, err := b.store.Get(team, ref)
	return secretInfoOf(i), err
}

func (b secretsBackend) ListSecrets(_ context.Context, team string) ([]cube.SecretInfo, error) {
	var out []cube.SecretInfo
	for _, i := range b.store.List(team) {
		out = append(out, secretInfoOf(i))
	}
	return out, nil
}

func (b secretsBackend) DeleteSecret(_ context.Context, team, ref string) error {
	return b.store.Delete(team, ref)
}

func secretInfoOf(i secrets.Info) cube.SecretInfo {
	return cube.SecretInfo{ID: i.ID, Team: i.Team, Name: i.Name, Version: i.Version, Metadata: i.Metadata, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}

var _ cube.Secrets = secretsBackend{}

// TestSecretsPerTeam: each team's key sees and changes only its team's
// secrets. Two teams may use one name; another team's secret, by ID or
// name, is 404 (never 403) and absent from lists; an admin key naming a
// team in X-Team-ID acts for that team.
func TestSecretsPerTeam(t *testing.T) {
	const teamB, keyB = "team-b", "e2b_teamb0123456789abcdef0123456789abcdef0"
	store, err := secrets.Open(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	fake := newFake()
	e := newEnvWith(t, fake, secretsBackend{fakeBackend: fake, store: store}, func(c *envConfig) {
		teams := adminKeys(testKey)
		teams.addTeam(teamB, keyB)
		c.Teams = teams
	})
	asB := []string{"X-API-Key", keyB}

	create := func(hdr []string, value string) wire.Secret {
		t.Helper()
		r := e.do("POST", "/secrets", wire.NewSecret{Name: "OPENAI_KEY", Value: value}, hdr...)
		if r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		var s wire.Secret
		if err := json.Unmarshal(r.body, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	list := func(hdr ...string) []wire.Secret {
		t.Helper()
		r := e.do("GET", "/secrets", nil, hdr...)
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		var out []wire.Secret
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	a := create(nil, "value-of-a")
	b := create(asB, "value-of-b")
	if a.SecretID == b.SecretID || a.Name != b.Name {
		t.Fatalf("two teams' secrets of one name: %+v and %+v", a, b)
	}
	if r := e.do("POST", "/secrets", wire.NewSecret{Name: "openai_key", Value: "x"}, asB...); r.status != http.StatusConflict {
		t.Errorf("a duplicate name within team B: %d %s, want 409", r.status, r.body)
	}

	if l := list(asB...); len(l) != 1 || l[0].SecretID != b.SecretID {
		t.Errorf("team B's list: %+v", l)
	}
	if l := list(); len(l) != 1 || l[0].SecretID != a.SecretID {
		t.Errorf("team A's list: %+v", l)
	}
	// The admin key acting for team B sees team B's.
	if l := list("X-Team-ID", teamB); len(l) != 1 || l[0].SecretID != b.SecretID {
		t.Errorf("team B's list through the admin key: %+v", l)
	}

	// Team A's secret is not there for team B, whatever it does.
	for _, c := range []struct {
		method string
		body   any
	}{
		{"GET", nil},
		{"POST", wire.SecretUpdate{Value: "taken-over"}},
		{"DELETE", nil},
	} {
		r := e.do(c.method, "/secrets/"+a.SecretID, c.body, asB...)
		r.wantError(t, http.StatusNotFound, "not found")
	}
	// By name, team B finds its own.
	r := e.do("GET", "/secrets/OPENAI_KEY", nil, asB...)
	var got wire.Secret
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.SecretID != b.SecretID {
		t.Errorf("team B's secret by name: %d %s", r.status, r.body)
	}
	if v, err := store.Value(cube.FirstTeam, a.SecretID); err != nil || v != "value-of-a" {
		t.Errorf("team A's value after team B's attempts: %q, %v", v, err)
	}

	// Team B deleting its own leaves team A's.
	if r := e.do("DELETE", "/secrets/openai_key", nil, asB...); r.status != http.StatusNoContent {
		t.Fatalf("team B's delete: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/secrets/openai_key", nil); r.status != http.StatusOK {
		t.Errorf("team A's secret after team B deleted its own: %d %s", r.status, r.body)
	}
	if l := list(asB...); len(l) != 0 {
		t.Errorf("team B's list after its delete: %+v", l)
	}
}
