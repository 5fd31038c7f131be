package envd_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"cube/internal/envd"
	"cube/internal/envd/gen/filesystem/filesystempbconnect"
	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
	"cube/internal/envd/users"
)

// sandbox is an envd served on the host, with clients for both codecs.
type sandbox struct {
	t       *testing.T
	srv     *envd.Server
	url     string
	dir     string                         // default working directory
	proc    processpbconnect.ProcessClient // binary codec
	procJS  processpbconnect.ProcessClient // JSON codec, as the JS SDK uses
	fs      filesystempbconnect.FilesystemClient
	fsJS    filesystempbconnect.FilesystemClient
	token   string // sent as X-Access-Token when set
	user    string // sent as Basic authorization when set
	headers http.Header
	homeRel string // see rel
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	dir := t.TempDir()
	opts := envd.Options{Logger: slog.New(slog.DiscardHandler), Env: []string{"PATH=" + os.Getenv("PATH"), "CUBE_TEMPLATE_VAR=from-template"}, DefaultWorkdir: dir}
	if os.Geteuid() == 0 {
		opts.DefaultUser = "root"
	}
	srv, err := envd.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close()
		hs.CloseClientConnections()
		hs.Close()
	})
	s := &sandbox{t: t, srv: srv, url: hs.URL, dir: dir}
	hc := &http.Client{Transport: &headerTransport{s: s}}
	s.proc = processpbconnect.NewProcessClient(hc, hs.URL)
	s.procJS = processpbconnect.NewProcessClient(hc, hs.URL, connect.WithProtoJSON())
	s.fs = filesystempbconnect.NewFilesystemClient(hc, hs.URL)
	s.fsJS = filesystempbconnect.NewFilesystemClient(hc, hs.URL, connect.WithProtoJSON())
	return s
}

// home is the default user's home directory, where relative paths
// resolve (the default workdir, s.dir, is only what the empty path means).
func (s *sandbox) home() string {
	s.t.Helper()
	name := users.DefaultName
	if os.Geteuid() == 0 {
		name = users.RootName
	} else if _, err := users.Lookup(name); err != nil {
		cur, err := users.Current()
		if err != nil {
			s.t.Fatal(err)
		}
		name = cur.Name
	}
	u, err := users.Lookup(name)
	if err != nil {
		s.t.Fatal(err)
	}
	return u.Home
}

// rel is name as a relative path, inside a directory of the default user's
// home made for this sandbox and removed after the test, so tests can send
// relative paths without meeting each other's files or leaving any behind.
func (s *sandbox) rel(name string) string {
	s.t.Helper()
	if s.homeRel == "" {
		dir, err := os.MkdirTemp(s.home(), "cube-envd-test-")
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { os.RemoveAll(dir) })
		s.homeRel = filepath.Base(dir)
	}
	return filepath.Join(s.homeRel, name)
}

// inHome is where rel(name) lands: an absolute path in the home.
func (s *sandbox) inHome(name string) string {
	return filepath.Join(s.home(), s.rel(name))
}

// headerTransport adds the sandbox's current token and user to every call.
type headerTransport struct{ s *sandbox }

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.s.token != "" {
		r.Header.Set("X-Access-Token", h.s.token)
	}
	if h.s.user != "" {
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(h.s.user+":")))
	}
	for k, v := range h.s.headers {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (s *sandbox) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.t.Cleanup(cancel)
	return ctx
}

// do sends a plain HTTP request and returns status and body.
func (s *sandbox) do(method, path string, body io.Reader, hdr map[string]string) (int, []byte, http.Header) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

func (s *sandbox) init(body any, token string) int {
	s.t.Helper()
	b, _ := json.Marshal(body)
	hdr := map[string]string{"Content-Type": "application/json"}
	if token != "" {
		hdr["X-Access-Token"] = token
	}
	status, _, _ := s.do("POST", "/init", bytes.NewReader(b), hdr)
	return status
}

// result is everything a process stream delivered.
type result struct {
	events []*pb.ProcessEvent
	stdout string
	stderr string
	pty    string
	end    *pb.ProcessEvent_EndEvent
	err    error
}

// collect reads a Start or Connect stream to its end.
func collect[T interface{ GetEvent() *pb.ProcessEvent }](stream interface {
	Receive() bool
	Msg() T
	Err() error
}) result {
	var r result
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		r.events = append(r.events, ev)
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Data:
			r.stdout += string(e.Data.GetStdout())
			r.stderr += string(e.Data.GetStderr())
			r.pty += string(e.Data.GetPty())
		case *pb.ProcessEvent_End:
			r.end = e.End
		}
	}
	r.err = stream.Err()
	return r
}

func (s *sandbox) run(client processpbconnect.ProcessClient, req *pb.StartRequest) result {
	s.t.Helper()
	stream, err := client.Start(s.ctx(), connect.NewRequest(req))
	if err != nil {
		s.t.Fatal(err)
	}
	defer stream.Close()
	return collect(stream)
}

func shell(script string) *pb.StartRequest {
	return &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}}
}

func codeOf(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}

func wantCode(t *testing.T, err error, want connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	if got := codeOf(err); got != want {
		t.Fatalf("got %v (%v), want %v", got, err, want)
	}
}

// eventually polls cond until it holds, failing after a generous bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
}
