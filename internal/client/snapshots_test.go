package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"cube/internal/api/wire"
)

func TestListSnapshotsPaging(t *testing.T) {
	var queries []string
	// pages maps the nextToken asked for to the answer: the items and the
	// token handed back.
	type answer struct {
		ids  []string
		next string
		code int
	}
	var pages map[string]answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.RawQuery)
		a := pages[r.URL.Query().Get("nextToken")]
		if len(queries) > 5 {
			// A client that keeps walking fails here instead of hanging.
			a = answer{code: http.StatusTooManyRequests}
		}
		if a.code != 0 {
			w.WriteHeader(a.code)
			json.NewEncoder(w).Encode(wire.Error{Code: a.code, Message: "bad nextToken"})
			return
		}
		if a.next != "" {
			w.Header().Set("X-Next-Token", a.next)
		}
		out := []wire.SnapshotInfo{}
		for _, id := range a.ids {
			out = append(out, wire.SnapshotInfo{SnapshotID: id})
		}
		json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	ids := func(f SnapshotFilter) (string, error) {
		queries = nil
		items, err := c.ListSnapshots(context.Background(), f)
		var s []string
		for _, it := range items {
			s = append(s, it.SnapshotID)
		}
		return strings.Join(s, ","), err
	}

	pages = map[string]answer{"": {ids: []string{"a", "b"}, next: "t1"}, "t1": {ids: []string{"c"}, next: "t2"}, "t2": {ids: []string{"d"}}}
	got, err := ids(SnapshotFilter{SandboxID: "sb1", Name: "n 1"})
	if err != nil || got != "a,b,c,d" {
		t.Fatalf("list = %q, %v", got, err)
	}
	want := "limit=100&name=n+1&sandboxID=sb1|limit=100&name=n+1&nextToken=t1&sandboxID=sb1|limit=100&name=n+1&nextToken=t2&sandboxID=sb1"
	if strings.Join(queries, "|") != want {
		t.Errorf("queries %v", queries)
	}

	// A server that hands back the token it was given, or a token with an
	// empty page, must not make the walk loop.
	pages = map[string]answer{"": {ids: []string{"a"}, next: "t1"}, "t1": {ids: []string{"b"}, next: "t1"}}
	if got, err := ids(SnapshotFilter{}); err != nil || got != "a,b" || len(queries) != 2 {
		t.Errorf("repeated token: %q %v after %d requests", got, err, len(queries))
	}
	pages = map[string]answer{"": {ids: []string{"a"}, next: "t1"}, "t1": {next: "t2"}}
	if got, err := ids(SnapshotFilter{}); err != nil || got != "a" || len(queries) != 2 {
		t.Errorf("empty page: %q %v after %d requests", got, err, len(queries))
	}

	// An error on a later page fails the whole list rather than return
	// part of it as if it were all.
	pages = map[string]answer{"": {ids: []string{"a"}, next: "t1"}, "t1": {code: 400}}
	if _, err := ids(SnapshotFilter{}); err == nil || err.Error() != "server answered 400: bad nextToken" {
		t.Errorf("failing page: %v", err)
	}
}

// countingTransport counts the requests it carries.
type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestConnectSandboxResumed(t *testing.T) {
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, r.Method+" "+r.URL.Path+" "+strings.TrimSpace(string(b)))
		switch r.URL.Path {
		case "/sandboxes/paused/connect":
			w.WriteHeader(http.StatusCreated)
		case "/sandboxes/running/connect":
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(wire.Error{Code: 404, Message: "sandbox \"gone\" not found"})
			return
		}
		json.NewEncoder(w).Encode(wire.Sandbox{SandboxID: strings.Split(r.URL.Path, "/")[2]})
	}))
	defer srv.Close()
	ct := &countingTransport{}
	c := New(srv.URL, "k")
	c.HTTP.Transport = ct
	ctx := context.Background()

	sb, resumed, err := c.ConnectSandbox(ctx, "paused", 120)
	if err != nil || !resumed || sb.SandboxID != "paused" {
		t.Errorf("paused: %+v %v %v", sb, resumed, err)
	}
	sb, resumed, err = c.ConnectSandbox(ctx, "running", 0)
	if err != nil || resumed || sb.SandboxID != "running" {
		t.Errorf("running: %+v %v %v", sb, resumed, err)
	}
	if _, _, err := c.ConnectSandbox(ctx, "gone", 1); !IsNotFound(err) {
		t.Errorf("unknown: %v", err)
	}
	want := `POST /sandboxes/paused/connect {"timeout":120}|POST /sandboxes/running/connect {"timeout":0}|POST /sandboxes/gone/connect {"timeout":1}`
	if strings.Join(bodies, "|") != want {
		t.Errorf("sent %v", bodies)
	}
	// The caller's transport carries the calls and stays in place.
	if ct.n.Load() != 3 || c.HTTP.Transport != ct {
		t.Errorf("transport used %d times, now %T", ct.n.Load(), c.HTTP.Transport)
	}
}

func TestPauseAndCloneBodies(t *testing.T) {
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sent = append(sent, r.Method+" "+r.URL.Path+" "+strings.TrimSpace(string(b)))
		if strings.HasSuffix(r.URL.Path, "/clone") || strings.HasSuffix(r.URL.Path, "/fork") {
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode([]wire.ForkResult{{Sandbox: &wire.Sandbox{SandboxID: "c1"}}, {Error: &wire.Error{Code: 503, Message: "busy"}}})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	ctx := context.Background()
	if err := c.PauseSandbox(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	if err := c.PauseSandbox(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	res, err := c.CloneSandbox(ctx, "a", CloneOptions{Count: 2})
	if err != nil || len(res) != 2 || res[0].Sandbox.SandboxID != "c1" || res[1].Error.Message != "busy" {
		t.Errorf("clone = %+v, %v", res, err)
	}
	if _, err := c.CloneSandbox(ctx, "a", CloneOptions{Count: 5, Concurrency: 2, TimeoutSec: 30}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.ForkSandbox(ctx, "a", 3); err != nil || len(res) != 2 {
		t.Errorf("fork = %+v, %v", res, err)
	}
	if err := c.DeleteSnapshot(ctx, "snap-1"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"POST /sandboxes/a/pause ",
		`POST /sandboxes/a/pause {"memory":false}`,
		`POST /sandboxes/a/clone {"count":2}`,
		`POST /sandboxes/a/clone {"count":5,"concurrency":2,"timeout":30}`,
		`POST /sandboxes/a/fork {"count":3}`,
		"DELETE /templates/snap-1 ",
	}
	if strings.Join(sent, "\n") != strings.Join(want, "\n") {
		t.Errorf("sent:\n%s", strings.Join(sent, "\n"))
	}
}
