package forward

import (
	"encoding/hex"
	"sync"
	"time"

	"cube/internal/cube"
)

// maxNonces bounds the nonces a node remembers (some 19 MB when full).
// Each is kept until its signature is too old to be taken, about a
// minute, so a node takes up to some 4,000 signed requests a second;
// beyond that it answers 503 until the oldest expire, rather than forget
// a nonce whose request could then be replayed.
const maxNonces = 1 << 18

// nonces are those of the signed requests a node took, each until its
// signature expires, in the order they came.
type nonces struct {
	mu    sync.Mutex
	max   int
	until map[[16]byte]int64
	// ring holds the same nonces in arrival order, from head, n of them:
	// expired ones leave from the front. It grows up to max.
	ring    []nonceEntry
	head, n int
}

type nonceEntry struct {
	nonce [16]byte
	until int64
}

func newNonces(max int) *nonces {
	return &nonces{max: max, until: make(map[[16]byte]int64), ring: make([]nonceEntry, min(max, 1024))}
}

// first records nonce, good until until, and fails if it was recorded
// before (a replay) or if the record is full.
func (s *nonces) first(nonce string, until, now time.Time) error {
	var key [16]byte
	if n, err := hex.Decode(key[:], []byte(nonce)); err != nil || n != len(key) {
		return cube.Errorf(cube.Forbidden, "%s is malformed: only nodes of this cluster send it", Header)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Expiries come nearly in order (each request's time, give or take
	// the nodes' clock skew): one behind a later one leaves with it.
	for s.n > 0 && s.ring[s.head].until < now.Unix() {
		delete(s.until, s.ring[s.head].nonce)
		s.ring[s.head] = nonceEntry{}
		s.head = (s.head + 1) % len(s.ring)
		s.n--
	}
	if _, seen := s.until[key]; seen {
		return cube.Errorf(cube.Forbidden, "a forwarded request was sent again: each signed request is taken once")
	}
	if s.n == s.max {
		return cube.Errorf(cube.Unavailable, "this node took more than %d forwarded requests in the last minute; try again shortly", s.max).WithRetryAfter(5 * time.Second)
	}
	if s.n == len(s.ring) {
		ring := make([]nonceEntry, min(2*len(s.ring), s.max))
		for i := range s.n {
			ring[i] = s.ring[(s.head+i)%len(s.ring)]
		}
		s.ring, s.head = ring, 0
	}
	s.until[key] = until.Unix()
	s.ring[(s.head+s.n)%len(s.ring)] = nonceEntry{key, until.Unix()}
	s.n++
	return nil
}
