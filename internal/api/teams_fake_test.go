package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cube/internal/cube"
)

// fakeTeams is the API tests' teams: fixed keys, each standing for a
// caller, kept in memory.
type fakeTeams struct {
	mu    sync.Mutex
	keys  map[string]cube.Caller
	teams map[string]cube.Team
	n     int
	// down, when set, is what every Authenticate fails with: the keys
	// cannot be read.
	down error
}

// adminKeys returns teams whose only team is the first, with keys as its
// admin keys.
func adminKeys(keys ...string) *fakeTeams {
	f := &fakeTeams{keys: map[string]cube.Caller{}, teams: map[string]cube.Team{
		cube.FirstTeam: {ID: cube.FirstTeam, Name: "default", CreatedAt: time.Unix(1, 0).UTC()}}}
	for i, k := range keys {
		f.keys[k] = cube.Caller{Team: cube.FirstTeam, KeyID: fmt.Sprintf("key-%d", i), KeyName: "admin", Admin: true}
	}
	return f
}

// addTeam adds a team with one key of its own.
func (f *fakeTeams) addTeam(teamID, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.teams[teamID] = cube.Team{ID: teamID, Name: teamID}
	f.keys[key] = cube.Caller{Team: teamID, KeyID: "key-" + teamID, KeyName: teamID}
}

func (f *fakeTeams) Authenticate(_ context.Context, key string) (cube.Caller, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return cube.Caller{}, f.down
	}
	c, ok := f.keys[key]
	if !ok {
		return cube.Caller{}, cube.Errorf(cube.Forbidden, "invalid API key")
	}
	return c, nil
}

func (f *fakeTeams) CreateTeam(_ context.Context, name string, q cube.Quotas) (cube.Team, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	t := cube.Team{ID: fmt.Sprintf("team-%d", f.n), Name: name, Quotas: q}
	f.teams[t.ID] = t
	return t, nil
}

func (f *fakeTeams) ListTeams(context.Context) ([]cube.Team, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cube.Team
	for _, t := range f.teams {
		out = append(out, t)
	}
	return out, nil
}

func (f *fakeTeams) GetTeam(_ context.Context, id string) (cube.Team, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.teams[id]
	if !ok {
		return cube.Team{}, cube.Errorf(cube.NotFound, "team %s not found", id)
	}
	return t, nil
}

func (f *fakeTeams) SetQuotas(ctx context.Context, id string, q cube.Quotas) (cube.Team, error) {
	t, err := f.GetTeam(ctx, id)
	if err != nil {
		return t, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Quotas = q
	f.teams[id] = t
	return t, nil
}

func (f *fakeTeams) DeleteTeam(ctx context.Context, id string) error {
	if _, err := f.GetTeam(ctx, id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.teams, id)
	return nil
}

func (f *fakeTeams) CreateKey(ctx context.Context, team, name, createdBy string) (cube.NewAPIKey, error) {
	if _, err := f.GetTeam(ctx, team); err != nil {
		return cube.NewAPIKey{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	key := fmt.Sprintf("e2b_made%d", f.n)
	f.keys[key] = cube.Caller{Team: team, KeyID: fmt.Sprintf("key-made-%d", f.n), KeyName: name}
	return cube.NewAPIKey{APIKey: cube.APIKey{ID: f.keys[key].KeyID, Team: team, Name: name, CreatedBy: createdBy}, Key: key}, nil
}

func (f *fakeTeams) ListKeys(_ context.Context, team string) ([]cube.APIKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cube.APIKey
	for _, c := range f.keys {
		if c.Team == team {
			out = append(out, cube.APIKey{ID: c.KeyID, Team: team, Name: c.KeyName, Admin: c.Admin})
		}
	}
	return out, nil
}

func (f *fakeTeams) RenameKey(_ context.Context, team, keyID, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, c := range f.keys {
		if c.Team == team && c.KeyID == keyID {
			c.KeyName = name
			f.keys[k] = c
			return nil
		}
	}
	return cube.Errorf(cube.NotFound, "API key %s not found", keyID)
}

func (f *fakeTeams) DeleteKey(_ context.Context, team, keyID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, c := range f.keys {
		if c.Team == team && c.KeyID == keyID {
			delete(f.keys, k)
			return nil
		}
	}
	return cube.Errorf(cube.NotFound, "API key %s not found", keyID)
}
