package api

import (
	"net/http"

	"cube/internal/cube"
)

// kindStatus is the one place where the core's error kinds become E2B
// status codes. The body of each answer is the E2B error shape with the
// same code and the error's own text (writeError); a Capacity error's
// RetryAfter also becomes the Retry-After header, which the SDKs honour.
// Errors without a kind answer 500 (504 for a deadline that ran out).
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
