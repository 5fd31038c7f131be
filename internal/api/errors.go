package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Error is an error that knows the HTTP answer it deserves. Backends return
// it so that the control plane can tell users precisely why a call failed
// (404 unknown sandbox, 409 wrong state, 429 too many sandboxes, 507 disk
// full, ...); any other error becomes a 500 whose message is the error text.
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
// its chain, 504 for a deadline that ran out, 500 otherwise.
func StatusOf(err error) int {
	var ae *Error
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status <= 599 {
		return ae.Status
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// ErrNotSupported is what a backend may return (wrapped or not) for an
// operation it does not implement yet; the answer is 501.
var ErrNotSupported = &Error{Status: http.StatusNotImplemented, Message: "operation not supported by this server"}
