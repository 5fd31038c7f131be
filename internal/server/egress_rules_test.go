package server_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	processpb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
	"cube/internal/envd/protocol"
	"cube/internal/nodetest"
	"cube/internal/testenv"
)

// The outside world of the egress rules test: a netns holding two
// addresses in TEST-NET-2, routed from the host, one serving HTTP and
// HTTPS with a certificate of the test's own CA for api.rules.test and
// plain.rules.test, the other HTTPS with a certificate nobody signed for
// bad.rules.test. Each records the Authorization headers it receives and
// answers without echoing them, so the value never flows back into the
// sandbox.
type outside struct {
	good, bad netip.Addr
	caPEM     []byte
	mu        sync.Mutex
	auth      []string // "host auth" per request, in order
}

func (o *outside) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.auth...)
}

func newOutside(t *testing.T) *outside {
	t.Helper()
	n := byte(mrand.IntN(120) + 2)
	o := &outside{good: netip.AddrFrom4([4]byte{198, 51, 100, n}), bad: netip.AddrFrom4([4]byte{198, 51, 100, n + 128})}
	ns := fmt.Sprintf("egr%d-%d", os.Getpid()%10000, n)
	hostIf := ns + "h"
	link := [4]byte{198, 19, n, 0}
	at := func(i byte) string { return netip.AddrFrom4([4]byte{link[0], link[1], link[2], i}).String() }
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	sh("ip", "netns", "add", ns)
	t.Cleanup(func() {
		for _, a := range []netip.Addr{o.good, o.bad} {
			exec.Command("ip", "route", "del", a.String()+"/32").Run()
		}
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	sh("ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	sh("ip", "addr", "add", at(1)+"/30", "dev", hostIf)
	sh("ip", "link", "set", hostIf, "up")
	sh("ip", "-n", ns, "addr", "add", at(2)+"/30", "dev", "eth0")
	sh("ip", "-n", ns, "link", "set", "eth0", "up")
	sh("ip", "-n", ns, "route", "add", "default", "via", at(1))
	for _, a := range []netip.Addr{o.good, o.bad} {
		sh("ip", "-n", ns, "addr", "add", a.String()+"/32", "dev", "eth0")
		sh("ip", "route", "add", a.String()+"/32", "via", at(2))
	}

	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Outside CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	o.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	leaf := func(self bool, names ...string) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
			DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		parent, signer := caCert, any(caKey)
		if self {
			parent, signer = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.auth = append(o.auth, r.Host+" "+r.Header.Get("Authorization"))
		o.mu.Unlock()
		fmt.Fprintf(w, "served %s%s", r.Host, r.URL.Path)
	})
	serve := func(a netip.Addr, port int, cert *tls.Certificate) {
		var ln net.Listener
		inNetns(t, "/run/netns/"+ns, func() (err error) { ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", a, port)); return })
		if cert != nil {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}})
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	good, bad := leaf(false, "api.rules.test", "plain.rules.test"), leaf(true, "bad.rules.test")
	serve(o.good, 80, nil)
	serve(o.good, 443, &good)
	serve(o.bad, 443, &bad)
	return o
}

func inNetns(t *testing.T, path string, fn func() error) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// exec runs a command in a sandbox through the server's proxy.
func (d *daemon) exec(t *testing.T, sandboxID, token, cmd string, args ...string) nodetest.Result {
	t.Helper()
	hc := &http.Client{Transport: headerTransport{"E2b-Sandbox-Id": sandboxID, "E2b-Sandbox-Port": "49983"}, Timeout: 2 * time.Minute}
	client := processpbconnect.NewProcessClient(hc, d.url)
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: cmd, Args: args}})
	req.Header().Set(protocol.HeaderAccessToken, token)
	req.Header().Set("Authorization", "Basic cm9vdDo=")
	stream, err := client.Start(t.Context(), req)
	if err != nil {
		t.Fatalf("start %s: %v", cmd, err)
	}
	defer stream.Close()
	var out, errb strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if dt := ev.GetData(); dt != nil {
			out.Write(dt.GetStdout())
			errb.Write(dt.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			return nodetest.Result{Stdout: out.String(), Stderr: errb.String(), ExitCode: int(end.GetExitCode())}
		}
	}
	t.Fatalf("%s %v: no end event: %v", cmd, args, stream.Err())
	return nodetest.Result{}
}

type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	r.Header.Set("X-API-Key", apiKey)
	return (&http.Transport{DisableKeepAlives: true}).RoundTrip(r)
}

// grepDir reports the files under dir that hold needle.
func grepDir(dir string, needle []byte) []string {
	var found []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// TestEgressRulesWithSecrets: a secret created through /secrets is set as
// Authorization on the sandbox's HTTPS requests to a host with a rule, by
// the node's egress filter (a plain-HTTP request there is refused, never
// sent with the secret in clear), and nowhere in the sandbox (its
// processes' environments, memory, files) nor in the data dir in plain
// text; hosts without rules stay end to end; a destination whose
// certificate does not verify is refused; rules change live; every
// request is in the sandbox's log; another team neither sees team A's
// secret nor gets it filled into its sandbox's rules; secrets survive a
// restart, and rules a crash.
func TestEgressRulesWithSecrets(t *testing.T) {
	testenv.RequireRoot(t)
	out := newOutside(t)
	dataDir := t.TempDir()
	n := nodetest.New(t, nodetest.Options{DataDir: dataDir})
	os.MkdirAll(nodetest.TinyRootfs(dataDir, "tiny"), 0o755)
	testenv.BuildStatic(t, "./internal/server/testdata/egressprobe", nodetest.TinyRootfs(dataDir, "tiny"), "egressprobe")
	n.TinyTemplate(t, "tiny")
	n.Close()
	caFile := filepath.Join(t.TempDir(), "outside-ca.pem")
	os.WriteFile(caFile, out.caPEM, 0o644)
	prefix, cidr := nodetest.SlotRange()
	addr := freeAddr(t)
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr, "--egress-ca-bundle", caFile)

	secret := fmt.Sprintf("sk-live-%x", mrand.Uint64())
	code, body := d.do(t, "POST", "/secrets", map[string]any{"name": "Vendor-Key", "value": secret, "metadata": map[string]string{"team": "a"}}, nil)
	if code != 201 || bytes.Contains(body, []byte(secret)) {
		t.Fatalf("create secret: %d %s", code, body)
	}
	var sec struct {
		SecretID, Name string
		CurrentVersion int
	}
	json.Unmarshal(body, &sec)
	if !strings.HasPrefix(sec.SecretID, "sec_") || sec.Name != "vendor-key" || sec.CurrentVersion != 1 {
		t.Fatalf("secret %s", body)
	}
	for _, p := range []string{"/secrets", "/secrets/vendor-key", "/secrets/" + sec.SecretID} {
		if code, body := d.do(t, "GET", p, nil, nil); code != 200 || bytes.Contains(body, []byte(secret)) || !bytes.Contains(body, []byte(sec.SecretID)) {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}

	rules := func(auth string) map[string]any {
		return map[string]any{
			"api.rules.test": []any{map[string]any{"transform": map[string]any{"headers": map[string]string{"Authorization": auth}}}},
			"bad.rules.test": []any{map[string]any{"transform": map[string]any{"headers": map[string]string{"Authorization": auth}}}},
		}
	}
	// Bad rules are refused with the field named.
	for _, c := range []struct {
		rules any
		want  string
	}{
		{rules("Bearer ${e2b.secrets.no-such-secret}"), `network.rules[\"api.rules.test\"][0].transform.headers[\"Authorization\"]: secret \"no-such-secret\" does not exist`},
		{map[string]any{"*": []any{map[string]any{}}}, `network.rules[\"*\"]`},
		{map[string]any{"api.rules.test": []any{map[string]any{"transform": map[string]any{"headers": map[string]string{"X-Big": strings.Repeat("v", 9000)}}}}}, `value longer than 8192 bytes`},
	} {
		code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "network": map[string]any{"rules": c.rules}}, nil)
		if code != 400 || !bytes.Contains(body, []byte(c.want)) {
			t.Errorf("create with bad rules: %d %s, want 400 with %s", code, body, c.want)
		}
	}

	code, body = d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "envVars": map[string]string{"CONTROL": "control-4b1d"},
		"network": map[string]any{"rules": rules("Bearer ${e2b.secrets.vendor-key}")}}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.Unmarshal(body, &sb)
	run := func(args ...string) nodetest.Result {
		t.Helper()
		return d.exec(t, sb.SandboxID, sb.EnvdAccessToken, "/egressprobe", args...)
	}
	good := out.good.String()

	// HTTPS to the ruled host: the header is the secret, set on the way
	// out; the sandbox saw the egress CA's certificate. Plain HTTP there is
	// refused: the secret goes out only over verified TLS.
	if r := run("get", "https://api.rules.test/v1/models?key=q", good); !regexp.MustCompile(`status 200 issuer Cube_egress_CA_\(\S+\) body served api.rules.test/v1/models`).MatchString(r.Stdout) {
		t.Errorf("HTTPS with a rule: %s", r)
	}
	if r := run("get", "http://api.rules.test/plain", good); !strings.Contains(r.Stdout, "status 403") || !strings.Contains(r.Stdout, "only over HTTPS") {
		t.Errorf("HTTP with a secret rule: %s, want 403", r)
	}
	if got := out.seen(); len(got) != 1 || got[0] != "api.rules.test Bearer "+secret {
		t.Errorf("the destination saw %q", got)
	}
	// A host without rules: end to end, the server's own certificate.
	if code, msg := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "POST", "/files?path=/tmp/outside-ca.pem", out.caPEM); code != 200 {
		t.Fatalf("upload CA: %d %s", code, msg)
	}
	if r := run("get", "https://plain.rules.test/", good, "/tmp/outside-ca.pem"); !strings.Contains(r.Stdout, "status 200 issuer Outside_CA") {
		t.Errorf("HTTPS without a rule: %s", r)
	}
	if got := out.seen(); len(got) != 2 || got[1] != "plain.rules.test Bearer made-in-the-sandbox" {
		t.Errorf("the unruled request reached the destination as %q", got)
	}
	// A ruled destination whose certificate does not verify: refused.
	if r := run("get", "https://bad.rules.test/", out.bad.String()); !strings.Contains(r.Stdout, "status 502") || !strings.Contains(r.Stdout, "certificate") {
		t.Errorf("bad certificate: %s", r)
	}
	if got := out.seen(); len(got) != 2 {
		t.Errorf("a request reached the server with a bad certificate: %q", got)
	}

	// Nothing in the sandbox holds the value. The same scan finds a value
	// that is there: in a file, in the environment given at create, and
	// in its own memory.
	if code, msg := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "POST", "/files?path=/tmp/control.txt", []byte("x control-4b1d x")); code != 200 {
		t.Fatalf("upload control: %d %s", code, msg)
	}
	if r := run("scan", hex.EncodeToString([]byte("control-4b1d"))); !strings.HasPrefix(r.Stdout, "FOUND /tmp/control.txt") || !strings.Contains(r.Stdout, "self-mem=true self-environ=true") {
		t.Errorf("the scan does not find a value that is in the sandbox: %s", r)
	}
	if r := run("scan", hex.EncodeToString([]byte(secret))); !strings.HasPrefix(r.Stdout, "CLEAN") || !strings.Contains(r.Stdout, "self-mem=true self-environ=false") {
		t.Errorf("the secret is inside the sandbox: %s", r)
	}

	// A live change: the next request carries the new value.
	code, body = d.do(t, "PUT", "/sandboxes/"+sb.SandboxID+"/network", map[string]any{"rules": rules("Token fixed-value")}, nil)
	if code != 204 {
		t.Fatalf("update rules: %d %s", code, body)
	}
	run("get", "https://api.rules.test/after", good)
	if got := out.seen(); got[len(got)-1] != "api.rules.test Token fixed-value" {
		t.Errorf("after the update the destination saw %q", got[len(got)-1])
	}
	if code, body := d.do(t, "PUT", "/sandboxes/"+sb.SandboxID+"/network", map[string]any{"rules": rules("${e2b.secrets.gone}")}, nil); code != 400 || !bytes.Contains(body, []byte(`secret \"gone\" does not exist`)) {
		t.Errorf("update naming an unknown secret: %d %s", code, body)
	}

	// The audit trail: in the sandbox's log and the metrics, without
	// values or query strings.
	code, body = d.do(t, "GET", "/sandboxes/"+sb.SandboxID+"/logs", nil, nil)
	for _, want := range []string{"egress transformed GET api.rules.test/v1/models", "rule api.rules.test set Authorization", "egress failed GET bad.rules.test/", "egress allowed plain.rules.test"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("logs lack %q: %s", want, body)
		}
	}
	if bytes.Contains(body, []byte(secret)) || bytes.Contains(body, []byte("key=q")) {
		t.Errorf("logs carry the secret or a query string: %s", body)
	}
	if _, metrics := d.do(t, "GET", "/metrics", nil, nil); !bytes.Contains(metrics, []byte(`cube_egress_requests_total{decision="transformed",kind="request"}`)) {
		t.Errorf("no egress metrics")
	}

	// Another team (the admin key acting for it): team A's secret is not
	// there for it, by name or ID, nor in its list, and its rules cannot
	// name it. Its own secret of the same name fills its sandbox's rules;
	// once that is deleted, its sandbox's rule fills nothing, team A's of
	// that name notwithstanding.
	code, body = d.do(t, "POST", "/teams", map[string]any{"name": "other"}, nil)
	var other struct{ TeamID string }
	if json.Unmarshal(body, &other); code != 201 || other.TeamID == "" {
		t.Fatalf("create team: %d %s", code, body)
	}
	asB := map[string]string{"X-Team-ID": other.TeamID}
	if code, body := d.do(t, "PATCH", "/templates/tiny", map[string]any{"public": true}, nil); code != 200 {
		t.Fatalf("make the template public: %d %s", code, body)
	}
	for _, p := range []string{"/secrets/vendor-key", "/secrets/" + sec.SecretID} {
		if code, body := d.do(t, "GET", p, nil, asB); code != 404 || bytes.Contains(body, []byte(`"secretID"`)) {
			t.Errorf("another team's GET %s: %d %s, want 404", p, code, body)
		}
	}
	if code, body := d.do(t, "GET", "/secrets", nil, asB); code != 200 || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("another team's list: %d %s, want []", code, body)
	}
	if code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "network": map[string]any{"rules": rules("Bearer ${e2b.secrets.vendor-key}")}}, asB); code != 400 || !bytes.Contains(body, []byte(`secret \"vendor-key\" does not exist`)) {
		t.Errorf("another team's rule naming team A's secret: %d %s, want 400", code, body)
	}
	secretB := fmt.Sprintf("sk-team-b-%x", mrand.Uint64())
	if code, body := d.do(t, "POST", "/secrets", map[string]any{"name": "vendor-key", "value": secretB}, asB); code != 201 {
		t.Fatalf("another team's secret of the same name: %d %s", code, body)
	}
	code, body = d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "network": map[string]any{"rules": rules("Bearer ${e2b.secrets.vendor-key}")}}, asB)
	var sbB struct{ SandboxID, EnvdAccessToken string }
	if json.Unmarshal(body, &sbB); code != 201 {
		t.Fatalf("create another team's sandbox: %d %s", code, body)
	}
	runB := func(args ...string) nodetest.Result {
		t.Helper()
		return d.exec(t, sbB.SandboxID, sbB.EnvdAccessToken, "/egressprobe", args...)
	}
	runB("get", "https://api.rules.test/team-b", good)
	if got := out.seen(); got[len(got)-1] != "api.rules.test Bearer "+secretB {
		t.Errorf("another team's sandbox: the destination saw %q, want its own team's secret", got[len(got)-1])
	}
	if code, body := d.do(t, "DELETE", "/secrets/vendor-key", nil, asB); code != 204 {
		t.Fatalf("delete another team's secret: %d %s", code, body)
	}
	seen := len(out.seen())
	if r := runB("get", "https://api.rules.test/team-b-deleted", good); !strings.Contains(r.Stdout, "status 502") || strings.Contains(r.Stdout, secret) {
		t.Errorf("another team's rule naming a name only team A has: %s, want 502", r)
	}
	if got := out.seen(); len(got) != seen {
		t.Errorf("a request with a secret of another team reached the destination: %q", got[seen:])
	}
	if code, body := d.do(t, "GET", "/secrets/vendor-key", nil, nil); code != 200 || !bytes.Contains(body, []byte(sec.SecretID)) {
		t.Errorf("team A's secret after the other team deleted its own: %d %s", code, body)
	}
	if code, body := d.do(t, "DELETE", "/sandboxes/"+sbB.SandboxID, nil, asB); code != 204 {
		t.Errorf("kill another team's sandbox: %d %s", code, body)
	}

	// The data dir never holds the value in plain text, a pause image of
	// the sandbox included, and after a restart the secret still works.
	if code, body := d.do(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, body)
	}
	waitFile(t, filepath.Join(dataDir, "sandboxes", sb.SandboxID, "pause", "checkpoint.img"))
	if found := grepDir(dataDir, []byte(secret)); len(found) > 0 {
		t.Errorf("plain text of the secret in %v", found)
	}
	if st, err := os.Stat(filepath.Join(dataDir, "secrets.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("secrets.key: %v %v", st, err)
	}
	// A crash (kill -9) with a running sandbox under a rule: the restarted
	// server adopts it and its rule applies again, the secret opening with
	// the key in the data dir.
	code, body = d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "network": map[string]any{"rules": rules("Bearer ${e2b.secrets.vendor-key}")}}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	json.Unmarshal(body, &sb)
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	d = startDaemon(t, dataDir, prefix, cidr.String(), addr, "--egress-ca-bundle", caFile)
	if code, body := d.do(t, "GET", "/secrets/vendor-key", nil, nil); code != 200 || !bytes.Contains(body, []byte(sec.SecretID)) {
		t.Fatalf("after a restart: %d %s", code, body)
	}
	run("get", "https://api.rules.test/adopted", good)
	if got := out.seen(); got[len(got)-1] != "api.rules.test Bearer "+secret {
		t.Errorf("in a sandbox adopted after a crash the destination saw %q", got[len(got)-1])
	}
	code, body = d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "network": map[string]any{"rules": rules("Bearer ${e2b.secrets." + sec.SecretID + "}")}}, nil)
	if code != 201 {
		t.Fatalf("create after restart: %d %s", code, body)
	}
	json.Unmarshal(body, &sb)
	run("get", "https://api.rules.test/again", good)
	if got := out.seen(); got[len(got)-1] != "api.rules.test Bearer "+secret {
		t.Errorf("after a restart the destination saw %q", got[len(got)-1])
	}
	if code, _ := d.do(t, "DELETE", "/secrets/vendor-key", nil, nil); code != 204 {
		t.Errorf("delete secret: %d", code)
	}
	if r := run("get", "https://api.rules.test/deleted", good); !strings.Contains(r.Stdout, "status 502") {
		t.Errorf("a rule naming a deleted secret: %s", r)
	}
}
