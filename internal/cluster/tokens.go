package cluster

import (
	"context"
	"sync"
	"time"

	"cube/internal/store"
)

// TokenSource reads the sandboxes' envd tokens by changes
// (*store.Store).
type TokenSource interface {
	SandboxTokens(ctx context.Context, c store.Cursor) (store.TokenChanges, error)
}

// Tokens is one node's index of the envd token and node of every sandbox
// of the cluster that may answer a signed file URL (running, paused,
// resuming). A signed URL names no sandbox when the SDK routes by header,
// and its signature is a hash over the token, which cannot be read back
// from it: the node that receives one tries the signature against these
// tokens itself, instead of asking every peer, and passes the URL to the
// node that holds the sandbox.
//
// The index is read from the shared store when it is first needed, then
// by changes only (store.SandboxTokens): before a lookup when the last
// read is older than MaxAge, and once more when a lookup finds nothing
// (the sandbox may be newer than the last read) unless the last read is
// younger than MinRefresh. A node that never sees such a URL never reads.
type Tokens struct {
	src TokenSource
	// MaxAge and MinRefresh bound the reads, as above.
	maxAge, minRefresh time.Duration

	// mu guards the index: entries, and each sandbox's place in it.
	mu      sync.RWMutex
	entries []tokenEntry
	pos     map[string]int
	// gen counts the reads that changed the index.
	gen uint64

	// readMu makes one read at a time; cursor is where it is, readAt
	// when the last one began (this host's monotonic clock), loaded
	// whether one succeeded.
	readMu sync.Mutex
	cursor store.Cursor
	readAt time.Time
	loaded bool

	// found remembers the sandbox a URL was last found to be made by
	// (by the caller's key), checked again against its token at each use.
	foundMu sync.Mutex
	found   map[string]string
}

type tokenEntry struct{ id, node, token string }

// The defaults of Tokens' reads.
const (
	TokensMaxAge     = time.Second
	TokensMinRefresh = 100 * time.Millisecond
	// tokensFound is how many URLs' sandboxes are remembered.
	tokensFound = 4096
)

// NewTokens returns the index of src's sandboxes' tokens.
func NewTokens(src TokenSource) *Tokens {
	return &Tokens{src: src, maxAge: TokensMaxAge, minRefresh: TokensMinRefresh, pos: map[string]int{}, found: map[string]string{}}
}

// Find returns the sandbox whose envd token makes made true, and its
// node; ok is false when none does. key names the URL made is the check
// of ("" for none): its sandbox is remembered, and checked first the next
// time. While the store cannot be read Find answers from what it read
// last, and fails only when it has read nothing yet. made is called from
// one goroutine at a time.
func (t *Tokens) Find(ctx context.Context, key string, made func(token string) bool) (sandboxID, node string, ok bool, err error) {
	if key != "" {
		t.foundMu.Lock()
		id, seen := t.found[key]
		t.foundMu.Unlock()
		if seen {
			t.mu.RLock()
			i, in := t.pos[id]
			var e tokenEntry
			if in {
				e = t.entries[i]
			}
			t.mu.RUnlock()
			if in && made(e.token) {
				return e.id, e.node, true, nil
			}
		}
	}
	if _, err := t.read(ctx, t.maxAge); err != nil {
		return "", "", false, err
	}
	e, gen, ok := t.scan(made)
	if !ok {
		// A sandbox made since the last read: read the changes, and
		// check those alone (all again if another lookup's read changed
		// the index meanwhile).
		changed, err := t.read(ctx, t.minRefresh)
		if err != nil {
			return "", "", false, err
		}
		for _, c := range changed {
			if made(c.token) {
				e, ok = c, true
				break
			}
		}
		if !ok && changed == nil && t.generation() != gen {
			e, _, ok = t.scan(made)
		}
	}
	if !ok {
		return "", "", false, nil
	}
	if key != "" {
		t.foundMu.Lock()
		if len(t.found) >= tokensFound {
			clear(t.found)
		}
		t.found[key] = e.id
		t.foundMu.Unlock()
	}
	return e.id, e.node, true, nil
}

// scan checks every token of the index, and says which generation of
// it it checked.
func (t *Tokens) scan(made func(token string) bool) (tokenEntry, uint64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, e := range t.entries {
		if made(e.token) {
			return e, t.gen, true
		}
	}
	return tokenEntry{}, t.gen, false
}

func (t *Tokens) generation() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.gen
}

// Len is how many sandboxes the index holds.
func (t *Tokens) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.entries)
}

// read brings the index up to date unless its last read began less than
// age ago, and returns the sandboxes that read added or changed. A failed
// read leaves the index as it was, and fails only while it holds nothing
// read.
func (t *Tokens) read(ctx context.Context, age time.Duration) ([]tokenEntry, error) {
	t.readMu.Lock()
	defer t.readMu.Unlock()
	if t.loaded && time.Since(t.readAt) < age {
		return nil, nil
	}
	began := time.Now()
	ch, err := t.src.SandboxTokens(ctx, t.cursor)
	if err != nil {
		if t.loaded {
			return nil, nil
		}
		return nil, err
	}
	t.cursor, t.readAt, t.loaded = ch.Next, began, true
	changed := make([]tokenEntry, 0, len(ch.Changed))
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch.Full {
		t.entries, t.pos = t.entries[:0], make(map[string]int, len(ch.Changed))
	}
	for _, id := range ch.Gone {
		t.remove(id)
	}
	for _, s := range ch.Changed {
		if !s.Live() || s.Node == "" {
			t.remove(s.ID)
			continue
		}
		e := tokenEntry{id: s.ID, node: s.Node, token: s.EnvdToken}
		if i, ok := t.pos[s.ID]; ok {
			if t.entries[i] == e {
				continue // read again, unchanged
			}
			t.entries[i] = e
		} else {
			t.pos[s.ID] = len(t.entries)
			t.entries = append(t.entries, e)
		}
		changed = append(changed, e)
	}
	if ch.Full || len(changed) > 0 || len(ch.Gone) > 0 {
		t.gen++
	}
	return changed, nil
}

// remove drops a sandbox from the index; mu is held.
func (t *Tokens) remove(id string) {
	i, ok := t.pos[id]
	if !ok {
		return
	}
	last := len(t.entries) - 1
	if i != last {
		t.entries[i] = t.entries[last]
		t.pos[t.entries[i].id] = i
	}
	t.entries = t.entries[:last]
	delete(t.pos, id)
}
