// Package httperr is how Cube's HTTP layers answer a request they fail:
// the control-plane API, the sandbox proxy in front of it and the
// cluster's forwarding between nodes all speak E2B's error shapes, and the
// SDKs parse those shapes and honour their Retry-After. Keeping the shapes,
// the statuses of the core's error kinds and the writers here lets each
// layer answer alike without importing another for it; the core itself
// knows kinds, never statuses.
package httperr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"cube/internal/cube"
)

// Error is an error of the HTTP layer itself, which knows the answer it
// deserves: a request refused before it reaches the backend (malformed
// body, unknown route, missing API key, rate limit). Backends report
// failures as cube error kinds instead, which StatusOf maps.
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

// kindStatus is the one place where the core's error kinds become E2B
// status codes. Errors without a kind answer 500 (504 for a deadline that
// ran out).
var kindStatus = map[cube.Kind]int{
	cube.NotFound:    http.StatusNotFound,
	cube.Conflict:    http.StatusConflict,
	cube.Invalid:     http.StatusBadRequest,
	cube.Forbidden:   http.StatusForbidden,
	cube.Capacity:    http.StatusTooManyRequests,
	cube.DiskFull:    http.StatusInsufficientStorage,
	cube.Damaged:     http.StatusUnprocessableEntity,
	cube.TooLarge:    http.StatusRequestEntityTooLarge,
	cube.Unavailable: http.StatusServiceUnavailable,
	cube.Unsupported: http.StatusNotImplemented,
}

// KindStatuses returns a copy of the status each core error kind answers
// with, for the tests and documents that pin or list the mapping.
func KindStatuses() map[cube.Kind]int {
	out := make(map[cube.Kind]int, len(kindStatus))
	for k, status := range kindStatus {
		out[k] = status
	}
	return out
}

// StatusOf is the HTTP status err maps to: the Status of the first *Error in
// its chain, else the status of its cube kind, 504 for a deadline that ran
// out, 500 otherwise.
func StatusOf(err error) int {
	var he *Error
	if errors.As(err, &he) && he.Status >= 400 && he.Status <= 599 {
		return he.Status
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
	var he *Error
	if errors.As(err, &he) {
		return he.RetryAfter
	}
	return cube.RetryAfterOf(err)
}

// SetRetryAfter tells the client to wait d before retrying, in the whole
// seconds the header carries, rounded up so it never comes back early.
// Zero or less sets nothing.
func SetRetryAfter(h http.Header, d time.Duration) {
	if d <= 0 {
		return
	}
	h.Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
}

// Body is every non-2xx answer of the control plane: E2B's error shape,
// its code the answer's status.
type Body struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Write answers err in the control plane's error shape, with the status
// StatusOf gives it and Retry-After when it has one. An error without
// text is answered with its status's name, so the client is told
// something.
func Write(w http.ResponseWriter, err error) {
	status := StatusOf(err)
	SetRetryAfter(w.Header(), retryAfter(err))
	msg := err.Error()
	if msg == "" {
		msg = http.StatusText(status)
	}
	writeJSON(w, status, "application/json", Body{Code: status, Message: msg})
}

// SandboxBody is what the sandbox proxy answers with when it cannot or may
// not reach a sandbox: E2B's proxy shape, in which the SDKs look for
// sandboxId. Port is set when the sandbox runs but nothing answers on the
// port.
type SandboxBody struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

// WriteSandbox answers with body, its Code the status. E2B's proxy sends
// this shape with a charset, and so does this one.
func WriteSandbox(w http.ResponseWriter, body SandboxBody) {
	writeJSON(w, body.Code, "application/json; charset=utf-8", body)
}

func writeJSON(w http.ResponseWriter, status int, contentType string, body any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
