// Package state holds the sandbox-wide settings every envd service consults:
// the environment new processes inherit, the access token, and the default
// user and working directory. The template provides the first values; the
// control plane replaces them through /init when it hands a sandbox out, and
// again after restoring a snapshot into a new sandbox.
package state

import (
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"cube/internal/envd/protocol"
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
	// contextsNeedToken: see ContextsNeedToken.
	contextsNeedToken bool
}

// New returns the settings of a sandbox that has not been initialised.
// baseEnv is the template's environment (KEY=VALUE), defaultUser the account
// used when a request names none, defaultWorkdir ("" for the user's home)
// where processes start and what the empty path means (see Path).
func New(baseEnv []string, defaultUser, defaultWorkdir string) *State {
	env := map[string]string{}
	for _, kv := range baseEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return &State{baseEnv: env, initEnv: map[string]string{}, defaultUser: defaultUser, defaultWorkdir: defaultWorkdir}
}

// MaxInitClockSkew is how far an /init timestamp may run ahead of this
// sandbox's clock. The control plane stamps /init with the host's current
// time and a sandbox (restored ones included) reads the host's clock, so
// honest requests differ by network and scheduling delay only. A stamp
// further ahead would become the new high-water mark and make every later
// /init (the re-keying of clones and resumed copies) look stale.
const MaxInitClockSkew = 10 * time.Second

// ErrInitFromFuture refuses an /init stamped too far ahead of the clock.
var ErrInitFromFuture = errors.New("init timestamp is ahead of the sandbox clock")

// ErrInitStale refuses an /init stamped no later than one already applied.
var ErrInitStale = errors.New("init timestamp is not newer than the last one applied")

// Apply installs in, now being the sandbox's current time. A stamped
// request must be at most MaxInitClockSkew ahead of now, and newer than
// the last stamped request applied (a late retry must not undo a newer
// token), whose stamp counts as no later than the moment it was applied;
// otherwise nothing changes and the error, wrapping ErrInitFromFuture or
// ErrInitStale, says which.
func (s *State) Apply(in protocol.Init, now time.Time) error {
	if in.DefaultUser != "" && !s.isDefaultUser(in.DefaultUser) {
		if _, err := users.Lookup(in.DefaultUser); err != nil {
			return fmt.Errorf("default user: %w", err)
		}
	}
	if in.DefaultWorkdir != "" && !filepath.IsAbs(in.DefaultWorkdir) {
		return fmt.Errorf("default workdir %q is not absolute", in.DefaultWorkdir)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.Timestamp != nil {
		ts := *in.Timestamp
		if ahead := ts.Sub(now); ahead > MaxInitClockSkew {
			return fmt.Errorf("%w: %s is %s ahead of %s, more than the %s allowed; stamp /init with the current time",
				ErrInitFromFuture, ts.UTC().Format(time.RFC3339Nano), ahead.Round(time.Millisecond), now.UTC().Format(time.RFC3339Nano), MaxInitClockSkew)
		}
		if !ts.After(s.lastInit) {
			return fmt.Errorf("%w: %s is not after %s; stamp /init with the current time",
				ErrInitStale, ts.UTC().Format(time.RFC3339Nano), s.lastInit.UTC().Format(time.RFC3339Nano))
		}
		// The mark never runs ahead of the clock: a stamp accepted within
		// the skew must not make the control plane's next /init, stamped
		// a moment later by the same clock, look stale.
		s.lastInit = ts
		if ts.After(now) {
			s.lastInit = now
		}
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
	if in.CodeContextsNeedToken != nil {
		s.contextsNeedToken = *in.CodeContextsNeedToken
	}
	return nil
}

// isDefaultUser reports whether name is the default user already. It was
// looked up when it became so, and every /init of a sandbox names it
// again; reading the account database through the sandbox's file gofer
// is most of an /init's time otherwise (2–5 ms of 4–7).
func (s *State) isDefaultUser(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultUser == name
}

// ContextsNeedToken reports whether the code interpreter's context routes
// require the access token like every other route. The official code
// interpreter SDKs (@e2b/code-interpreter up to 2.8.0, and the Python one)
// send no token with those routes, so they are open unless the control
// plane (cube-server --code-contexts-need-token, through /init) or
// cube-envd's own flag closes them.
func (s *State) ContextsNeedToken() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.contextsNeedToken
}

// SetContextsNeedToken sets ContextsNeedToken until an /init changes it.
func (s *State) SetContextsNeedToken(need bool) {
	s.mu.Lock()
	s.contextsNeedToken = need
	s.mu.Unlock()
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

// Workdir is where u's processes start when a request names no working
// directory, and what the empty path means: the default workdir, else u's
// home.
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

// Path turns a client's path into an absolute, clean one for u, the way
// E2B's agent does, which the SDKs and their users count on: the empty
// path is the working directory (see Workdir); "~" and "~/…" are u's home;
// any other relative path starts at u's home too, not at the working
// directory, so "notes.txt" is /home/user/notes.txt for user and
// /root/notes.txt for root. "~name" (another user's home) is refused.
func (s *State) Path(u *users.User, p string) (string, error) {
	home := filepath.Join("/", u.Home)
	switch {
	case p == "":
		return filepath.Clean(s.Workdir(u)), nil
	case p == "~":
		return home, nil
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:]), nil
	case strings.HasPrefix(p, "~"):
		return "", fmt.Errorf("path %q: only ~ (the acting user's own home) can be expanded, not ~name", p)
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	default:
		return filepath.Join(home, p), nil
	}
}
