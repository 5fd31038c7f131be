package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"cube/internal/cube"
)

// Error is an error of the HTTP layer itself, which knows the answer it
// deserves: a request refused before it reaches the backend (malformed
// body, unknown route, missing API key, rate limit). Backends report
// failures as cube error kinds instead, mapped to statuses in kindStatus.
type Error struct {
	Status  int
	Message string
	// RetryAfter, when positive, is sent as the Retry-After header; the SDKs
	// retry a 429 that carries one.
	RetryAfter time.Duration
	// Err is the underlying cause, kept for errors.Is/As and logs.
	Err error
}

// Errorf returns an *Error with the given status and a formatted message.
// A %w verb in format is unwrapped into Err.
func Errorf(status int, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Status: status, Message: err.Error(), Err: errors.Unwrap(err)}
}

func (e *Error) Error() string { return e.Message }

func (e *Error) Unwrap() error { return e.Err }

// WithRetryAfter sets RetryAfter and returns e, for one-line returns.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

// StatusOf is the HTTP status err maps to: the Status of the first *Error in
// its chain, else the status of its cube kind (kindStatus), 504 for a
// deadline that ran out, 500 otherwise.
func StatusOf(err error) int {
	var ae *Error
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status <= 599 {
		return ae.Status
	}
	if status, ok := kindStatus[cube.KindOf(err)]; ok {
		return status
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// retryAfter is how long the client is told to wait before retrying err;
// zero sends no Retry-After.
func retryAfter(err error) time.Duration {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	return cube.RetryAfterOf(err)
}
