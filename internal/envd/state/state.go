// Package state holds the sandbox-wide settings every envd service consults:
// the environment new processes inherit, the access token, and the default
// user and working directory. The template provides the first values; the
// control plane replaces them through /init when it hands a sandbox out, and
// again after restoring a snapshot into a new sandbox.
package state

import (
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"cube/internal/envd/users"
)

// State is safe for concurrent use.
type State struct {
	mu             sync.RWMutex
	baseEnv        map[string]string
	initEnv        map[string]string
	token          string
	defaultUser    string
	defaultWorkdir string
	lastInit       time.Time
}

// New returns the settings of a sandbox that has not been initialised.
// baseEnv is the template's environment (KEY=VALUE), defaultUser the account
// used when a request names none, defaultWorkdir ("" for the user's home)
// the directory relative paths start from.
func New(baseEnv []string, defaultUser, defaultWorkdir string) *State {
	env := map[string]string{}
	for _, kv := range baseEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return &State{baseEnv: env, initEnv: map[string]string{}, defaultUser: defaultUser, defaultWorkdir: defaultWorkdir}
}

// Init is what the control plane may set; nil or empty fields keep their
// current value.
type Init struct {
	EnvVars        map[string]string `json:"envVars,omitempty"`
	AccessToken    *string           `json:"accessToken,omitempty"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	Timestamp      *time.Time        `json:"timestamp,omitempty"`
}

// Apply installs in. A request stamped earlier than one already applied is
// ignored (the control plane may retry, and a late retry must not undo a
// newer token), which Apply reports by returning false.
func (s *State) Apply(in Init) (bool, error) {
	if in.DefaultUser != "" {
		if _, err := users.Lookup(in.DefaultUser); err != nil {
			return false, fmt.Errorf("default user: %w", err)
		}
	}
	if in.DefaultWorkdir != "" && !filepath.IsAbs(in.DefaultWorkdir) {
		return false, fmt.Errorf("default workdir %q is not absolute", in.DefaultWorkdir)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.Timestamp != nil {
		if in.Timestamp.Before(s.lastInit) {
			return false, nil
		}
		s.lastInit = *in.Timestamp
	}
	if in.EnvVars != nil {
		s.initEnv = maps.Clone(in.EnvVars)
	}
	if in.AccessToken != nil && *in.AccessToken != "" {
		s.token = *in.AccessToken
	}
	if in.DefaultUser != "" {
		s.defaultUser = in.DefaultUser
	}
	if in.DefaultWorkdir != "" {
		s.defaultWorkdir = in.DefaultWorkdir
	}
	return true, nil
}

// SetToken replaces the access token ("" turns access control off).
func (s *State) SetToken(token string) {
	s.mu.Lock()
	s.token = token
	s.mu.Unlock()
}

// Token is the current access token, "" when none is set.
func (s *State) Token() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.token
}

// Authorized reports whether got grants access: always while no token is
// set, otherwise only for the token itself (compared in constant time).
func (s *State) Authorized(got string) bool {
	want := s.Token()
	if want == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Env is the environment every new process starts from: the template's,
// overridden by /init's.
func (s *State) Env() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	env := maps.Clone(s.baseEnv)
	maps.Copy(env, s.initEnv)
	return env
}

// DefaultUser is the account used when a request names none.
func (s *State) DefaultUser() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultUser
}

// Workdir is where u's processes start and relative paths are resolved
// when a request gives no directory.
func (s *State) Workdir(u *users.User) string {
	s.mu.RLock()
	wd := s.defaultWorkdir
	s.mu.RUnlock()
	if wd != "" {
		return wd
	}
	return u.Home
}

// User resolves name, or the default user when name is empty.
func (s *State) User(name string) (*users.User, error) {
	if name == "" {
		name = s.DefaultUser()
	}
	return users.Lookup(name)
}

// UserFromHeader resolves the account chosen by an
// `Authorization: Basic base64("<user>:")` header, the default without one.
func (s *State) UserFromHeader(h http.Header) (*users.User, error) {
	name, err := BasicUser(h)
	if err != nil {
		return nil, err
	}
	return s.User(name)
}

// BasicUser extracts the user name from a Basic Authorization header; ""
// when there is none.
func BasicUser(h http.Header) (string, error) {
	v := h.Get("Authorization")
	if v == "" {
		return "", nil
	}
	scheme, rest, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Basic") {
		return "", fmt.Errorf("authorization scheme %q is not Basic", scheme)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", fmt.Errorf("authorization header: %w", err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}

// Path turns a client's path into an absolute, clean one for u: "~" and
// "~/…" are u's home; other relative paths start at the working directory.
func (s *State) Path(u *users.User, p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("empty path")
	case p == "~":
		return filepath.Clean(u.Home), nil
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(u.Home, p[2:]), nil
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	default:
		return filepath.Join(s.Workdir(u), p), nil
	}
}
