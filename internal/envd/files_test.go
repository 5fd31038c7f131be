package envd_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"cube/internal/envd/files"
	fspb "cube/internal/envd/gen/filesystem"
	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/protocol"
)

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func TestUploadDownloadSizes(t *testing.T) {
	s := newSandbox(t)
	for _, size := range []int{0, 1, 50 << 20} {
		data := randomBytes(size)
		// A relative path lands in the user's home; missing parents are made.
		name := fmt.Sprintf("dir%d/file-%d.bin", size, size)
		q := "/files?path=" + url.QueryEscape(s.rel(name))
		status, body, _ := s.do("POST", q, bytes.NewReader(data), map[string]string{"Content-Type": "application/octet-stream"})
		if status != 200 {
			t.Fatalf("upload %d B: %d %s", size, status, body)
		}
		var written []files.WrittenFile
		if err := json.Unmarshal(body, &written); err != nil || len(written) != 1 ||
			written[0].Path != s.inHome(name) || written[0].Type != "file" || written[0].Name != filepath.Base(name) {
			t.Fatalf("upload answer %s (%v)", body, err)
		}
		res, err := http.Get(s.url + q)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || sha256.Sum256(got) != sha256.Sum256(data) {
			t.Fatalf("download %d B: status %d, %d bytes back", size, res.StatusCode, len(got))
		}
		// Clients tell an empty file by its Content-Length header, which Go's
		// client hides when it is 0; read the raw header.
		if cl := rawHeader(t, s.url+q, "Content-Length"); cl != strconv.Itoa(size) {
			t.Fatalf("download %d B: Content-Length %q", size, cl)
		}
	}
}

func TestGzipBothWays(t *testing.T) {
	s := newSandbox(t)
	data := bytes.Repeat([]byte("compressible "), 10000)
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write(data)
	zw.Close()
	status, body, _ := s.do("POST", "/files?path="+s.rel("z.txt"), &zbuf, map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
	if status != 200 {
		t.Fatalf("gzip upload: %d %s", status, body)
	}
	if b, _ := os.ReadFile(s.inHome("z.txt")); !bytes.Equal(b, data) {
		t.Fatalf("gzip upload stored %d bytes", len(b))
	}
	status, got, hdr := s.do("GET", "/files?path="+s.rel("z.txt"), nil, map[string]string{"Accept-Encoding": "gzip"})
	if status != 200 || hdr.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip download: %d %v", status, hdr)
	}
	zr, err := gzip.NewReader(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !bytes.Equal(plain, data) {
		t.Fatalf("gzip download: %d bytes after inflating", len(plain))
	}
	status, _, _ = s.do("POST", "/files?path="+s.rel("bad.txt"), bytes.NewReader([]byte("not gzip")), map[string]string{"Content-Encoding": "gzip"})
	if status != 400 {
		t.Fatalf("bad gzip: %d", status)
	}
}

func multipartBody(t *testing.T, parts map[string][]byte) (io.Reader, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, data := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

func TestMultipartSeveralFiles(t *testing.T) {
	s := newSandbox(t)
	parts := map[string][]byte{
		s.rel("one.txt"):                      []byte("1"),
		s.rel("nested/deeper/two.bin"):        randomBytes(100000),
		filepath.Join(s.dir, "abs/three.txt"): {},
	}
	body, ctype := multipartBody(t, parts)
	status, resp, _ := s.do("POST", "/files", body, map[string]string{"Content-Type": ctype})
	if status != 200 {
		t.Fatalf("multipart: %d %s", status, resp)
	}
	var written []files.WrittenFile
	json.Unmarshal(resp, &written)
	if len(written) != 3 {
		t.Fatalf("multipart answer: %s", resp)
	}
	for name, data := range parts {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.home(), name)
		}
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("%s: %v, %d bytes", name, err, len(b))
		}
	}
	// With a path parameter the single part lands there, whatever its name.
	body, ctype = multipartBody(t, map[string][]byte{"ignored": []byte("via path")})
	status, resp, _ = s.do("POST", "/files?path="+s.rel("chosen.txt"), body, map[string]string{"Content-Type": ctype})
	if b, _ := os.ReadFile(s.inHome("chosen.txt")); status != 200 || string(b) != "via path" {
		t.Fatalf("multipart with path: %d %s %q", status, resp, b)
	}
}

func TestUploadMetadata(t *testing.T) {
	s := newSandbox(t)
	m := s.rel("m.txt")
	status, body, _ := s.do("POST", "/files?path="+m, bytes.NewReader([]byte("x")), map[string]string{
		"Content-Type": "application/octet-stream", "X-Metadata-Owner-Team": "blue"})
	if status != 200 {
		t.Fatalf("upload with metadata: %d %s", status, body)
	}
	st, err := s.fs.Stat(s.ctx(), connect.NewRequest(&fspb.StatRequest{Path: m}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.GetEntry().GetMetadata()["owner-team"] != "blue" {
		t.Fatalf("metadata: %v", st.Msg.GetEntry().GetMetadata())
	}
	// A new upload without metadata clears it.
	s.do("POST", "/files?path="+m, bytes.NewReader([]byte("y")), map[string]string{"Content-Type": "application/octet-stream"})
	st, _ = s.fs.Stat(s.ctx(), connect.NewRequest(&fspb.StatRequest{Path: m}))
	if len(st.Msg.GetEntry().GetMetadata()) != 0 {
		t.Fatalf("metadata survived a new upload: %v", st.Msg.GetEntry().GetMetadata())
	}
	status, _, _ = s.do("POST", "/files?path="+m, bytes.NewReader(nil), map[string]string{"X-Metadata-K": "caf\xc3\xa9"})
	if status != 400 {
		t.Fatalf("non-ASCII metadata: %d", status)
	}
}

func TestFilesErrors(t *testing.T) {
	s := newSandbox(t)
	adir := filepath.Join(s.dir, "adir")
	os.Mkdir(adir, 0o755)
	// A parent that is a file: nothing can be created below it.
	os.WriteFile(filepath.Join(s.dir, "file-parent"), nil, 0o644)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/files?path=" + filepath.Join(s.dir, "missing.txt"), 404},
		{"GET", "/files?path=" + adir, 400},
		{"GET", "/files", 400},
		{"POST", "/files?path=" + adir, 400},
		{"POST", "/files?path=" + filepath.Join(s.dir, "file-parent/x.txt"), 400},
		{"GET", "/files?path=~nobody/x", 400},
		{"POST", "/files?path=~nobody/x", 400},
		{"POST", "/files", 400},
		{"GET", "/files?path=x&username=no-such-user-in-cube", 401},
		{"DELETE", "/files?path=x", 405},
	} {
		status, body, _ := s.do(tc.method, tc.path, bytes.NewReader([]byte("data")), map[string]string{"Content-Type": "application/octet-stream"})
		if status != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, status, body, tc.want)
			continue
		}
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Code != tc.want || e.Message == "" {
			t.Errorf("%s %s: error body %s", tc.method, tc.path, body)
		}
	}
}

func TestUploadOnFullDiskLeavesNothing(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	small := filepath.Join(s.dir, "small")
	os.Mkdir(small, 0o755)
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=1m"); err != nil {
		t.Skip("cannot mount a small tmpfs here: ", err)
	}
	defer syscall.Unmount(small, syscall.MNT_DETACH)
	status, body, _ := s.do("POST", "/files?path="+filepath.Join(small, "big.bin"), bytes.NewReader(randomBytes(3<<20)), map[string]string{"Content-Type": "application/octet-stream"})
	if status != http.StatusInsufficientStorage {
		t.Fatalf("upload to a full disk: %d %s", status, body)
	}
	left, _ := os.ReadDir(small)
	if len(left) != 0 {
		t.Fatalf("a failed upload left %v behind", left)
	}
	// The space is free again afterwards.
	status, body, _ = s.do("POST", "/files?path="+filepath.Join(small, "fits.bin"), bytes.NewReader(randomBytes(512<<10)), map[string]string{"Content-Type": "application/octet-stream"})
	if status != 200 {
		t.Fatalf("upload after a failed one: %d %s", status, body)
	}
}

// An upload to a device that exists (a copy of /dev/null here) writes to
// it: it is neither truncated, which a device refuses, nor removed.
func TestUploadToADevice(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	null := filepath.Join(s.dir, "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Skip("cannot make a device node here: ", err)
	}
	status, body, _ := s.do("POST", "/files?path="+null, bytes.NewReader(randomBytes(1<<20)), map[string]string{"Content-Type": "application/octet-stream"})
	if status != 200 {
		t.Fatalf("upload to a device: %d %s", status, body)
	}
	if fi, err := os.Stat(null); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("the device after the upload: %v %v", fi, err)
	}
}

func TestAccessTokenAndInit(t *testing.T) {
	s := newSandbox(t)
	if st, _, hdr := s.do("GET", "/health", nil, nil); st != 204 || hdr.Get("X-Envd-Version") != protocol.Version {
		t.Fatalf("health: %d %v", st, hdr)
	}
	if st := s.init(map[string]any{"accessToken": "secret-1", "timestamp": time.Now().Format(time.RFC3339)}, ""); st != 204 {
		t.Fatalf("first init: %d", st)
	}
	// Now every route but /health wants the token.
	if st, _, _ := s.do("GET", "/health", nil, nil); st != 204 {
		t.Fatalf("health with a token set: %d", st)
	}
	for _, path := range []string{"/envs", "/metrics", "/files?path=x"} {
		if st, _, _ := s.do("GET", path, nil, nil); st != 401 {
			t.Errorf("%s without token: %d", path, st)
		}
		if st, _, _ := s.do("GET", path, nil, map[string]string{"X-Access-Token": "wrong"}); st != 401 {
			t.Errorf("%s with a wrong token: %d", path, st)
		}
	}
	_, err := s.proc.List(s.ctx(), connect.NewRequest(&pb.ListRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated)
	stream, err := s.proc.Start(s.ctx(), connect.NewRequest(shell("true")))
	if err == nil {
		stream.Receive()
		err = stream.Err()
	}
	wantCode(t, err, connect.CodeUnauthenticated)
	s.token = "wrong"
	_, err = s.fsJS.Stat(s.ctx(), connect.NewRequest(&fspb.StatRequest{Path: "/"}))
	wantCode(t, err, connect.CodeUnauthenticated)
	s.token = "secret-1"
	if _, err := s.proc.List(s.ctx(), connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Fatal(err)
	}
	if st, body, _ := s.do("GET", "/metrics", nil, map[string]string{"X-Access-Token": "secret-1"}); st != 200 || !json.Valid(body) {
		t.Fatalf("metrics: %d %s", st, body)
	}

	// A second /init (a restored snapshot getting its own token) needs the
	// current token.
	if st := s.init(map[string]any{"accessToken": "stolen"}, ""); st != 401 {
		t.Fatalf("init without token once one is set: %d", st)
	}
	if st := s.init(map[string]any{"accessToken": "stolen"}, "wrong"); st != 401 {
		t.Fatalf("init with a wrong token: %d", st)
	}
	if st := s.init(map[string]any{"accessToken": "secret-2", "envVars": map[string]string{"K": "v"}}, "secret-1"); st != 204 {
		t.Fatalf("init with the token: %d", st)
	}
	if st, _, _ := s.do("GET", "/envs", nil, map[string]string{"X-Access-Token": "secret-1"}); st != 401 {
		t.Fatalf("old token still works: %d", st)
	}
	st, body, _ := s.do("GET", "/envs", nil, map[string]string{"X-Access-Token": "secret-2"})
	var envs map[string]string
	if st != 200 || json.Unmarshal(body, &envs) != nil || envs["K"] != "v" || envs["CUBE_TEMPLATE_VAR"] != "from-template" {
		t.Fatalf("envs: %d %s", st, body)
	}
	if st, _, _ := s.do("POST", "/init", bytes.NewReader([]byte("{not json")), map[string]string{"X-Access-Token": "secret-2"}); st != 400 {
		t.Fatalf("malformed init: %d", st)
	}
	if st := s.init(map[string]any{"defaultUser": "no-such-user-in-cube"}, "secret-2"); st != 400 {
		t.Fatalf("init with an unknown default user: %d", st)
	}
}

func TestSignedURLs(t *testing.T) {
	s := newSandbox(t)
	const token = "sign-token"
	if st := s.init(map[string]any{"accessToken": token}, ""); st != 204 {
		t.Fatal("init")
	}
	// Signed paths are the client's, relative ones included; they resolve
	// in the user's home.
	os.WriteFile(s.inHome("s.txt"), []byte("signed"), 0o644)
	sn := s.rel("s.txt")
	user := ""
	get := func(query string) int {
		st, _, _ := s.do("GET", "/files?"+query, nil, nil)
		return st
	}
	q := func(path, sig string, exp int64) string {
		v := url.Values{"path": {path}, "signature": {sig}}
		if exp != 0 {
			v.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return v.Encode()
	}
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	if st := get(q(sn, protocol.SignFileURL(sn, "read", user, token, 0), 0)); st != 200 {
		t.Fatalf("valid signature: %d", st)
	}
	if st := get(q(sn, protocol.SignFileURL(sn, "read", user, token, future), future)); st != 200 {
		t.Fatalf("valid signature with expiry: %d", st)
	}
	if st := get(q(sn, protocol.SignFileURL(sn, "read", user, token, past), past)); st != 401 {
		t.Fatalf("expired signature: %d", st)
	}
	if st := get(q(sn, protocol.SignFileURL(sn, "read", user, "other-token", 0), 0)); st != 401 {
		t.Fatalf("signature made with another token: %d", st)
	}
	if st := get(q(sn, protocol.SignFileURL(sn, "write", user, token, 0), 0)); st != 401 {
		t.Fatalf("write signature used to read: %d", st)
	}
	if st := get(q(s.rel("other.txt"), protocol.SignFileURL(sn, "read", user, token, 0), 0)); st != 401 {
		t.Fatalf("signature for another path: %d", st)
	}
	if st := get(q(sn, protocol.SignFileURL(sn, "read", user, token, future), future+1)); st != 401 {
		t.Fatalf("signature with a doctored expiry: %d", st)
	}
	up := "/files?" + q(s.rel("up.txt"), protocol.SignFileURL(s.rel("up.txt"), "write", user, token, future), future)
	if st, body, _ := s.do("POST", up, bytes.NewReader([]byte("via url")), map[string]string{"Content-Type": "application/octet-stream"}); st != 200 {
		t.Fatalf("signed upload: %d %s", st, body)
	}
	if b, _ := os.ReadFile(s.inHome("up.txt")); string(b) != "via url" {
		t.Fatalf("signed upload stored %q", b)
	}
	// The SDK's own shape: "v1_" + unpadded base64 of the sha256.
	if sig := protocol.SignFileURL("/a", "read", "user", "tok", 0); len(sig) != 3+43 || sig[:3] != "v1_" {
		t.Fatalf("signature shape %q", sig)
	}
}

func TestMalformedConnectRequestsKeepServerUp(t *testing.T) {
	s := newSandbox(t)
	cases := []struct {
		path, ctype string
		body        []byte
	}{
		{"/process.Process/Start", "application/connect+json", []byte{0, 0, 0, 1, 0, '{'}},        // envelope shorter than it claims
		{"/process.Process/Start", "application/connect+json", []byte{0, 0xff, 0xff, 0xff, 0xff}}, // absurd length
		{"/process.Process/Start", "application/connect+proto", []byte{0, 0, 0, 0, 3, 0xff, 0xff, 0xff}},
		{"/process.Process/Start", "application/connect+json", []byte("{}")}, // not enveloped at all
		{"/process.Process/List", "application/json", []byte("{not json")},
		{"/filesystem.Filesystem/Stat", "application/proto", []byte{0xff, 0xff}},
		{"/filesystem.Filesystem/Stat", "text/plain", []byte("hi")},
	}
	for _, c := range cases {
		st, body, _ := s.do("POST", c.path, bytes.NewReader(c.body), map[string]string{"Content-Type": c.ctype})
		if st == 200 && !bytes.Contains(body, []byte(`"error"`)) && !bytes.Contains(body, []byte(`"code"`)) {
			t.Errorf("%s %s %q: 200 without an error: %q", c.path, c.ctype, c.body, body)
		}
		if st >= 500 && st != 501 {
			t.Errorf("%s %s %q: server error %d %s", c.path, c.ctype, c.body, st, body)
		}
		if st, _, _ := s.do("GET", "/health", nil, nil); st != 204 {
			t.Fatalf("server unhealthy after %q: %d", c.body, st)
		}
	}
}

// rawHeader issues a bare HTTP/1.1 GET and returns one response header as
// sent on the wire.
func rawHeader(t *testing.T, rawURL, name string) string {
	t.Helper()
	u, _ := url.Parse(rawURL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.RequestURI(), u.Host)
	r := textproto.NewReader(bufio.NewReader(conn))
	if _, err := r.ReadLine(); err != nil {
		t.Fatal(err)
	}
	h, err := r.ReadMIMEHeader()
	if err != nil {
		t.Fatal(err)
	}
	return h.Get(name)
}

func TestUploadSeenByWatchersUnderItsName(t *testing.T) {
	s := newSandbox(t)
	ctx, cancel := context.WithCancel(s.ctx())
	defer cancel()
	stream, err := s.fsJS.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: s.dir}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	if st, body, _ := s.do("POST", "/files?path="+filepath.Join(s.dir, "up.txt"), bytes.NewReader([]byte("data")), map[string]string{"Content-Type": "application/octet-stream"}); st != 200 {
		t.Fatalf("upload: %d %s", st, body)
	}
	// Created, given to its user and written, as by E2B's agent
	// (TestUploadWatchEvents).
	var seen []string
	for len(seen) < 3 && stream.Receive() {
		if ev := stream.Msg().GetFilesystem(); ev != nil {
			seen = append(seen, ev.GetType().String()+" "+ev.GetName())
		}
	}
	if !equal(seen, []string{"EVENT_TYPE_CREATE up.txt", "EVENT_TYPE_CHMOD up.txt", "EVENT_TYPE_WRITE up.txt"}) {
		t.Fatalf("events %v", seen)
	}
}
