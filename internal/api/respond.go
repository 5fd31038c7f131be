package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cube/internal/httperr"
	"cube/internal/id"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err in the E2B error shape.
func writeError(w http.ResponseWriter, err error) { httperr.Write(w, err) }

func badRequest(format string, args ...any) *httperr.Error {
	return httperr.Errorf(http.StatusBadRequest, format, args...)
}

// decodeBody reads a JSON object into v. An empty body is an error only when
// required. Unknown fields are ignored (newer SDKs send fields older servers
// do not know), except the E2B fields this server refuses (unsupportedFields);
// wrong types and bad syntax name the field or position.
func decodeBody(r *http.Request, v any, required bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return httperr.Errorf(http.StatusRequestEntityTooLarge, "request body larger than %d bytes", mbe.Limit)
		}
		return badRequest("reading request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if required {
			return badRequest("request body is required")
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return badRequest("malformed JSON: data after the top-level value")
	}
	return refuseUnsupported(body, v)
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badRequest("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return badRequest("request body must be a JSON object, not %s", te.Value)
		}
		return badRequest("field %q: expected %s, got %s", te.Field, jsonType(te.Type.Kind().String()), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: unexpected end of body")
	}
	return badRequest("malformed JSON: %v", err)
}

func jsonType(kind string) string {
	switch kind {
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	}
	return kind
}

// sandboxID is the validated {sandboxID} path value.
func sandboxID(r *http.Request) (string, error) {
	v := r.PathValue("sandboxID")
	if !id.ValidSandbox(v) {
		return "", badRequest("invalid sandbox ID %q: want 1-63 lowercase letters and digits", v)
	}
	return v, nil
}

func templateID(r *http.Request) (string, error) {
	v := r.PathValue("templateID")
	if v == "" || len(v) > 256 || strings.ContainsAny(v, "\x00\n\r") {
		return "", badRequest("invalid template ID %q", v)
	}
	return v, nil
}

// seconds turns an optional timeout field into a duration: def when absent,
// 400 naming the field when outside [min, max].
func seconds(field string, v *int, def, min, max time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	d := time.Duration(*v) * time.Second
	if *v < 0 || d < min || d > max || int64(*v) > int64(max/time.Second) {
		return 0, badRequest("%s must be between %d and %d seconds, got %d", field, int64(min/time.Second), int64(max/time.Second), *v)
	}
	return d, nil
}

// queryInt parses an optional integer query parameter within [min, max].
func queryInt(r *http.Request, name string, def, min, max int64) (int64, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < min || n > max {
		return 0, badRequest("query parameter %s must be an integer between %d and %d, got %q", name, min, max, raw)
	}
	return n, nil
}

// capability returns the backend as T, one of the optional interfaces of
// cube, or a 501 saying what the server does not support.
func capability[T any](s *Server, what string) (T, error) {
	c, ok := s.backend.(T)
	if !ok {
		return c, httperr.Errorf(http.StatusNotImplemented, "%s not supported by this server", what)
	}
	return c, nil
}
