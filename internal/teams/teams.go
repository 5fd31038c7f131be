// Package teams keeps the service's tenants: teams, their API keys and
// quotas, in the state store that every node of a cluster shares. A key is
// kept only as its SHA-256 digest, which is also its record's primary key,
// so checking the key a request presents is one read, cached for less
// than a second: a key revoked on one node stops working on all of them
// within that second.
package teams

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"cube/internal/cube"
	"cube/internal/id"
	"cube/internal/store"
)

// CacheFor is how long a checked key is trusted without reading its
// record again: the longest a revoked key keeps working on a node that
// did not revoke it.
const CacheFor = 500 * time.Millisecond

// lastUsedEvery is how stale a key's last-used time may get: a request
// writes it only when it is older than that.
const lastUsedEvery = time.Minute

// maxCached bounds the keys remembered at once, the unknown ones
// included, so a stream of made-up keys cannot grow memory.
const maxCached = 10000

// BootstrapKeyID is the ID of the admin key the server is configured with
// (the key file made at first start, or $CUBE_API_KEY): replacing that key
// replaces its record, so the old one stops working as it always did.
const BootstrapKeyID = "00000000-0000-4000-8000-0000000000a1"

// Keys is the service's teams and keys.
type Keys struct {
	st  *store.Store
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cached // by digest
	// quotas are the teams' quotas as last read, by team.
	quotas map[string]cachedQuotas
}

type cached struct {
	caller cube.Caller
	ok     bool
	at     time.Time
	// lastUsed is the key's last-used time as this node last wrote or
	// read it.
	lastUsed time.Time
}

var _ cube.Teams = (*Keys)(nil)

// New returns the teams kept in st.
func New(st *store.Store) *Keys {
	return &Keys{st: st, now: time.Now, cache: map[string]cached{}, quotas: map[string]cachedQuotas{}}
}

// NewKey returns a fresh API key in the shape the E2B SDKs accept: "e2b_"
// and 40 hex digits.
func NewKey() string { return "e2b_" + id.Token(20) }

// MaxKeyLen bounds what is taken for a key before anything is read.
const MaxKeyLen = 256

// ParseKey returns the key a request presents, without surrounding white
// space, and whether it can be a key at all: not empty, at most MaxKeyLen
// bytes of printable ASCII. Anything else is refused before the store is
// asked.
func ParseKey(raw string) (string, bool) {
	k := strings.TrimSpace(raw)
	if k == "" || len(k) > MaxKeyLen {
		return "", false
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' {
			return "", false
		}
	}
	return k, true
}

// Digest is the hex SHA-256 of a key, as its record is keyed.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Mask is what lists show of a key: its type prefix, its length, and two
// characters from each end of the rest.
func Mask(key string) cube.KeyMask {
	prefix := ""
	if strings.HasPrefix(key, "e2b_") {
		prefix = "e2b_"
	}
	rest := strings.TrimPrefix(key, prefix)
	m := cube.KeyMask{Prefix: prefix, ValueLength: len(rest)}
	if len(rest) >= 8 {
		m.MaskedPrefix, m.MaskedSuffix = rest[:2], rest[len(rest)-4:]
	}
	return m
}

// Bootstrap makes sure the first team exists and that key, the server's
// configured key, is its admin key, then gives the first team every
// record written before teams existed. Every node of a cluster runs it at
// start; it changes nothing the second time.
func (k *Keys) Bootstrap(ctx context.Context, key string) error {
	key, ok := ParseKey(key)
	if !ok {
		return errors.New("the API key is empty, too long or not printable ASCII")
	}
	if _, err := k.st.Teams().Get(ctx, cube.FirstTeam); errors.Is(err, store.ErrNotFound) {
		t := store.Team{ID: cube.FirstTeam, Name: "default", CreatedAt: k.now().UTC()}
		if err := k.st.TeamNames().Insert(ctx, &store.TeamName{Name: t.Name, Team: t.ID}); err != nil && !errors.Is(err, store.ErrExists) {
			return err
		}
		if err := k.st.Teams().Put(ctx, &t); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	digest := Digest(key)
	all, err := k.st.APIKeys().List(ctx)
	if err != nil {
		return err
	}
	for _, r := range all {
		if r.ID == BootstrapKeyID && r.Hash != digest {
			if err := k.st.APIKeys().Delete(ctx, r.Hash); err != nil {
				return err
			}
		}
	}
	if _, err := k.st.APIKeys().Get(ctx, digest); errors.Is(err, store.ErrNotFound) {
		r := keyRecord(key, BootstrapKeyID, cube.FirstTeam, "admin", "", true, k.now())
		if err := k.st.APIKeys().Put(ctx, &r); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	_, err = k.st.AdoptUnowned(ctx, cube.FirstTeam)
	return err
}

func keyRecord(key, keyID, team, name, createdBy string, admin bool, now time.Time) store.APIKey {
	m := Mask(key)
	return store.APIKey{Hash: Digest(key), ID: keyID, Team: team, Name: name, Admin: admin,
		CreatedAt: now.UTC(), CreatedBy: createdBy,
		MaskPrefix: m.Prefix + m.MaskedPrefix, MaskSuffix: m.MaskedSuffix, Length: len(key)}
}

// Authenticate returns who a key stands for. Unknown keys → Forbidden.
func (k *Keys) Authenticate(ctx context.Context, raw string) (cube.Caller, error) {
	key, ok := ParseKey(raw)
	if !ok {
		return cube.Caller{}, cube.Errorf(cube.Forbidden, "invalid API key")
	}
	digest := Digest(key)
	now := k.now()
	k.mu.Lock()
	c, hit := k.cache[digest]
	k.mu.Unlock()
	if !hit || now.Sub(c.at) >= CacheFor {
		r, err := k.st.APIKeys().Get(ctx, digest)
		switch {
		case errors.Is(err, store.ErrNotFound):
			c = cached{at: now}
		case err != nil:
			return cube.Caller{}, err
		default:
			c = cached{ok: true, at: now, lastUsed: r.LastUsed,
				caller: cube.Caller{Team: r.Team, KeyID: r.ID, KeyName: r.Name, Admin: r.Admin}}
			// The team's rate quota travels with its keys, read as
			// often: a change applies within CacheFor too.
			// A key whose team is gone (deleted while the key was
			// made) stands for no one.
			switch t, err := k.st.Teams().Get(ctx, r.Team); {
			case err == nil:
				c.caller.RequestsPerSecond = teamOf(t).Quotas.RequestsPerSecond
			case errors.Is(err, store.ErrNotFound):
				c = cached{at: now}
			default:
				return cube.Caller{}, err
			}
		}
		k.remember(digest, c)
	}
	if !c.ok {
		return cube.Caller{}, cube.Errorf(cube.Forbidden, "invalid API key")
	}
	if now.Sub(c.lastUsed) >= lastUsedEvery {
		k.touch(digest, now)
	}
	return c.caller, nil
}

func (k *Keys) remember(digest string, c cached) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.cache) >= maxCached {
		clear(k.cache)
	}
	k.cache[digest] = c
}

// touch records that a key was used at now, off the request's path.
func (k *Keys) touch(digest string, now time.Time) {
	k.mu.Lock()
	c := k.cache[digest]
	c.lastUsed = now
	k.cache[digest] = c
	k.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = k.st.APIKeys().Update(ctx, digest, func(r *store.APIKey) error {
			r.LastUsed = now.UTC()
			return nil
		})
	}()
}

// forget drops a key from the cache, so its own node refuses it at once.
func (k *Keys) forget(digest string) {
	k.mu.Lock()
	delete(k.cache, digest)
	k.mu.Unlock()
}

// CreateTeam makes a team; names are unique, also between creates at
// once on several nodes: the team is written, then its name taken
// (store.TeamNames, keyed by name); a create that finds the name held by
// a team that exists removes its own team again.
func (k *Keys) CreateTeam(ctx context.Context, name string, q cube.Quotas) (cube.Team, error) {
	if err := checkName("team", name); err != nil {
		return cube.Team{}, err
	}
	if err := checkQuotas(q); err != nil {
		return cube.Team{}, err
	}
	quotas, err := json.Marshal(q)
	if err != nil {
		return cube.Team{}, err
	}
	t := store.Team{ID: uuid.NewString(), Name: name, CreatedAt: k.now().UTC(), Quotas: quotas}
	if err := k.st.Teams().Put(ctx, &t); err != nil {
		return cube.Team{}, err
	}
	if err := k.takeName(ctx, name, t.ID); err != nil {
		k.st.Teams().Delete(context.WithoutCancel(ctx), t.ID)
		return cube.Team{}, err
	}
	return teamOf(&t), nil
}

// takeName gives name to the team teamID, unless a team has it. A name
// left by a team that is gone (a create or delete a crash cut short) is
// taken over.
func (k *Keys) takeName(ctx context.Context, name, teamID string) error {
	err := k.st.TeamNames().Insert(ctx, &store.TeamName{Name: name, Team: teamID})
	if !errors.Is(err, store.ErrExists) {
		return err
	}
	taken := cube.Errorf(cube.Conflict, "a team named %q exists already", name)
	held, err := k.st.TeamNames().Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return taken // freed just now: let the caller try again
	} else if err != nil {
		return err
	}
	// The team holding it was written before it took the name, so a team
	// that is not there is gone, not on its way.
	if _, err := k.st.Teams().Get(ctx, held.Team); err == nil {
		return taken
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	// Left by a team that is gone: taken over, unless another create
	// took it over first (the name no longer names that team).
	return k.st.TeamNames().Update(ctx, name, func(n *store.TeamName) error {
		if n.Team != held.Team {
			return taken
		}
		n.Team = teamID
		return nil
	})
}

// ListTeams returns every team, oldest first.
func (k *Keys) ListTeams(ctx context.Context) ([]cube.Team, error) {
	all, err := k.st.Teams().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cube.Team, 0, len(all))
	for _, t := range all {
		out = append(out, teamOf(t))
	}
	slices.SortStableFunc(out, func(a, b cube.Team) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// GetTeam returns one team.
func (k *Keys) GetTeam(ctx context.Context, teamID string) (cube.Team, error) {
	t, err := k.st.Teams().Get(ctx, teamID)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Team{}, cube.Errorf(cube.NotFound, "team %s not found", teamID)
	}
	if err != nil {
		return cube.Team{}, err
	}
	return teamOf(t), nil
}

// Quotas returns a team's quotas (quota.Lookup), read at most once per
// CacheFor: a change applies at once on the node that made it, and on
// every other within CacheFor.
func (k *Keys) Quotas(ctx context.Context, teamID string) (cube.Quotas, error) {
	now := k.now()
	k.mu.Lock()
	e, ok := k.quotas[teamID]
	k.mu.Unlock()
	if ok && now.Sub(e.at) < CacheFor {
		return e.q, nil
	}
	t, err := k.GetTeam(ctx, teamID)
	if err != nil {
		return cube.Quotas{}, err
	}
	k.mu.Lock()
	if len(k.quotas) >= maxCached {
		clear(k.quotas)
	}
	k.quotas[teamID] = cachedQuotas{t.Quotas, now}
	k.mu.Unlock()
	return t.Quotas, nil
}

type cachedQuotas struct {
	q  cube.Quotas
	at time.Time
}

// SetQuotas replaces a team's quotas.
func (k *Keys) SetQuotas(ctx context.Context, teamID string, q cube.Quotas) (cube.Team, error) {
	if err := checkQuotas(q); err != nil {
		return cube.Team{}, err
	}
	quotas, err := json.Marshal(q)
	if err != nil {
		return cube.Team{}, err
	}
	var out cube.Team
	err = k.st.Teams().Update(ctx, teamID, func(t *store.Team) error {
		t.Quotas = quotas
		out = teamOf(t)
		return nil
	})
	k.mu.Lock()
	delete(k.quotas, teamID)
	// The rate quota travels with the team's keys: read afresh too.
	clear(k.cache)
	k.mu.Unlock()
	if errors.Is(err, store.ErrNotFound) {
		return cube.Team{}, cube.Errorf(cube.NotFound, "team %s not found", teamID)
	}
	return out, err
}

// DeleteTeam removes a team that owns nothing, with its keys.
func (k *Keys) DeleteTeam(ctx context.Context, teamID string) error {
	t, err := k.GetTeam(ctx, teamID)
	if err != nil {
		return err
	}
	if teamID == cube.FirstTeam {
		return cube.Errorf(cube.Forbidden, "the first team holds the server's admin key and cannot be deleted")
	}
	owned, err := k.owned(ctx, teamID)
	if err != nil {
		return err
	}
	if len(owned) > 0 {
		return cube.Errorf(cube.Conflict, "team %s still owns %s: delete them first", teamID, strings.Join(owned, ", "))
	}
	// The team goes first: from then on its keys fail (Authenticate
	// refuses a key whose team is gone), including one a CreateKey
	// writes meanwhile, which the sweep below then removes.
	if err := k.st.Teams().Delete(ctx, teamID); err != nil {
		return err
	}
	if err := k.st.TeamNames().Update(ctx, t.Name, func(n *store.TeamName) error {
		if n.Team != teamID {
			return errNotMine
		}
		return nil
	}); err == nil {
		if err := k.st.TeamNames().Delete(ctx, t.Name); err != nil {
			return err
		}
	} else if !errors.Is(err, errNotMine) && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return k.sweepKeys(ctx, teamID)
}

// errNotMine stops an update of a name another team holds now.
var errNotMine = errors.New("the name is another team's")

// sweepKeys removes the keys of a team that is gone.
func (k *Keys) sweepKeys(ctx context.Context, teamID string) error {
	keys, err := k.teamKeys(ctx, teamID)
	if err != nil {
		return err
	}
	for _, r := range keys {
		if err := k.st.APIKeys().Delete(ctx, r.Hash); err != nil {
			return err
		}
		k.forget(r.Hash)
	}
	return nil
}

// owned names what a team still has, by kind and count.
func (k *Keys) owned(ctx context.Context, teamID string) ([]string, error) {
	var out []string
	count := func(kind string, n int) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, kind))
		}
	}
	// Counted through the index on the records' team, not by decoding
	// every sandbox of the cluster.
	n, _, _, err := k.st.TeamUse(ctx, teamID)
	if err != nil {
		return nil, err
	}
	count("sandbox(es)", n)
	tpls, err := k.st.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	count("template(s) or snapshot(s)", countTeam(tpls, func(v *store.Template) string { return v.Team }, teamID))
	vols, err := k.st.Volumes().List(ctx)
	if err != nil {
		return nil, err
	}
	count("volume(s)", countTeam(vols, func(v *store.Volume) string { return v.Team }, teamID))
	return out, nil
}

func countTeam[T any](all []*T, team func(*T) string, teamID string) int {
	n := 0
	for _, v := range all {
		if team(v) == teamID {
			n++
		}
	}
	return n
}

// CreateKey makes a key for a team; the answer is the only place the key
// ever appears.
func (k *Keys) CreateKey(ctx context.Context, teamID, name, createdBy string) (cube.NewAPIKey, error) {
	if err := checkName("API key", name); err != nil {
		return cube.NewAPIKey{}, err
	}
	if _, err := k.GetTeam(ctx, teamID); err != nil {
		return cube.NewAPIKey{}, err
	}
	key := NewKey()
	r := keyRecord(key, uuid.NewString(), teamID, name, createdBy, false, k.now())
	if err := k.st.APIKeys().Put(ctx, &r); err != nil {
		return cube.NewAPIKey{}, err
	}
	// A team deleted meanwhile does not keep this key.
	if _, err := k.GetTeam(ctx, teamID); err != nil {
		k.st.APIKeys().Delete(context.WithoutCancel(ctx), r.Hash)
		return cube.NewAPIKey{}, err
	}
	return cube.NewAPIKey{APIKey: keyOf(&r), Key: key}, nil
}

// ListKeys returns a team's keys, oldest first.
func (k *Keys) ListKeys(ctx context.Context, teamID string) ([]cube.APIKey, error) {
	if _, err := k.GetTeam(ctx, teamID); err != nil {
		return nil, err
	}
	keys, err := k.teamKeys(ctx, teamID)
	if err != nil {
		return nil, err
	}
	out := make([]cube.APIKey, 0, len(keys))
	for _, r := range keys {
		out = append(out, keyOf(r))
	}
	slices.SortStableFunc(out, func(a, b cube.APIKey) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func (k *Keys) teamKeys(ctx context.Context, teamID string) ([]*store.APIKey, error) {
	return k.st.APIKeys().List(ctx, teamID)
}

// findKey returns a team's key by ID.
func (k *Keys) findKey(ctx context.Context, teamID, keyID string) (*store.APIKey, error) {
	keys, err := k.teamKeys(ctx, teamID)
	if err != nil {
		return nil, err
	}
	for _, r := range keys {
		if r.ID == keyID {
			return r, nil
		}
	}
	return nil, cube.Errorf(cube.NotFound, "API key %s not found", keyID)
}

// RenameKey changes a key's name.
func (k *Keys) RenameKey(ctx context.Context, teamID, keyID, name string) error {
	if err := checkName("API key", name); err != nil {
		return err
	}
	r, err := k.findKey(ctx, teamID, keyID)
	if err != nil {
		return err
	}
	err = k.st.APIKeys().Update(ctx, r.Hash, func(r *store.APIKey) error {
		r.Name = name
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return cube.Errorf(cube.NotFound, "API key %s not found", keyID)
	}
	k.forget(r.Hash)
	return err
}

// DeleteKey revokes a key: this node refuses it at once, every other
// within CacheFor.
func (k *Keys) DeleteKey(ctx context.Context, teamID, keyID string) error {
	r, err := k.findKey(ctx, teamID, keyID)
	if err != nil {
		return err
	}
	if r.Admin {
		all, err := k.st.APIKeys().List(ctx)
		if err != nil {
			return err
		}
		admins := 0
		for _, o := range all {
			if o.Admin {
				admins++
			}
		}
		if admins <= 1 {
			return cube.Errorf(cube.Conflict, "API key %s is the last admin key: without it no one could manage teams", keyID)
		}
	}
	if err := k.st.APIKeys().Delete(ctx, r.Hash); err != nil {
		return err
	}
	k.forget(r.Hash)
	return nil
}

func checkQuotas(q cube.Quotas) error {
	if q.RunningSandboxes < 0 || q.VCPUs < 0 || q.MemoryMB < 0 || q.MaxTimeout < 0 || q.DiskBytes < 0 || q.Builds < 0 || q.RequestsPerSecond < 0 {
		return cube.Errorf(cube.Invalid, "quotas cannot be negative (0 means no limit)")
	}
	return nil
}

func checkName(what, name string) error {
	if strings.TrimSpace(name) == "" {
		return cube.Errorf(cube.Invalid, "the %s needs a name", what)
	}
	if len(name) > 128 {
		return cube.Errorf(cube.Invalid, "the %s's name is longer than 128 bytes", what)
	}
	return nil
}

func teamOf(t *store.Team) cube.Team {
	out := cube.Team{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt}
	if len(t.Quotas) > 0 {
		_ = json.Unmarshal(t.Quotas, &out.Quotas)
	}
	return out
}

func keyOf(r *store.APIKey) cube.APIKey {
	prefix := ""
	masked := r.MaskPrefix
	if strings.HasPrefix(masked, "e2b_") {
		prefix, masked = "e2b_", strings.TrimPrefix(masked, "e2b_")
	}
	return cube.APIKey{ID: r.ID, Team: r.Team, Name: r.Name, Admin: r.Admin, CreatedAt: r.CreatedAt,
		CreatedBy: r.CreatedBy, LastUsed: r.LastUsed,
		Mask: cube.KeyMask{Prefix: prefix, ValueLength: r.Length - len(prefix), MaskedPrefix: masked, MaskedSuffix: r.MaskSuffix}}
}
