package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"cube/internal/api/wire"
)

func TestRunCodeThroughTheProxy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/execute" || r.Header.Get("E2b-Sandbox-Id") != "sb1" || r.Header.Get("E2b-Sandbox-Port") != "49999" ||
			r.Header.Get("X-Access-Token") != "tok" {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(wire.Error{Code: 401, Message: "bad proxy headers"})
			return
		}
		// The API key must not travel into the sandbox.
		if r.Header.Get("X-API-Key") != "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var body struct {
			Code string `json:"code"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		enc := json.NewEncoder(w)
		enc.Encode(map[string]any{"type": "stdout", "text": "a\n"})
		w.Write([]byte("not json\n\n"))
		enc.Encode(map[string]any{"type": "stdout", "text": body.Code + "\n"})
		if body.Code == "raise" {
			enc.Encode(map[string]any{"type": "error", "name": "ValueError", "value": "boom"})
			enc.Encode(map[string]any{"type": "stdout", "text": "after\n"})
		}
		enc.Encode(map[string]any{"type": "end_of_execution"})
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	ctx := context.Background()
	sb := &wire.Sandbox{SandboxID: "sb1", EnvdAccessToken: "tok"}

	out, err := c.RunCode(ctx, sb, "print(1)")
	if err != nil || out != "a\nprint(1)\n" {
		t.Errorf("run = %q, %v", out, err)
	}
	out, err = c.RunCode(ctx, sb, "raise")
	var ke *KernelError
	if !errors.As(err, &ke) || ke.Name != "ValueError" || ke.Value != "boom" || out != "a\nraise\n" {
		t.Errorf("exception: %q, %v", out, err)
	}
	_, err = c.RunCode(ctx, &wire.Sandbox{SandboxID: "sb1"}, "x")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 401 || !strings.Contains(ae.Path, "sandbox sb1, port 49999") {
		t.Errorf("without token: %v", err)
	}
}
