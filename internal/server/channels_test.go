package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/nodetest"
	"cube/internal/testenv"
)

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// rssOf is the resident memory of process pid, from /proc.
func rssOf(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// TestSandboxTrafficThroughTheServerIsStreamed pushes a gigabyte each way
// between a client and one sandbox through the server (file upload into
// the sandbox, repeated downloads out of it) while a second sandbox is
// asked for its token all along: the server's memory must not grow with
// the traffic (less than 100 MB over the whole gigabyte each way) and the
// neighbour must answer every request meanwhile.
func TestSandboxTrafficThroughTheServerIsStreamed(t *testing.T) {
	testenv.RequireRoot(t)
	d, _ := startTiny(t)
	a, b := newCrashSandbox(t, d), newCrashSandbox(t, d)
	base := rssOf(t, d.cmd.Process.Pid)

	stop := make(chan struct{})
	var lat []time.Duration
	var failures []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			start := time.Now()
			req, _ := http.NewRequest("GET", d.url+"/", nil)
			req.Header.Set("E2b-Sandbox-Id", b.ID)
			req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(nodetest.HolderPort))
			resp, err := nodetest.NoKeepAlive.Do(req)
			if err != nil {
				failures = append(failures, err.Error())
				continue
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(out) != b.Memory {
				failures = append(failures, fmt.Sprintf("%d %q", resp.StatusCode, out))
				continue
			}
			lat = append(lat, time.Since(start))
		}
	}()

	envdReq := func(method, path string, body io.Reader, size int64) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, d.url+path, body)
		req.ContentLength = size
		req.Header.Set("E2b-Sandbox-Id", a.ID)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", a.Token)
		req.Header.Set("Authorization", "Basic cm9vdDo=")
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := (&http.Client{Timeout: 10 * time.Minute}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	peak := base
	sample := func() { peak = max(peak, rssOf(t, d.cmd.Process.Pid)) }

	// Up: one gigabyte into the sandbox, which throws it away.
	const gig = 1 << 30
	up := envdReq("POST", "/files?path=/dev/null", io.LimitReader(zeros{}, gig), gig)
	out, _ := io.ReadAll(up.Body)
	up.Body.Close()
	if up.StatusCode != 200 {
		t.Fatalf("upload of a gigabyte: %d %s", up.StatusCode, out)
	}
	sample()

	// Down: a 16 MiB file read 64 times.
	const chunk = 16 << 20
	put := envdReq("POST", "/files?path=/tmp/big", io.LimitReader(zeros{}, chunk), chunk)
	io.Copy(io.Discard, put.Body)
	put.Body.Close()
	if put.StatusCode != 200 {
		t.Fatalf("upload of the file to read: %d", put.StatusCode)
	}
	var down int64
	for range gig / chunk {
		resp := envdReq("GET", "/files?path=/tmp/big", nil, 0)
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n != chunk {
			t.Fatalf("download: %d, %d bytes", resp.StatusCode, n)
		}
		down += n
		sample()
	}
	close(stop)
	wg.Wait()

	t.Logf("server RSS %d MB before, peak %d MB; neighbour answered %d times, median %s, slowest %s",
		base>>20, peak>>20, len(lat), median(lat), slices.Max(append(lat, 0)))
	if grew := peak - base; grew > 100<<20 {
		t.Errorf("server memory grew by %d MB while a sandbox moved %d MB each way", grew>>20, down>>20)
	}
	if len(failures) > 0 {
		t.Errorf("the neighbouring sandbox failed %d of %d requests meanwhile: %v", len(failures), len(failures)+len(lat), failures[:min(5, len(failures))])
	}
	if len(lat) == 0 {
		t.Error("the neighbouring sandbox was never asked")
	}
	code, body := d.do(t, "GET", "/sandboxes/"+a.ID, nil, nil)
	var info struct{ State string }
	if code != 200 || json.Unmarshal(body, &info) != nil || info.State != "running" || !bytes.Contains(body, []byte(a.ID)) {
		t.Errorf("the busy sandbox afterwards: %d %s", code, body)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
