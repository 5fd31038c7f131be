package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cube/internal/envd/codeinterp/jupyter/jupytertest"
)

// line is one decoded NDJSON line of an /execute answer.
type line map[string]any

func (l line) str(k string) string { s, _ := l[k].(string); return s }

// execution is what a client collects from /execute.
type execution struct {
	lines []line
}

func (e execution) ofType(typ string) []line {
	var out []line
	for _, l := range e.lines {
		if l.str("type") == typ {
			out = append(out, l)
		}
	}
	return out
}

func (e execution) text(typ string) string {
	var b strings.Builder
	for _, l := range e.ofType(typ) {
		b.WriteString(l.str("text"))
	}
	return b.String()
}

// mainText returns the text of the main result, as the SDK's execution.text.
func (e execution) mainText(t *testing.T) string {
	t.Helper()
	for _, l := range e.ofType("result") {
		if l["is_main_result"] == true {
			return l.str("text")
		}
	}
	t.Fatalf("no main result in %v", e.lines)
	return ""
}

func (e execution) noError(t *testing.T) {
	t.Helper()
	if errs := e.ofType("error"); len(errs) > 0 {
		t.Fatalf("unexpected error line %v", errs[0])
	}
}

type testServer struct {
	*Server
	url string

	envMu sync.Mutex
	env   map[string]string
}

func (ts *testServer) setEnv(k, v string) {
	ts.envMu.Lock()
	defer ts.envMu.Unlock()
	ts.env[k] = v
}

func newTestServer(t *testing.T, specDirs []string, authorize func(*http.Request) bool) *testServer {
	t.Helper()
	ts := &testServer{env: map[string]string{}}
	ts.Server = New(Options{
		Env: func() map[string]string {
			ts.envMu.Lock()
			defer ts.envMu.Unlock()
			return maps.Clone(ts.env)
		},
		DefaultCwd:     t.TempDir(),
		Authorize:      authorize,
		KernelSpecDirs: specDirs,
	})
	hs := httptest.NewServer(ts.Handler())
	ts.url = hs.URL
	t.Cleanup(func() {
		hs.Close()
		ts.Close()
	})
	return ts
}

func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readLines(t *testing.T, r io.Reader, each func(line)) execution {
	t.Helper()
	var e execution
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		e.lines = append(e.lines, l)
		if each != nil {
			each(l)
		}
	}
	return e
}

// run executes code and returns every line; the stream must end with
// end_of_execution.
func (ts *testServer) run(t *testing.T, body map[string]any) execution {
	t.Helper()
	resp := post(t, ts.url+"/execute", body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("execute: %s: %s", resp.Status, msg)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		t.Errorf("content type %q", ct)
	}
	e := readLines(t, resp.Body, nil)
	if len(e.lines) == 0 || e.lines[len(e.lines)-1].str("type") != "end_of_execution" {
		t.Fatalf("stream does not end with end_of_execution: %v", e.lines)
	}
	return e
}

func (ts *testServer) code(t *testing.T, code string) execution {
	t.Helper()
	return ts.run(t, map[string]any{"code": code})
}

func TestExecute(t *testing.T) {
	ts := newTestServer(t, []string{jupytertest.SpecDir(t)}, nil)
	ts.Start(context.Background())

	t.Run("expression result", func(t *testing.T) {
		e := ts.code(t, "1 + 1")
		e.noError(t)
		if got := e.mainText(t); got != "2" {
			t.Fatalf("text %q, want 2", got)
		}
		counts := e.ofType("number_of_executions")
		if len(counts) != 1 || counts[0]["execution_count"].(float64) < 1 {
			t.Fatalf("number_of_executions lines %v", counts)
		}
		if !ts.Ready() {
			t.Fatal("Ready is false with the default kernel running")
		}
	})

	t.Run("string result without quotes", func(t *testing.T) {
		if got := ts.code(t, "'hel' + 'lo'").mainText(t); got != "hello" {
			t.Fatalf("text %q, want hello", got)
		}
	})

	t.Run("print", func(t *testing.T) {
		e := ts.code(t, "print('hello')\nprint('world')")
		e.noError(t)
		if got := e.text("stdout"); got != "hello\nworld\n" {
			t.Fatalf("stdout %q", got)
		}
		if len(e.ofType("result")) != 0 {
			t.Fatalf("print produced results: %v", e.ofType("result"))
		}
		if e.ofType("stdout")[0].str("timestamp") == "" {
			t.Fatal("stdout line without timestamp")
		}
	})

	t.Run("stderr", func(t *testing.T) {
		e := ts.code(t, "import sys\nprint('oops', file=sys.stderr)")
		if got := e.text("stderr"); got != "oops\n" {
			t.Fatalf("stderr %q", got)
		}
	})

	t.Run("exception", func(t *testing.T) {
		e := ts.code(t, "print('before')\n1/0\nprint('after')")
		errs := e.ofType("error")
		if len(errs) != 1 {
			t.Fatalf("error lines %v", errs)
		}
		if errs[0].str("name") != "ZeroDivisionError" || errs[0].str("value") != "division by zero" {
			t.Fatalf("error %v", errs[0])
		}
		// IPython colours tracebacks with ANSI escapes, as Jupyter frontends expect.
		tb := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(errs[0].str("traceback"), "")
		if !strings.Contains(tb, "ZeroDivisionError") || !strings.Contains(tb, "----> 2 1/0") {
			t.Fatalf("traceback %q", tb)
		}
		if got := e.text("stdout"); got != "before\n" {
			t.Fatalf("stdout %q", got)
		}
	})

	t.Run("matplotlib png", func(t *testing.T) {
		e := ts.code(t, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()")
		e.noError(t)
		var png string
		for _, r := range e.ofType("result") {
			if p := r.str("png"); p != "" {
				png = p
				if r["is_main_result"] != false {
					t.Errorf("figure is_main_result = %v, want false", r["is_main_result"])
				}
			}
		}
		data, err := base64.StdEncoding.DecodeString(png)
		if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("no PNG figure in %v (decode err %v)", e.ofType("result"), err)
		}
	})

	t.Run("pandas html", func(t *testing.T) {
		e := ts.code(t, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
		e.noError(t)
		var html string
		for _, r := range e.ofType("result") {
			if r["is_main_result"] == true {
				html = r.str("html")
			}
		}
		if !strings.Contains(html, "<table") || !strings.Contains(html, "<th>b</th>") {
			t.Fatalf("DataFrame html %q", html)
		}
	})

	t.Run("display data and extra formats", func(t *testing.T) {
		e := ts.code(t, "from IPython.display import display, Markdown\n"+
			"display(Markdown('**hi**'))\n"+
			"display({'application/x-cube': 'v', 'text/plain': 'p'}, raw=True)")
		e.noError(t)
		rs := e.ofType("result")
		if len(rs) != 2 {
			t.Fatalf("results %v", rs)
		}
		if rs[0].str("markdown") != "**hi**" || rs[0]["is_main_result"] != false {
			t.Fatalf("markdown result %v", rs[0])
		}
		extra, _ := rs[1]["extra"].(map[string]any)
		if extra["application/x-cube"] != "v" || rs[1].str("text") != "p" {
			t.Fatalf("extra result %v", rs[1])
		}
	})

	t.Run("state across calls", func(t *testing.T) {
		ts.code(t, "counter = 41").noError(t)
		if got := ts.code(t, "counter += 1\ncounter").mainText(t); got != "42" {
			t.Fatalf("counter %q", got)
		}
	})

	t.Run("per-call env vars", func(t *testing.T) {
		ts.code(t, "import os\nos.environ['CUBE_KEPT'] = 'original'").noError(t)
		e := ts.run(t, map[string]any{
			"code":     "import os\nprint(os.environ.get('CUBE_CALL'), os.environ.get('CUBE_KEPT'))",
			"env_vars": map[string]string{"CUBE_CALL": "it's \"quoted\"\n", "CUBE_KEPT": "override"},
		})
		e.noError(t)
		if got := e.text("stdout"); got != "it's \"quoted\"\n override\n" {
			t.Fatalf("inside the call: %q", got)
		}
		if got := ts.code(t, "import os\nprint(os.environ.get('CUBE_CALL'), os.environ.get('CUBE_KEPT'))").text("stdout"); got != "None original\n" {
			t.Fatalf("after the call: %q", got)
		}
		// Restored even when the code fails (the kernel aborts its queue then).
		e = ts.run(t, map[string]any{"code": "raise ValueError('boom')", "env_vars": map[string]string{"CUBE_CALL": "set"}})
		if errs := e.ofType("error"); len(errs) != 1 || errs[0].str("name") != "ValueError" {
			t.Fatalf("failing call: %v", e.lines)
		}
		if got := ts.code(t, "import os\nprint(os.environ.get('CUBE_CALL'))").text("stdout"); got != "None\n" {
			t.Fatalf("after a failing call: %q", got)
		}
	})

	t.Run("sandbox env set after start", func(t *testing.T) {
		ts.setEnv("CUBE_SANDBOX", "from-init")
		if got := ts.code(t, "import os\nos.environ.get('CUBE_SANDBOX')").mainText(t); got != "from-init" {
			t.Fatalf("sandbox env %q", got)
		}
		// A subprocess of the kernel inherits it too.
		if got := ts.code(t, "import subprocess\nprint(subprocess.run(['sh', '-c', 'echo $CUBE_SANDBOX'], capture_output=True, text=True).stdout, end='')").text("stdout"); got != "from-init\n" {
			t.Fatalf("subprocess env %q", got)
		}
	})

	t.Run("executions queue in order", func(t *testing.T) {
		ts.code(t, "first_done = False").noError(t)
		resp := post(t, ts.url+"/execute", map[string]any{"code": "import time\nprint('first running', flush=True)\ntime.sleep(1)\nfirst_done = True"})
		defer resp.Body.Close()
		second := make(chan execution, 1)
		readLines(t, resp.Body, func(l line) {
			if l.str("type") == "stdout" {
				go func() { second <- ts.code(t, "first_done") }()
			}
		})
		if got := (<-second).mainText(t); got != "True" {
			t.Fatalf("second execution ran before the first finished: first_done = %s", got)
		}
	})

	t.Run("disconnect interrupts", func(t *testing.T) {
		ts.code(t, "finished = False").noError(t)
		ctx, cancel := context.WithCancel(context.Background())
		data, _ := json.Marshal(map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\nfinished = True"})
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.url+"/execute", bytes.NewReader(data))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && !strings.Contains(sc.Text(), "sleeping") {
		}
		cancel()
		resp.Body.Close()
		// Only an interrupted kernel answers this before the sleep ends.
		e := ts.code(t, "finished")
		if got := e.mainText(t); got != "False" {
			t.Fatalf("finished = %s", got)
		}
	})

	t.Run("context isolation and lifecycle", func(t *testing.T) {
		dir := t.TempDir()
		resp := post(t, ts.url+"/contexts", map[string]any{"language": "python3", "cwd": dir})
		var c contextJSON
		json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || c.ID == "" || c.Language != "python" || c.Cwd != dir {
			t.Fatalf("create context: %s %+v", resp.Status, c)
		}

		if got := ts.run(t, map[string]any{"code": "import os\nos.getcwd()", "context_id": c.ID}).mainText(t); got != dir {
			t.Fatalf("cwd %q, want %q", got, dir)
		}
		ts.run(t, map[string]any{"code": "secret = 'ctx'", "context_id": c.ID}).noError(t)
		if errs := ts.code(t, "secret").ofType("error"); len(errs) != 1 || errs[0].str("name") != "NameError" {
			t.Fatalf("default context sees the other context's variable: %v", errs)
		}
		if got := ts.run(t, map[string]any{"code": "secret", "context_id": c.ID}).mainText(t); got != "ctx" {
			t.Fatalf("secret %q", got)
		}

		resp, err := http.Get(ts.url + "/contexts")
		if err != nil {
			t.Fatal(err)
		}
		var list []contextJSON
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		found := false
		for _, l := range list {
			found = found || l == c
		}
		if !found || len(list) < 2 {
			t.Fatalf("list %+v lacks %+v or the default context", list, c)
		}

		// A restart ends the execution running in the context.
		running := post(t, ts.url+"/execute", map[string]any{"code": "import time\nprint('busy', flush=True)\ntime.sleep(600)", "context_id": c.ID})
		restarted := make(chan int, 1)
		e := readLines(t, running.Body, func(l line) {
			if l.str("type") == "stdout" {
				go func() {
					resp := post(t, ts.url+"/contexts/"+c.ID+"/restart", nil)
					resp.Body.Close()
					restarted <- resp.StatusCode
				}()
			}
		})
		running.Body.Close()
		if errs := e.ofType("error"); len(errs) != 1 || errs[0].str("name") != "ContextRestarting" {
			t.Fatalf("execution during restart: %v", e.lines)
		}
		if code := <-restarted; code/100 != 2 {
			t.Fatalf("restart: %d", code)
		}
		if errs := ts.run(t, map[string]any{"code": "secret", "context_id": c.ID}).ofType("error"); len(errs) != 1 || errs[0].str("name") != "NameError" {
			t.Fatalf("variable survived a restart: %v", errs)
		}

		req, _ := http.NewRequest("DELETE", ts.url+"/contexts/"+c.ID, nil)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("delete: %s", resp.Status)
		}
		resp = post(t, ts.url+"/execute", map[string]any{"code": "1", "context_id": c.ID})
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(msg), c.ID) {
			t.Fatalf("execute in deleted context: %s %s", resp.Status, msg)
		}
	})

	t.Run("kernel death restarts the context", func(t *testing.T) {
		ts.code(t, "doomed = 1").noError(t)
		e := ts.code(t, "import os\nos._exit(1)")
		errs := e.ofType("error")
		if len(errs) != 1 || errs[0].str("name") != "DeadKernelError" {
			t.Fatalf("error lines after kernel death: %v", e.lines)
		}
		if got := ts.code(t, "6 * 7").mainText(t); got != "42" {
			t.Fatalf("after restart: %q", got)
		}
		if errs := ts.code(t, "doomed").ofType("error"); len(errs) != 1 || errs[0].str("name") != "NameError" {
			t.Fatalf("state survived the kernel's death: %v", errs)
		}
		// The restarted kernel still gets sandbox env vars.
		ts.setEnv("CUBE_SANDBOX", "from-init")
		if got := ts.code(t, "import os\nos.environ.get('CUBE_SANDBOX')").mainText(t); got != "from-init" {
			t.Fatalf("sandbox env after restart %q", got)
		}
	})

	t.Run("killed kernel (OOM) restarts the context", func(t *testing.T) {
		pid, _ := strconv.Atoi(ts.code(t, "import os\nos.getpid()").mainText(t))
		resp := post(t, ts.url+"/execute", map[string]any{"code": "import time\nprint('ready', flush=True)\ntime.sleep(600)"})
		e := readLines(t, resp.Body, func(l line) {
			if l.str("type") == "stdout" {
				syscall.Kill(pid, syscall.SIGKILL) // what the OOM killer does
			}
		})
		resp.Body.Close()
		if errs := e.ofType("error"); len(errs) != 1 || errs[0].str("name") != "DeadKernelError" || !strings.Contains(errs[0].str("value"), "killed") {
			t.Fatalf("lines after SIGKILL: %v", e.lines)
		}
		if got := ts.code(t, "'alive'").mainText(t); got != "alive" {
			t.Fatalf("after restart: %q", got)
		}
	})

	t.Run("request errors", func(t *testing.T) {
		for _, c := range []struct {
			body any
			want int
		}{
			{map[string]any{"code": "1", "context_id": "x", "language": "python"}, http.StatusBadRequest},
			{map[string]any{"code": "1", "context_id": "nope"}, http.StatusNotFound},
			{map[string]any{"language": "python"}, http.StatusBadRequest},
			{map[string]any{"code": "1", "env_vars": map[string]string{"BAD-NAME": "x"}}, http.StatusBadRequest},
			{map[string]any{"code": "1", "language": "cobol"}, http.StatusNotFound},
			{"not an object", http.StatusBadRequest},
		} {
			resp := post(t, ts.url+"/execute", c.body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("%v: %s, want %d", c.body, resp.Status, c.want)
			}
		}
		resp := post(t, ts.url+"/contexts", map[string]any{"cwd": "/does/not/exist"})
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("context in missing cwd: %s", resp.Status)
		}
	})

	t.Run("close leaves no kernel", func(t *testing.T) {
		pid, err := strconv.Atoi(ts.code(t, "import os\nos.getpid()").mainText(t))
		if err != nil {
			t.Fatal(err)
		}
		ts.Close()
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("kernel %d still exists after Close (kill 0: %v)", pid, err)
		}
		if ts.Ready() {
			t.Fatal("Ready after Close")
		}
	})
}

// The default kernel is warmed for a template's shared snapshot: its
// objects are frozen out of the collector's reach, the warm-up leaves no
// names, and the user's first cell is still execution 1.
func TestDefaultKernelIsWarmed(t *testing.T) {
	ts := newTestServer(t, []string{jupytertest.SpecDir(t)}, nil)
	ts.Start(context.Background())
	e := ts.code(t, "import gc\ngc.get_freeze_count() > 1000 and not any(n.startswith('_cube') for n in globals())")
	e.noError(t)
	if got := e.mainText(t); got != "True" {
		t.Fatalf("frozen and clean: %q, want True", got)
	}
	counts := e.ofType("number_of_executions")
	if len(counts) != 1 || counts[0]["execution_count"].(float64) != 1 {
		t.Fatalf("first cell's number_of_executions lines %v, want execution 1", counts)
	}
}

func TestKeepalive(t *testing.T) {
	old := keepaliveInterval
	keepaliveInterval = 100 * time.Millisecond
	defer func() { keepaliveInterval = old }()
	ts := newTestServer(t, []string{jupytertest.SpecDir(t)}, nil)
	e := ts.code(t, "import time\ntime.sleep(1)")
	if len(e.ofType("keepalive")) == 0 {
		t.Fatalf("no keepalive in a silent second: %v", e.lines)
	}
}

func TestNoKernelInstalled(t *testing.T) {
	ts := newTestServer(t, []string{t.TempDir()}, nil)
	ts.Start(context.Background())
	resp := post(t, ts.url+"/execute", map[string]any{"code": "1"})
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(msg), `no Jupyter kernel for language "python"`) {
		t.Fatalf("execute without kernels: %s %s", resp.Status, msg)
	}
	resp = post(t, ts.url+"/contexts", map[string]any{})
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("create context without kernels: %s", resp.Status)
	}
	if ts.Ready() {
		t.Fatal("Ready without any kernel")
	}
}

func TestBrokenKernel(t *testing.T) {
	// A kernelspec whose kernel exits at once: the client gets an error
	// line saying why, not a hang.
	dir := jupytertest.SpecDir(t)
	spec := `{"argv": ["` + jupytertest.Python + `", "-c", "import sys; sys.exit('ipykernel is broken')", "{connection_file}"], "language": "python"}`
	if err := writeFile(dir+"/python3/kernel.json", spec); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, []string{dir}, nil)
	e := ts.code(t, "1")
	errs := e.ofType("error")
	if len(errs) != 1 || errs[0].str("name") != "KernelStartError" || !strings.Contains(errs[0].str("value"), "ipykernel is broken") {
		t.Fatalf("lines: %v", e.lines)
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
