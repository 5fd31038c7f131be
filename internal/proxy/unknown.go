package proxy

import (
	"sync"
	"time"
)

// Bounds of the memory of unknown sandbox IDs. Sandbox IDs are random and
// never reused, so an ID the resolver did not know stays unknown: the TTL
// only bounds how long a stale answer could last were one ever reused, and
// nothing invalidates entries early.
const (
	unknownTTL  = 10 * time.Second
	unknownSize = 4096
)

// unknownIDs remembers, for a short while, sandbox IDs the resolver said do
// not exist, so a client (or a scanner) repeating requests for them is
// answered without a lookup each time.
type unknownIDs struct {
	mu  sync.Mutex
	ids map[string]unknownEntry
}

type unknownEntry struct {
	err     error // the resolver's answer, repeated to the client
	expires time.Time
}

// get returns the remembered error for id, if it has not expired.
func (u *unknownIDs) get(id string, now time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.ids[id]
	if !ok {
		return nil
	}
	if !now.Before(e.expires) {
		delete(u.ids, id)
		return nil
	}
	return e.err
}

// add remembers id as unknown. When full, expired entries go first, then
// arbitrary ones: forgetting an unknown ID costs one more lookup, no more.
func (u *unknownIDs) add(id string, err error, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ids == nil {
		u.ids = map[string]unknownEntry{}
	}
	if len(u.ids) >= unknownSize {
		for k, e := range u.ids {
			if !now.Before(e.expires) {
				delete(u.ids, k)
			}
		}
		for k := range u.ids {
			if len(u.ids) < unknownSize {
				break
			}
			delete(u.ids, k)
		}
	}
	u.ids[id] = unknownEntry{err: err, expires: now.Add(unknownTTL)}
}
