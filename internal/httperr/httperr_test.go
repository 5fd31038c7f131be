package httperr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"cube/internal/cube"
)

func TestStatusOf(t *testing.T) {
	e := Errorf(http.StatusInsufficientStorage, "snapshot of %s: %w", "sb1", fs.ErrExist)
	if e.Error() != "snapshot of sb1: file already exists" || !errors.Is(e, fs.ErrExist) {
		t.Errorf("Errorf = %q, unwraps to ErrExist: %v", e, errors.Is(e, fs.ErrExist))
	}
	for _, c := range []struct {
		err  error
		want int
	}{
		{e, 507},
		{fmt.Errorf("node: %w", Errorf(http.StatusConflict, "paused")), 409},
		// The HTTP layer's own status wins over a kind further down.
		{Errorf(http.StatusBadGateway, "%w", cube.Errorf(cube.NotFound, "gone")), 502},
		{fmt.Errorf("get: %w", cube.Errorf(cube.NotFound, "gone")), 404},
		{fmt.Errorf("boot: %w", context.DeadlineExceeded), 504},
		{errors.New("runsc exploded"), 500},
		{&Error{Status: 42, Message: "nonsense"}, 500},
		{cube.ErrNotSupported, 501},
	} {
		if got := StatusOf(c.err); got != c.want {
			t.Errorf("StatusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// Every kind of the core has a status: a new kind must be given one here.
func TestEveryKindHasAStatus(t *testing.T) {
	statuses := KindStatuses()
	for _, k := range cube.Kinds {
		if _, ok := statuses[k]; !ok {
			t.Errorf("kind %v has no status", k)
		}
	}
	statuses[cube.NotFound] = 0
	if kindStatus[cube.NotFound] != http.StatusNotFound {
		t.Error("KindStatuses handed out the mapping itself")
	}
}

func TestWrite(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        error
		status     int
		retryAfter string
		body       string
	}{
		{"kind", fmt.Errorf("node: %w", cube.Errorf(cube.NotFound, "sandbox %q not found", "sb1")),
			404, "", `{"code":404,"message":"node: sandbox \"sb1\" not found"}` + "\n"},
		{"capacity rounds its wait up", cube.Errorf(cube.Capacity, "full").WithRetryAfter(1500 * time.Millisecond),
			429, "2", `{"code":429,"message":"full"}` + "\n"},
		{"own status and wait", Errorf(http.StatusTooManyRequests, "slow down").WithRetryAfter(time.Second),
			429, "1", `{"code":429,"message":"slow down"}` + "\n"},
		{"no text", &Error{Status: http.StatusMethodNotAllowed},
			405, "", `{"code":405,"message":"Method Not Allowed"}` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, c.err)
			if rec.Code != c.status || rec.Body.String() != c.body {
				t.Errorf("%d %q, want %d %q", rec.Code, rec.Body, c.status, c.body)
			}
			if got := rec.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type %q", got)
			}
			if got := rec.Header().Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
		})
	}
}

func TestWriteSandbox(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteSandbox(rec, SandboxBody{SandboxID: "sb1", Message: "closed", Code: http.StatusBadGateway})
	want := `{"sandboxId":"sb1","message":"closed","code":502}` + "\n"
	if rec.Code != 502 || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("%d %q %q, want 502 %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body, want)
	}
	rec = httptest.NewRecorder()
	WriteSandbox(rec, SandboxBody{SandboxID: "sb1", Message: "closed", Port: 8080, Code: http.StatusBadGateway})
	if want := `{"sandboxId":"sb1","message":"closed","port":8080,"code":502}` + "\n"; rec.Body.String() != want {
		t.Errorf("%q, want %q", rec.Body, want)
	}
}

func TestSetRetryAfter(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "",
		-time.Second:            "",
		time.Millisecond:        "1",
		time.Second:             "1",
		1001 * time.Millisecond: "2",
		10 * time.Second:        "10",
	} {
		h := http.Header{}
		SetRetryAfter(h, d)
		if got := h.Get("Retry-After"); got != want {
			t.Errorf("SetRetryAfter(%v) = %q, want %q", d, got, want)
		}
	}
}
