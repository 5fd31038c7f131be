package api

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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

// EnsureAPIKey returns the API key stored at path, creating the file (mode
// 0600, with a fresh NewAPIKey) when it does not exist.
func EnsureAPIKey(path string) (key string, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		key = strings.TrimSpace(string(b))
		if key == "" {
			return "", false, fmt.Errorf("API key file %s is empty", path)
		}
		return key, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, err
	}
	key = NewAPIKey()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			// Another process made it first; use theirs.
			return EnsureAPIKey(path)
		}
		return "", false, err
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		f.Close()
		return "", false, err
	}
	if err := f.Close(); err != nil {
		return "", false, err
	}
	return key, true, nil
}
