// Package ratelimit holds one token bucket per key: per API key for the
// control plane, per source address for the sandbox proxy. It lives apart
// from both so they share one implementation.
package ratelimit

import (
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Keyed is a set of token buckets, one per key, created on first use. A nil
// *Keyed allows everything, so "no limit" needs no special case at the
// call site.
type Keyed[K comparable] struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	now     func() time.Time // time.Now; tests move it

	mu   sync.Mutex
	keys map[K]*rate.Limiter
}

// New returns buckets refilling at perSecond with room for burst requests
// (0 means twice perSecond, at least 1), or nil when perSecond is not
// positive. maxKeys bounds how many buckets are kept when keys come from
// the network (source addresses); 0 means no bound, for keys drawn from a
// fixed set (configured API keys).
func New[K comparable](perSecond float64, burst, maxKeys int) *Keyed[K] {
	if perSecond <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = max(1, int(2*perSecond))
	}
	return &Keyed[K]{limit: rate.Limit(perSecond), burst: burst, maxKeys: maxKeys, now: time.Now, keys: map[K]*rate.Limiter{}}
}

// Allow takes a token for key, or returns how long until one is free.
func (l *Keyed[K]) Allow(key K) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	lim, ok := l.keys[key]
	if !ok {
		if l.maxKeys > 0 && len(l.keys) >= l.maxKeys {
			l.shed(now)
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.keys[key] = lim
	}
	l.mu.Unlock()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// shed makes room for a new key. Buckets that have refilled completely
// carry no state worth keeping (a new bucket starts full), so they go
// first; if every bucket is in use, arbitrary ones go until a quarter of
// the room is free, which at worst hands those keys a fresh bucket.
// The caller holds mu.
func (l *Keyed[K]) shed(now time.Time) {
	for k, lim := range l.keys {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.keys, k)
		}
	}
	for k := range l.keys {
		if len(l.keys) <= l.maxKeys*3/4 {
			break
		}
		delete(l.keys, k)
	}
}

// Len is the number of buckets held.
func (l *Keyed[K]) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Source is the key of a request limited per source address: its
// connection's address, widened to the /64 for IPv6, where one host
// usually holds a whole /64.
func Source(r *http.Request) netip.Prefix {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	pf, _ := a.Prefix(bits)
	return pf
}
