package api

import (
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"cube/internal/httperr"
	"cube/internal/ratelimit"
)

// quotaRates are the rate buckets of keys whose team's quota sets its own
// rate, one set of buckets per rate: a team's keys share the rate, each
// key its own bucket, as with the server's rate.
type quotaRates struct {
	mu     sync.Mutex
	byRate map[float64]*ratelimit.Keyed[[sha256.Size]byte]
}

func (q *quotaRates) at(rate float64) *ratelimit.Keyed[[sha256.Size]byte] {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.byRate[rate]
	if !ok {
		if len(q.byRate) > 1000 {
			clear(q.byRate)
		}
		l = ratelimit.New[[sha256.Size]byte](rate, 0, 0)
		q.byRate[rate] = l
	}
	return l
}

func rateLimited(wait time.Duration) *httperr.Error {
	return httperr.Errorf(http.StatusTooManyRequests, "rate limit for this API key exceeded; retry in %s", wait.Round(time.Millisecond)).
		WithRetryAfter(max(wait, time.Second))
}

// NewHTTPServer wraps h in an http.Server with the timeouts a public
// listener needs: slow clients cannot hold a connection open by trickling
// headers, idle keep-alives are reaped. There is deliberately no write
// timeout: proxied streams (process output, code execution) last as long
// as the work they carry.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}
