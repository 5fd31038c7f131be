// Package secrets keeps the values a sandbox's network rules insert into
// its outbound requests (E2B's /secrets), so an agent can call a paid API
// without the key ever entering the sandbox.
//
// Values are sealed with AES-256-GCM under a key that is either the
// operator's (KeyEnv, a base64 or hex 32-byte key) or generated on first
// use into <data>/secrets.key, mode 0600. The sealed values and their
// metadata live in <data>/secrets.json, written atomically. A value is
// returned only by Value, which the egress Filter calls as a request
// leaves; nothing else, API answers and logs included, ever carries it.
// Each value is bound (as GCM additional data) to its secret's ID and
// version, so a sealed value copied onto another secret does not open.
//
// Every secret belongs to a team. Names are unique within a team, and a
// secret is found, by ID or name, only for its own team: another team's
// is not there at all. Records written before Cube had teams belong to
// cube.FirstTeam when loaded.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"cube/internal/cube"
)

// Files in the data directory, and the environment variable an operator
// sets to supply the key instead.
const (
	KeyFile  = "secrets.key"
	DataFile = "secrets.json"
	KeyEnv   = "CUBE_SECRETS_KEY"
)

// Limits, after E2B's documented ones for metadata.
const (
	MaxValueLen      = 8 << 10
	MaxNameLen       = 128
	MaxMetadata      = 32
	MaxMetaKeyLen    = 128
	MaxMetaValueLen  = 1024
	MaxMetadataBytes = 8192
	// MaxSecrets bounds each team's secrets, so no team can use up room
	// another needs.
	MaxSecrets = 1000
	idPrefix   = "sec_"
)

// Info is a secret without its value.
type Info struct {
	ID        string
	Team      string
	Name      string
	Version   int64
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// record is a secret as stored.
type record struct {
	ID        string            `json:"id"`
	Team      string            `json:"team"`
	Name      string            `json:"name"`
	Version   int64             `json:"version"`
	Metadata  map[string]string `json:"metadata"`
	CreatedAt time.Time         `json:"createdAt"`
	UpdatedAt time.Time         `json:"updatedAt"`
	Sealed    []byte            `json:"sealed"` // nonce, then ciphertext
}

// Store holds a node's secrets. Its methods are safe for concurrent use.
type Store struct {
	path string
	aead cipher.AEAD

	mu   sync.Mutex
	recs map[string]*record // by ID
}

// Open loads the secrets in dataDir. key, when not empty, is the
// operator's key (32 bytes, base64 or hex); otherwise KeyEnv, otherwise
// dataDir/secrets.key, made on first use.
func Open(dataDir, key string) (*Store, error) {
	if key == "" {
		key = os.Getenv(KeyEnv)
	}
	raw, err := loadKey(dataDir, key)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s := &Store{path: filepath.Join(dataDir, DataFile), aead: aead, recs: map[string]*record{}}
	data, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("secrets: %w", err)
	}
	var recs []*record
	if err := json.Unmarshal(data, &recs); err != nil {
		return nil, fmt.Errorf("secrets: %s does not decode: %w", s.path, err)
	}
	for _, r := range recs {
		if _, err := s.open(r); err != nil {
			return nil, fmt.Errorf("secrets: secret %s does not open with this key (was %s or %s changed?): %w", r.ID, KeyEnv, KeyFile, err)
		}
		if r.Team == "" {
			// Written before teams: the install's first team's. The
			// team is not part of the sealed value's binding, so the
			// record opens as it did; the next save records the team.
			r.Team = cube.FirstTeam
		}
		s.recs[r.ID] = r
	}
	return s, nil
}

func loadKey(dataDir, given string) ([]byte, error) {
	if given != "" {
		for _, dec := range []func(string) ([]byte, error){base64.StdEncoding.DecodeString, hex.DecodeString} {
			if b, err := dec(strings.TrimSpace(given)); err == nil && len(b) == 32 {
				return b, nil
			}
		}
		return nil, fmt.Errorf("secrets: the key must be 32 bytes, base64 or hex encoded (e.g. `openssl rand -base64 32`)")
	}
	path := filepath.Join(dataDir, KeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b = make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, err
		}
		if err := writeAtomic(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("secrets: write key: %w", err)
		}
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: read key: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, err
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("secrets: %s is not a 32-byte hex key", path)
	}
	return k, nil
}

func aad(id string, version int64) []byte { return fmt.Appendf(nil, "cube-secret %s %d", id, version) }

func (s *Store) seal(id string, version int64, value string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, []byte(value), aad(id, version)), nil
}

func (s *Store) open(r *record) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(r.Sealed) < n {
		return nil, errors.New("sealed value too short")
	}
	return s.aead.Open(nil, r.Sealed[:n], r.Sealed[n:], aad(r.ID, r.Version))
}

// Create stores a new secret of team.
func (s *Store) Create(team, name, value string, md map[string]string) (Info, error) {
	if team == "" {
		return Info{}, errors.New("secrets: a secret needs a team")
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if err := checkName(name); err != nil {
		return Info{}, err
	}
	if err := checkValue(value); err != nil {
		return Info{}, err
	}
	if err := checkMetadata(md); err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName(team, name) != nil {
		return Info{}, cube.Errorf(cube.Conflict, "a secret named %q exists: update it with POST /secrets/%s", name, name).WithField("name")
	}
	if s.countLocked(team) >= MaxSecrets {
		return Info{}, cube.Errorf(cube.Capacity, "at most %d secrets per team: delete one first", MaxSecrets)
	}
	now := time.Now().UTC()
	r := &record{ID: newID(), Team: team, Name: name, Version: 1, Metadata: orEmpty(md), CreatedAt: now, UpdatedAt: now}
	var err error
	if r.Sealed, err = s.seal(r.ID, r.Version, value); err != nil {
		return Info{}, err
	}
	s.recs[r.ID] = r
	if err := s.saveLocked(); err != nil {
		delete(s.recs, r.ID)
		return Info{}, err
	}
	return r.info(), nil
}

// Update stores value as the next version of team's secret ref; md, when
// not nil, replaces its metadata.
func (s *Store) Update(team, ref, value string, md map[string]string) (Info, error) {
	if err := checkValue(value); err != nil {
		return Info{}, err
	}
	if md != nil {
		if err := checkMetadata(md); err != nil {
			return Info{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.find(team, ref)
	if r == nil {
		return Info{}, notFound(ref)
	}
	next := *r
	next.Version++
	next.UpdatedAt = time.Now().UTC()
	if md != nil {
		next.Metadata = md
	}
	var err error
	if next.Sealed, err = s.seal(next.ID, next.Version, value); err != nil {
		return Info{}, err
	}
	s.recs[r.ID] = &next
	if err := s.saveLocked(); err != nil {
		s.recs[r.ID] = r
		return Info{}, err
	}
	return next.info(), nil
}

// Get finds team's secret by ID or name.
func (s *Store) Get(team, ref string) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.find(team, ref); r != nil {
		return r.info(), nil
	}
	return Info{}, notFound(ref)
}

// List returns team's secrets, oldest first.
func (s *Store) List(team string) []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Info{}
	for _, r := range s.recs {
		if r.Team == team {
			out = append(out, r.info())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Delete removes team's secret ref; rules naming it fail from then on.
func (s *Store) Delete(team, ref string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.find(team, ref)
	if r == nil {
		return notFound(ref)
	}
	delete(s.recs, r.ID)
	if err := s.saveLocked(); err != nil {
		s.recs[r.ID] = r
		return err
	}
	return nil
}

// Value is the current value of team's secret ref, for the egress
// Filter only: a sandbox's rules are filled with its own team's secrets,
// and another team's name or ID is not found.
func (s *Store) Value(team, ref string) (string, error) {
	s.mu.Lock()
	r := s.find(team, ref)
	s.mu.Unlock()
	if r == nil {
		return "", notFound(ref)
	}
	v, err := s.open(r)
	if err != nil {
		return "", fmt.Errorf("secret %s does not open: %w", r.ID, err)
	}
	return string(v), nil
}

// Exists reports whether ref names one of team's secrets.
func (s *Store) Exists(team, ref string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(team, ref) != nil
}

// find is team's secret with ID or name ref; another team's is nil, as
// one that does not exist. No record has an empty team, so neither does
// an empty team find any.
func (s *Store) find(team, ref string) *record {
	if team == "" {
		return nil
	}
	if r := s.recs[ref]; r != nil {
		if r.Team == team {
			return r
		}
		return nil
	}
	return s.byName(team, strings.ToLower(ref))
}

func (s *Store) byName(team, name string) *record {
	for _, r := range s.recs {
		if r.Team == team && r.Name == name {
			return r
		}
	}
	return nil
}

func (s *Store) countLocked(team string) int {
	n := 0
	for _, r := range s.recs {
		if r.Team == team {
			n++
		}
	}
	return n
}

func (s *Store) saveLocked() error {
	recs := make([]*record, 0, len(s.recs))
	for _, r := range s.recs {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	data, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	if err := writeAtomic(s.path, data, 0o600); err != nil {
		return fmt.Errorf("secrets: save: %w", err)
	}
	return nil
}

func (r *record) info() Info {
	md := make(map[string]string, len(r.Metadata))
	for k, v := range r.Metadata {
		md[k] = v
	}
	return Info{ID: r.ID, Team: r.Team, Name: r.Name, Version: r.Version, Metadata: md, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func notFound(ref string) error {
	return cube.Errorf(cube.NotFound, "secret %q not found", ref)
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func newID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return idPrefix + hex.EncodeToString(b)
}

func checkName(name string) error {
	switch {
	case name == "":
		return cube.Errorf(cube.Invalid, "name: a secret needs a name").WithField("name")
	case len(name) > MaxNameLen:
		return cube.Errorf(cube.Invalid, "name: at most %d bytes", MaxNameLen).WithField("name")
	case strings.HasPrefix(name, idPrefix):
		return cube.Errorf(cube.Invalid, "name: the %s prefix is reserved for secret IDs: choose another name", idPrefix).WithField("name")
	case !utf8.ValidString(name):
		return cube.Errorf(cube.Invalid, "name: not valid UTF-8").WithField("name")
	}
	for _, c := range name {
		if c == '{' || c == '}' || unicode.IsControl(c) {
			return cube.Errorf(cube.Invalid, "name: '{', '}' and control characters are not allowed: the name goes into ${e2b.secrets.<name>}").WithField("name")
		}
	}
	return nil
}

func checkValue(v string) error {
	switch {
	case v == "":
		return cube.Errorf(cube.Invalid, "value: a secret needs a value").WithField("value")
	case len(v) > MaxValueLen:
		return cube.Errorf(cube.Invalid, "value: at most %d bytes (got %d)", MaxValueLen, len(v)).WithField("value")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' || c == 0 {
			return cube.Errorf(cube.Invalid, "value: CR, LF and NUL are not allowed: the value goes into an HTTP header").WithField("value")
		}
	}
	return nil
}

func checkMetadata(md map[string]string) error {
	if len(md) > MaxMetadata {
		return cube.Errorf(cube.Invalid, "metadata: at most %d entries (got %d)", MaxMetadata, len(md)).WithField("metadata")
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > MaxMetaKeyLen {
			return cube.Errorf(cube.Invalid, "metadata: keys must be 1 to %d bytes", MaxMetaKeyLen).WithField("metadata")
		}
		if len(v) > MaxMetaValueLen {
			return cube.Errorf(cube.Invalid, "metadata[%q]: at most %d bytes", k, MaxMetaValueLen).WithField("metadata")
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return cube.Errorf(cube.Invalid, "metadata: at most %d bytes in total (got %d)", MaxMetadataBytes, total).WithField("metadata")
	}
	return nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
