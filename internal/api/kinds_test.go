package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// TestKindAnswers pins the answer to every core error kind: its status, the
// E2B body carrying the same code and the error's own text, and
// Retry-After only for Capacity and Unavailable.
func TestKindAnswers(t *testing.T) {
	want := map[cube.Kind]int{
		cube.NotFound:    404,
		cube.Conflict:    409,
		cube.Invalid:     400,
		cube.Forbidden:   403,
		cube.Capacity:    429,
		cube.DiskFull:    507,
		cube.Damaged:     422,
		cube.TooLarge:    413,
		cube.Unavailable: 503,
		cube.Unsupported: 501,
	}
	for _, k := range cube.Kinds {
		status, ok := want[k]
		if !ok {
			t.Fatalf("kind %v has no expected status in this test", k)
		}
		t.Run(k.String(), func(t *testing.T) {
			msg := fmt.Sprintf("sandbox %q is %v", "sb1", k)
			err := fmt.Errorf("node: %w", cube.Errorf(k, "%s", msg).WithRetryAfter(1500*time.Millisecond))
			rec := httptest.NewRecorder()
			writeError(rec, err)
			if rec.Code != status {
				t.Errorf("status %d, want %d", rec.Code, status)
			}
			var body wire.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if body.Code != status || body.Message != "node: "+msg {
				t.Errorf("body %+v, want code %d and message %q", body, status, "node: "+msg)
			}
			wantRetry := ""
			if k == cube.Capacity || k == cube.Unavailable {
				wantRetry = "2"
			}
			if got := rec.Header().Get("Retry-After"); got != wantRetry {
				t.Errorf("Retry-After %q, want %q", got, wantRetry)
			}
		})
	}
	for k := range kindStatus {
		if _, ok := want[k]; !ok {
			t.Errorf("kindStatus maps %v, which this test does not pin", k)
		}
	}
}

// An outage of the state database, as the store reports it without
// knowing the core, is 503 with the store's advice as Retry-After.
func TestOutageAnswer(t *testing.T) {
	rec := httptest.NewRecorder()
	writeError(rec, fmt.Errorf("list sandboxes: %w", dbOutage{}))
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "5" {
		t.Errorf("%d, Retry-After %q; want 503 and 5", rec.Code, rec.Header().Get("Retry-After"))
	}
}

type dbOutage struct{}

func (dbOutage) Error() string         { return "the state database is out of reach" }
func (dbOutage) Outage() time.Duration { return 5 * time.Second }

// TestErrorsWithoutKind pins today's answers: 504 for a deadline, 500
// otherwise, both with the error's text.
func TestErrorsWithoutKind(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("boot: %w", context.DeadlineExceeded), 504},
		{fmt.Errorf("runsc exploded"), 500},
		{&cube.Error{Message: "no kind"}, 500},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, c.err)
		var body wire.Error
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != c.status || body.Code != c.status || body.Message != c.err.Error() {
			t.Errorf("%v: %d %+v, want %d with the error's text", c.err, rec.Code, body, c.status)
		}
	}
}
