package api

import (
	"net/http"
	"time"

	"cube/internal/httperr"
)

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
