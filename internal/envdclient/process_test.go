package envdclient

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	processpb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
)

// fakeProcess answers Start with the events it is given, after noting
// what it was asked.
type fakeProcess struct {
	processpbconnect.UnimplementedProcessHandler
	events []*processpb.ProcessEvent
	fail   error
	auth   string
	cfg    *processpb.ProcessConfig
}

func (f *fakeProcess) Start(_ context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	f.auth, f.cfg = req.Header().Get("Authorization"), req.Msg.GetProcess()
	if f.fail != nil {
		return f.fail
	}
	for _, ev := range f.events {
		if err := stream.Send(&processpb.StartResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func startProcess(t *testing.T, f *fakeProcess) *Client {
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(f))
	return start(t, mux)
}

func data(stdout, stderr string) *processpb.ProcessEvent {
	d := &processpb.ProcessEvent_DataEvent{}
	if stdout != "" {
		d.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(stdout)}
	} else {
		d.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: []byte(stderr)}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: d}}
}

func end(code int32) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: code, Exited: true}}}
}

func TestRun(t *testing.T) {
	f := &fakeProcess{events: []*processpb.ProcessEvent{data("out\n", ""), data("", "err\n"), end(0)}}
	var out strings.Builder
	err := startProcess(t, f).Run(context.Background(), "root", "/w", map[string]string{"A": "1"}, "echo hi", &out)
	if err != nil || out.String() != "out\nerr\n" {
		t.Fatalf("Run = %v, output %q", err, out.String())
	}
	if f.auth != "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")) {
		t.Errorf("authorised by %q, want Basic for root", f.auth)
	}
	if f.cfg.GetCmd() != "/bin/sh" || strings.Join(f.cfg.GetArgs(), " ") != "-c echo hi" || f.cfg.GetCwd() != "/w" || f.cfg.GetEnvs()["A"] != "1" {
		t.Errorf("started %v", f.cfg)
	}
}

func TestRunWithoutCwd(t *testing.T) {
	f := &fakeProcess{events: []*processpb.ProcessEvent{end(0)}}
	if err := startProcess(t, f).Run(context.Background(), "user", "", nil, "true", &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if f.cfg.Cwd != nil {
		t.Errorf("cwd sent as %q, want none: envd's default applies", f.cfg.GetCwd())
	}
}

func TestRunExitCode(t *testing.T) {
	f := &fakeProcess{events: []*processpb.ProcessEvent{end(3)}}
	err := startProcess(t, f).Run(context.Background(), "user", "", nil, "exit 3", &strings.Builder{})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || err.Error() != "exited with code 3" {
		t.Fatalf("Run = %v, want exit code 3", err)
	}
}

func TestRunStartRefused(t *testing.T) {
	f := &fakeProcess{fail: connect.NewError(connect.CodeInvalidArgument, errors.New("no such user"))}
	err := startProcess(t, f).Run(context.Background(), "nobody", "", nil, "true", &strings.Builder{})
	var ee *ExitError
	if err == nil || errors.As(err, &ee) || !strings.Contains(err.Error(), "no such user") {
		t.Fatalf("Run = %v, want envd's refusal", err)
	}
}

func TestRunWithoutEnd(t *testing.T) {
	f := &fakeProcess{events: []*processpb.ProcessEvent{data("partial", "")}}
	err := startProcess(t, f).Run(context.Background(), "user", "", nil, "true", &strings.Builder{})
	if err == nil || err.Error() != "the process ended without an exit code" {
		t.Fatalf("Run = %v", err)
	}
}

func TestHealth(t *testing.T) {
	var down atomic.Bool
	c := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != HealthPath || down.Load() {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	if err := c.Health(context.Background()); err == nil || err.Error() != "answered 503 Service Unavailable" {
		t.Fatalf("Health of an agent not up = %v", err)
	}
}
