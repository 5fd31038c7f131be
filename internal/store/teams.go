package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Team is the persisted record of a team.
type Team struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// Quotas are the team's limits as the core spells them (cube.Quotas);
	// kept as JSON so a new quota needs no change here.
	Quotas []byte `json:"quotas,omitempty"`
}

// APIKey is the persisted record of an API key. Its table is keyed by
// the key's digest (Hash), so checking a key presented with a request is
// one read by primary key; the key itself is never stored.
type APIKey struct {
	Hash      string    `json:"hash"`
	ID        string    `json:"id"`
	Team      string    `json:"team"`
	Name      string    `json:"name"`
	Admin     bool      `json:"admin,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy,omitempty"`
	LastUsed  time.Time `json:"lastUsed,omitzero"`
	// Masked is the key's first and last characters and its length, what
	// lists show of it.
	MaskPrefix string `json:"maskPrefix"`
	MaskSuffix string `json:"maskSuffix"`
	Length     int    `json:"length"`
}

// TeamName holds a team's name for it: the table is keyed by name, so
// two teams of one name cannot both be inserted, whichever nodes make them.
type TeamName struct {
	Name string `json:"name"`
	Team string `json:"team"`
}

// TeamNames is the table of team names.
func (s *Store) TeamNames() Table[TeamName] {
	return Table[TeamName]{s: s, name: "teamnames",
		key: func(v *TeamName) string { return v.Name }, state: func(v *TeamName) string { return v.Team }}
}

// Teams is the table of teams.
func (s *Store) Teams() Table[Team] {
	return Table[Team]{s: s, name: "teams",
		key: func(v *Team) string { return v.ID }, state: func(*Team) string { return "active" }}
}

// APIKeys is the table of API keys, keyed by digest; the state column
// holds the owning team, which lists filter on.
func (s *Store) APIKeys() Table[APIKey] {
	return Table[APIKey]{s: s, name: "apikeys",
		key: func(v *APIKey) string { return v.Hash }, state: func(v *APIKey) string { return v.Team }}
}

// AdoptUnowned gives team every sandbox, template, snapshot, build job
// and volume recorded without one: the records of an install from before
// teams, which all belong to its first team. It changes only the team of
// records that have none, so running it again, or on several nodes of a
// cluster at once, does nothing more.
func (s *Store) AdoptUnowned(ctx context.Context, team string) (int, error) {
	n := 0
	for _, adopt := range []func() (int, error){
		func() (int, error) {
			return adopt(ctx, s.Sandboxes(), team, func(v *Sandbox) *string { return &v.Team })
		},
		func() (int, error) {
			return adopt(ctx, s.Templates(), team, func(v *Template) *string { return &v.Team })
		},
		func() (int, error) { return adopt(ctx, s.Jobs(), team, func(v *Job) *string { return &v.Team }) },
		func() (int, error) { return adopt(ctx, s.Volumes(), team, func(v *Volume) *string { return &v.Team }) },
	} {
		k, err := adopt()
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func adopt[T any](ctx context.Context, t Table[T], team string, field func(*T) *string) (int, error) {
	all, err := t.List(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range all {
		if *field(v) != "" {
			continue
		}
		err := t.Update(ctx, t.key(v), func(cur *T) error {
			if f := field(cur); *f == "" {
				*f = team
			}
			return nil
		})
		if err != nil && err != ErrNotFound {
			return n, fmt.Errorf("give %s %s to team %s: %w", t.name, t.key(v), team, err)
		}
		n++
	}
	return n, nil
}

// VisibleTo reports whether team may use the template: its own, or a
// public one. The empty team is the node itself, which sees every one.
func (t *Template) VisibleTo(team string) bool {
	return team == "" || t.Team == team || t.Public
}

// FindTemplate returns the template name (an ID or an alias) means to
// team, or nil: an ID of a template it may use; an alias of its own
// first, then of a public template (the oldest, all being in creation
// order). Aliases are unique within a team, so two teams' templates may
// share one. The empty team finds any template.
func FindTemplate(all []*Template, team, name string) *Template {
	var public *Template
	for _, t := range all {
		if !t.VisibleTo(team) {
			continue
		}
		if t.ID == name {
			return t
		}
		if !slices.Contains(t.Aliases, name) {
			continue
		}
		if team == "" || t.Team == team {
			return t
		}
		if public == nil {
			public = t
		}
	}
	return public
}

// OwnTemplate returns the team's own template with ID or alias name, or
// nil: what a new name of the team's would clash with.
func OwnTemplate(all []*Template, team, name string) *Template {
	for _, t := range all {
		if (team == "" || t.Team == team) && (t.ID == name || slices.Contains(t.Aliases, name)) {
			return t
		}
	}
	return nil
}
