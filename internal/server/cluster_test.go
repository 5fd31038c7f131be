package server_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/envd/protocol"
	"cube/internal/nodetest"
	"cube/internal/testenv"
	"cube/internal/tlsca"
)

// clusterSecret is the secret the test's nodes share.
const clusterSecret = "a-secret-the-test-nodes-share-0123456789"

// member is one node of a test cluster: a cube-server on its own data
// directory, port and slot range, sharing the test's PostgreSQL.
type member struct {
	name, dataDir, prefix, cidr, addr string
	// netns is the network namespace it runs in, alone on its address.
	netns string
	// peer is the address of its peer listener (mutual TLS), empty when
	// its peers reach it at addr, signed only.
	peer string
	d    *daemon
}

func (m *member) start(t *testing.T, dsn string) {
	t.Helper()
	args := []string{"--slot-prefix", m.prefix, "--host-cidr", m.cidr, "--slots", "16", "--pause-write-delay", "2s",
		"--store", dsn, "--cluster-secret", clusterSecret, "--node-id", m.name}
	if m.peer != "" {
		args = append(args, "--peer-listen", m.peer)
	} else {
		// Each node alone in a namespace on the test's bridge: nothing
		// but the test sees what they pass each other.
		args = append(args, "--advertise", "http://"+m.addr, "--cluster-insecure-transport")
	}
	m.d = runDaemonIn(t, m.netns, m.dataDir, m.addr, args, nil, m.name)
}

type created struct {
	SandboxID, EnvdAccessToken, ClientID, TemplateID, State string
}

func createOn(t *testing.T, d *daemon, body map[string]any) (int, created, string) {
	t.Helper()
	code, out := d.do(t, "POST", "/sandboxes", body, nil)
	var sb created
	json.Unmarshal(out, &sb)
	return code, sb, string(out)
}

func getOn(t *testing.T, d *daemon, id string) created {
	t.Helper()
	code, out := d.do(t, "GET", "/sandboxes/"+id, nil, nil)
	var sb created
	json.Unmarshal(out, &sb)
	if code != 200 {
		t.Fatalf("GET /sandboxes/%s: %d %s", id, code, out)
	}
	return sb
}

// Three nodes on one PostgreSQL database answer as one service: any node
// places a create on the node holding its template, reaches every sandbox
// (API and envd traffic), takes snapshots on the sandbox's node; a killed
// node's sandboxes are reported lost and come back with it; a drained node
// keeps its sandboxes and takes no new ones.
//
// The nodes talk to each other over mutual TLS (--peer-listen), and again
// over plain HTTP, their requests signed only.
func TestClusterOfThreeNodes(t *testing.T) {
	t.Run("mutual TLS", func(t *testing.T) { clusterOfThree(t, true) })
	t.Run("signed HTTP", func(t *testing.T) { clusterOfThree(t, false) })
}

func clusterOfThree(t *testing.T, mtls bool) {
	// Each node in a network namespace of its own, on a bridge with the
	// host, where PostgreSQL runs.
	lan := newLAN(t, 3)
	pg := testenv.PostgresServer(t, netip.PrefixFrom(lan.Host, lan.Prefix.Bits()))
	dsn := pg.URLAt(lan.Host.String())
	var nodes []*member
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		dir := t.TempDir()
		n := nodetest.New(t, nodetest.Options{DataDir: dir, Store: pg.URL, NodeID: name})
		n.TinyTemplate(t, "tiny-"+name[len("node-"):])
		n.Close()
		prefix, cidr := nodetest.SlotRange()
		m := &member{name: name, dataDir: dir, prefix: prefix, cidr: cidr.String(), netns: lan.NS[i],
			addr: net.JoinHostPort(lan.Addrs[i].String(), "3000")}
		if mtls {
			m.peer = net.JoinHostPort(lan.Addrs[i].String(), "3100")
		}
		nodes = append(nodes, m)
	}
	for _, m := range nodes {
		m.start(t, dsn)
	}
	a, b, c := nodes[0], nodes[1], nodes[2]

	code, out := a.d.do(t, "GET", "/nodes", nil, nil)
	if code != 200 || strings.Count(string(out), `"status":"ready"`) != 3 {
		t.Fatalf("GET /nodes: %d %s", code, out)
	}
	if mtls {
		peersOnlyOverMutualTLS(t, a)
	}
	// Any node's /metrics has the cluster's totals.
	code, out = c.d.do(t, "GET", "/metrics", nil, nil)
	if code != 200 || !strings.Contains(string(out), `cube_cluster_nodes{status="ready"} 3`) || !strings.Contains(string(out), `cube_cluster_slots{kind="total"} 48`) {
		t.Fatalf("GET /metrics through node-c lacks the cluster's totals: %d", code)
	}

	// 30 sandboxes, each create sent to another node than the one its
	// template is on; each runs where its template is.
	type box struct {
		created
		owner *member
	}
	var boxes []box
	for i := range 30 {
		owner := nodes[i%3]
		via := nodes[(i+1)%3]
		code, sb, out := createOn(t, via.d, map[string]any{"templateID": "tiny-" + owner.name[len("node-"):], "timeout": 600})
		if code != 201 {
			t.Fatalf("create %d through %s: %d %s", i, via.name, code, out)
		}
		if sb.ClientID != owner.name {
			t.Fatalf("sandbox of %s's template placed on %q", owner.name, sb.ClientID)
		}
		boxes = append(boxes, box{sb, owner})
	}
	// Every sandbox answers through every node: its record and its envd.
	for i, bx := range boxes {
		for _, via := range nodes {
			if got := getOn(t, via.d, bx.SandboxID); got.State != "running" || got.ClientID != bx.owner.name {
				t.Fatalf("sandbox %d through %s: %+v", i, via.name, got)
			}
		}
		via := nodes[(i+2)%3]
		path := "/files?path=/tmp/who.txt"
		if code, out := via.d.envd(t, bx.SandboxID, bx.EnvdAccessToken, "POST", path, []byte(bx.SandboxID)); code != 200 {
			t.Fatalf("write into sandbox %d through %s: %d %s", i, via.name, code, out)
		}
		if code, out := nodes[i%3].d.envd(t, bx.SandboxID, bx.EnvdAccessToken, "GET", path, nil); code != 200 || out != bx.SandboxID {
			t.Fatalf("read from sandbox %d: %d %q", i, code, out)
		}
	}
	// A signed download URL, which names no sandbox when the SDK routes
	// by header, reaches the node whose sandbox made it through any node.
	for _, bx := range boxes[:3] {
		exp := time.Now().Add(time.Minute).Unix()
		q := url.Values{"path": {"/tmp/who.txt"}, "username": {"root"}, "signature_expiration": {strconv.FormatInt(exp, 10)},
			"signature": {protocol.SignFileURL("/tmp/who.txt", "read", "root", bx.EnvdAccessToken, exp)}}
		for _, via := range nodes {
			resp, out := via.d.request(t, "GET", "/files?"+q.Encode(), nil, nil)
			if resp.StatusCode != 200 || string(out) != bx.SandboxID {
				t.Fatalf("signed URL of a sandbox on %s through %s: %d %s", bx.owner.name, via.name, resp.StatusCode, out)
			}
		}
		q.Set("signature", "v1_forged")
		if resp, out := a.d.request(t, "GET", "/files?"+q.Encode(), nil, nil); resp.StatusCode == 200 {
			t.Fatalf("a forged signed URL was answered: %s", out)
		}
	}
	code, out = c.d.do(t, "GET", "/v2/sandboxes?state=running", nil, nil)
	if n := strings.Count(string(out), `"sandboxID"`); code != 200 || n != 30 {
		t.Fatalf("list through node-c: %d, %d sandboxes", code, n)
	}
	teamsAcrossNodes(t, a.d, b.d, c.d)

	// Paused through one node and resumed through another, a sandbox
	// stays on its node with its files.
	onA := boxes[0]
	if code, out := c.d.do(t, "POST", "/sandboxes/"+onA.SandboxID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause node-a's sandbox through node-c: %d %s", code, out)
	}
	if got := getOn(t, b.d, onA.SandboxID); got.State != "paused" {
		t.Fatalf("node-a's sandbox after a pause through node-c, seen through node-b: %+v", got)
	}
	if code, out := b.d.do(t, "POST", "/sandboxes/"+onA.SandboxID+"/connect", map[string]any{"timeout": 600}, nil); code != 200 && code != 201 {
		t.Fatalf("resume node-a's sandbox through node-b: %d %s", code, out)
	}
	if got := getOn(t, c.d, onA.SandboxID); got.State != "running" || got.ClientID != "node-a" {
		t.Fatalf("node-a's sandbox after a resume through node-b: %+v", got)
	}
	if code, out := b.d.envd(t, onA.SandboxID, onA.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != onA.SandboxID {
		t.Fatalf("node-a's sandbox after its resume: %d %q", code, out)
	}

	// A snapshot of a sandbox on B, asked of A, is taken on B; a sandbox
	// from it, asked of C, runs on B.
	onB := boxes[1]
	code, out = a.d.do(t, "POST", "/sandboxes/"+onB.SandboxID+"/snapshots", map[string]any{}, nil)
	var snap struct{ SnapshotID string }
	json.Unmarshal(out, &snap)
	if code != 201 || snap.SnapshotID == "" {
		t.Fatalf("snapshot through node-a: %d %s", code, out)
	}
	code, fromSnap, body := createOn(t, c.d, map[string]any{"templateID": snap.SnapshotID, "timeout": 600})
	if code != 201 || fromSnap.ClientID != "node-b" {
		t.Fatalf("create from node-b's snapshot through node-c: %d %s", code, body)
	}
	if code, out := a.d.envd(t, fromSnap.SandboxID, fromSnap.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != onB.SandboxID {
		t.Fatalf("the snapshot's files through node-a: %d %q", code, out)
	}
	// While node-b is set aside, a sandbox from its snapshot runs on
	// another node, which copies the snapshot first.
	if code, out := c.d.do(t, "POST", "/nodes/node-b", map[string]any{"status": "standby"}, nil); code != 204 && code != 200 {
		t.Fatalf("node-b on standby: %d %s", code, out)
	}
	code, moved, body := createOn(t, b.d, map[string]any{"templateID": snap.SnapshotID, "timeout": 600})
	if code != 201 || moved.ClientID == "node-b" {
		t.Fatalf("create from node-b's snapshot while node-b is on standby: %d %s", code, body)
	}
	if code, out := b.d.envd(t, moved.SandboxID, moved.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != onB.SandboxID {
		t.Fatalf("the copied snapshot's files on %s: %d %q", moved.ClientID, code, out)
	}
	if code, out := c.d.do(t, "POST", "/nodes/node-b", map[string]any{"status": "ready"}, nil); code != 204 && code != 200 {
		t.Fatalf("node-b ready again: %d %s", code, out)
	}
	boxes = append(boxes, box{moved, nodes[map[string]int{"node-a": 0, "node-c": 2}[moved.ClientID]]})

	// kill -9 of B: its sandboxes are lost within the heartbeat timeout,
	// changes to them are refused, and creates on A and C go on.
	b.d.cmd.Process.Signal(syscall.SIGKILL)
	b.d.cmd.Wait()
	within(t, 20*time.Second, func() bool { return getOn(t, a.d, onB.SandboxID).State == "lost" }, func() string {
		return fmt.Sprintf("node-b's sandbox still shown %q 20 s after node-b was killed", getOn(t, a.d, onB.SandboxID).State)
	})
	if code, out := c.d.do(t, "POST", "/sandboxes/"+onB.SandboxID+"/timeout", map[string]any{"timeout": 60}, nil); code != 503 || !strings.Contains(string(out), "node-b") {
		t.Fatalf("timeout of a lost sandbox: %d %s", code, out)
	}
	if code, _, out := createOn(t, a.d, map[string]any{"templateID": "tiny-b"}); code != 503 || !strings.Contains(out, "node-b") {
		t.Fatalf("create of node-b's template while node-b is down: %d %s", code, out)
	}
	for _, m := range []*member{a, c} {
		tpl := "tiny-" + m.name[len("node-"):]
		code, sb, out := createOn(t, c.d, map[string]any{"templateID": tpl, "timeout": 600})
		if code != 201 || sb.ClientID != m.name {
			t.Fatalf("create %s while node-b is down: %d %s", tpl, code, out)
		}
		boxes = append(boxes, box{sb, m})
	}

	// B back: it re-adopts its sandboxes, once each.
	b.start(t, dsn)
	within(t, 20*time.Second, func() bool { return getOn(t, a.d, onB.SandboxID).State == "running" }, func() string {
		return "node-b's sandbox not running again after node-b restarted"
	})
	if code, out := c.d.envd(t, onB.SandboxID, onB.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != onB.SandboxID {
		t.Fatalf("node-b's sandbox after its restart: %d %q", code, out)
	}
	// Every node sees B alive again at its next heartbeat.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out = a.d.do(t, "GET", "/v2/sandboxes?state=running", nil, nil)
		n := strings.Count(string(out), `"sandboxID"`)
		if code == 200 && n == len(boxes)+1 {
			break
		}
		if code != 200 || n > len(boxes)+1 || time.Now().After(deadline) {
			t.Fatalf("after node-b's restart, %d sandboxes are listed as running; want %d: %s", n, len(boxes)+1, out)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// A sandbox of C paused to disk before C drains.
	paused := boxes[5]
	if paused.owner != c {
		t.Fatalf("box 5 is on %s", paused.owner.name)
	}
	if code, out := b.d.do(t, "POST", "/sandboxes/"+paused.SandboxID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause node-c's sandbox: %d %s", code, out)
	}
	image := filepath.Join(c.dataDir, "sandboxes", paused.SandboxID, "pause", "checkpoint.img")
	within(t, 30*time.Second, func() bool { _, err := os.Stat(image); return err == nil }, func() string {
		return "node-c's paused sandbox was not written to disk"
	})

	// Draining C: its sandboxes keep running, nothing new lands there.
	if code, out := a.d.do(t, "POST", "/nodes/node-c", map[string]any{"status": "draining"}, nil); code != 204 && code != 200 {
		t.Fatalf("drain node-c: %d %s", code, out)
	}
	// Its sandbox paused on disk resumes on another node, which takes it
	// over with its files, even when asked of node-c itself; node-c lets
	// go of it.
	if code, out := c.d.do(t, "POST", "/sandboxes/"+paused.SandboxID+"/connect", map[string]any{"timeout": 600}, nil); code != 200 && code != 201 {
		t.Fatalf("resume node-c's paused sandbox while node-c drains: %d %s", code, out)
	}
	resumed := getOn(t, c.d, paused.SandboxID)
	if resumed.State != "running" || resumed.ClientID == "node-c" {
		t.Fatalf("node-c's sandbox resumed while node-c drains: %+v", resumed)
	}
	if code, out := c.d.envd(t, paused.SandboxID, paused.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != paused.SandboxID {
		t.Fatalf("the moved sandbox's files: %d %q", code, out)
	}
	boxes[5].owner = nodes[map[string]int{"node-a": 0, "node-b": 1}[resumed.ClientID]]
	within(t, 15*time.Second, func() bool { _, err := os.Stat(filepath.Dir(image)); return os.IsNotExist(err) }, func() string {
		return "node-c kept the files of the sandbox it handed over"
	})
	// node-c's template, while node-c drains, runs on another node, which
	// copies it from node-c once: the next create lands on that copy.
	code, copied, body := createOn(t, b.d, map[string]any{"templateID": "tiny-c", "timeout": 600})
	if code != 201 || (copied.ClientID != "node-a" && copied.ClientID != "node-b") {
		t.Fatalf("create of node-c's template while it drains: %d %s", code, body)
	}
	boxes = append(boxes, box{copied, nodes[map[string]int{"node-a": 0, "node-b": 1}[copied.ClientID]]})
	if code, out := a.d.envd(t, copied.SandboxID, copied.EnvdAccessToken, "POST", "/files?path=/tmp/who.txt", []byte("copied")); code != 200 {
		t.Fatalf("write into the sandbox of a copied template: %d %s", code, out)
	}
	if code, out := c.d.envd(t, copied.SandboxID, copied.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != "copied" {
		t.Fatalf("read from the sandbox of a copied template: %d %q", code, out)
	}
	code, again, body := createOn(t, a.d, map[string]any{"templateID": "tiny-c", "timeout": 600})
	if code != 201 || again.ClientID != copied.ClientID {
		t.Fatalf("second create of node-c's template went to %q, not to the copy on %s: %d %s", again.ClientID, copied.ClientID, code, body)
	}
	boxes = append(boxes, box{again, boxes[len(boxes)-1].owner})
	onC := boxes[2]
	if code, out := b.d.envd(t, onC.SandboxID, onC.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != onC.SandboxID {
		t.Fatalf("node-c's sandbox while it drains: %d %q", code, out)
	}
	// A fork of it starts its children on another node, with its files.
	code, out = a.d.do(t, "POST", "/sandboxes/"+onC.SandboxID+"/fork", map[string]any{"count": 2}, nil)
	var children []struct {
		Sandbox *created
		Error   *struct{ Message string }
	}
	json.Unmarshal(out, &children)
	if code != 201 || len(children) != 2 {
		t.Fatalf("fork of node-c's sandbox while node-c drains: %d %s", code, out)
	}
	for _, ch := range children {
		if ch.Sandbox == nil || ch.Sandbox.ClientID == "node-c" {
			t.Fatalf("a child of node-c's sandbox while node-c drains: %s", out)
		}
		if code, got := c.d.envd(t, ch.Sandbox.SandboxID, ch.Sandbox.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || got != onC.SandboxID {
			t.Fatalf("a child's files on %s: %d %q", ch.Sandbox.ClientID, code, got)
		}
		boxes = append(boxes, box{*ch.Sandbox, nodes[map[string]int{"node-a": 0, "node-b": 1}[ch.Sandbox.ClientID]]})
	}
	code, sb, body := createOn(t, b.d, map[string]any{"templateID": "tiny-a", "timeout": 600})
	if code != 201 || sb.ClientID != "node-a" {
		t.Fatalf("create on node-a while node-c drains: %d %s", code, body)
	}
	boxes = append(boxes, box{sb, a})

	// PostgreSQL down: what needs the database answers 503 with
	// Retry-After on every node, the sandboxes' traffic goes on, and
	// once it is back every acknowledged sandbox is there.
	pg.Stop(t)
	// Should the test end while it is down, it comes back before the
	// nodes are stopped (cleanups run last first), so they can remove
	// their sandboxes.
	down := true
	t.Cleanup(func() {
		if down {
			pg.Start(t)
		}
	})
	for _, m := range nodes {
		for _, call := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/v2/sandboxes", nil},
			{"GET", "/sandboxes", nil},
			{"POST", "/sandboxes", map[string]any{"templateID": "tiny-" + m.name[len("node-"):]}},
			{"GET", "/templates", nil},
			{"GET", "/nodes", nil},
		} {
			resp, out := m.d.request(t, call.method, call.path, call.body, nil)
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(out), "state database") {
				t.Fatalf("%s %s through %s while PostgreSQL is down: %d (Retry-After %q) %s", call.method, call.path, m.name, resp.StatusCode, resp.Header.Get("Retry-After"), out)
			}
		}
	}
	for i, bx := range boxes[:3] {
		if code, out := bx.owner.d.envd(t, bx.SandboxID, bx.EnvdAccessToken, "GET", "/files?path=/tmp/who.txt", nil); code != 200 || out != bx.SandboxID {
			t.Fatalf("sandbox %d on %s while PostgreSQL is down: %d %q", i, bx.owner.name, code, out)
		}
	}
	pg.Start(t)
	down = false
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, sb, out := createOn(t, a.d, map[string]any{"templateID": "tiny-a", "timeout": 600})
		if code == 201 {
			boxes = append(boxes, box{sb, a})
			break
		}
		if code != 503 || time.Now().After(deadline) {
			t.Fatalf("create after PostgreSQL restarted: %d %s", code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		code, out = b.d.do(t, "GET", "/v2/sandboxes?state=running", nil, nil)
		n := strings.Count(string(out), `"sandboxID"`)
		if code == 200 && n == len(boxes)+1 {
			break
		}
		if n > len(boxes)+1 || time.Now().After(deadline) {
			t.Fatalf("after PostgreSQL restarted, %d sandboxes are listed as running; want %d: %d %s", n, len(boxes)+1, code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("cluster of three nodes: %d sandboxes", len(boxes)+1)
}

// within waits up to d for ok, and fails the test with failure's words
// if it does not come.
func within(t *testing.T, d time.Duration, ok func() bool, failure func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal(failure())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// peersOnlyOverMutualTLS: a node with a peer listener refuses a request
// signed with the cluster's secret that comes any other way, and its peer
// listener refuses a client without a certificate of a node, or with one
// of an authority no node recorded.
func peersOnlyOverMutualTLS(t *testing.T, m *member) {
	t.Helper()
	at, nonce := strconv.FormatInt(time.Now().Unix(), 10), "000102030405060708090a0b0c0d0e0f"
	empty := sha256.Sum256(nil)
	body := hex.EncodeToString(empty[:])
	mac := hmac.New(sha256.New, []byte(clusterSecret))
	fmt.Fprintf(mac, "%s\n%s\n%s\n%s\n%s\n%s\n%s\n", "GET", m.addr, "/v2/sandboxes", "node-b", at, nonce, body)
	resp, out := m.d.request(t, "GET", "/v2/sandboxes", nil, map[string]string{
		"X-Cube-Forwarded": strings.Join([]string{"node-b", at, nonce, body, hex.EncodeToString(mac.Sum(nil))}, ";"),
	})
	if resp.StatusCode != 403 || !strings.Contains(string(out), "mutual TLS") {
		t.Fatalf("a signed request on the public listener of a node with a peer listener: %d %s", resp.StatusCode, out)
	}
	foreign, err := tlsca.Open(t.TempDir(), tlsca.Options{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, ClientAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	own, _ := foreign.GetCertificate(nil)
	for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "a stranger's certificate": {*own}} {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}}}
		resp, err := c.Get("https://" + m.peer + "/health")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("the peer listener answered a client with %s: %s", name, resp.Status)
		}
	}
}
