package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// How intercepted connections behave towards their two ends: where they
// go, how answers are framed, what is refused and how they end.

const plainBody = "the answer, as the destination wrote it"

// slowCalls reports the /slow requests the echo servers received: "start"
// when one arrives, "cancelled" when the Filter gave up on it.
var slowCalls = make(chan string, 8)

// special serves the echo servers' paths that do more than echo; false
// for any other path.
func special(rw http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/gzip":
		// Compressed only when the client asks, with a length either way.
		body := []byte(plainBody)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(body)
			zw.Close()
			body = b.Bytes()
			rw.Header().Set("Content-Encoding", "gzip")
		}
		rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
		rw.Write(body)
	case "/unframed":
		// An HTTP/1.0-style answer: no length, ended by closing.
		c, buf, err := rw.(http.Hijacker).Hijack()
		if err != nil {
			return true
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + plainBody)
		buf.Flush()
		c.Close()
	case "/big":
		// A large answer, written as it is made: ?n= bytes of zeros.
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		rw.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		io.CopyN(rw, zeros{}, n)
	case "/big-headers":
		// Headers without end, as a hostile or broken destination sends.
		for i := range 2048 {
			rw.Header().Set(fmt.Sprintf("X-Filler-%d", i), strings.Repeat("h", 1024))
		}
		rw.WriteHeader(http.StatusOK)
	case "/slow":
		slowCalls <- "start"
		select {
		case <-r.Context().Done():
			slowCalls <- "cancelled"
		case <-time.After(5 * time.Minute):
		}
	default:
		return false
	}
	return true
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// rawRequest sends one HTTP/1.1 request as written, on conn, and reads its
// answer whole; a read that has not ended after 30 s (a client left
// waiting for more, as curl would be) is an error.
func rawRequest(conn net.Conn, br *bufio.Reader, req string) (*http.Response, string, error) {
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestRulesConnectToTheNamesOwnAddress(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("Bearer ${e2b.secrets.api-key}")})
	// curl --resolve plain.rules.example:80:<another host>: the request
	// goes to the name's own address, with its rule applied.
	if body, err := rw.box.get("http://plain.rules.example/", inetB); err != nil || !strings.Contains(body, "host=plain.rules.example") || !strings.Contains(body, "x-team=wild") {
		t.Errorf("plain HTTP dialled at %s: %q %v, want the echo of plain.rules.example", inetB, body, err)
	}
	// The same over HTTPS, with the secret: it reaches only the name.
	if body, err := rw.box.get("https://api.rules.example/", inetB); err != nil || !strings.Contains(body, "auth=Bearer "+testSecret) || !strings.Contains(body, "host=api.rules.example") {
		t.Errorf("HTTPS dialled at %s: %q %v", inetB, body, err)
	}
	// A plain-HTTP request for the secret's host is refused wherever it
	// was dialled: the other host never sees it.
	if body, err := rw.box.get("http://api.rules.example/", inetB); err != nil || strings.Contains(body, testSecret) || !strings.Contains(body, "only over HTTPS") {
		t.Errorf("plain HTTP with a secret dialled at %s: %q %v", inetB, body, err)
	}

	// A name that does not exist keeps the address dialled; its rule
	// applies, but a secret would only go over TLS verified for the name.
	if body, err := rw.box.get("http://nowhere.rules.example/", rulesHost); err != nil || !strings.Contains(body, "host=nowhere.rules.example") || !strings.Contains(body, "x-team=wild") {
		t.Errorf("plain HTTP to a name that does not resolve: %q %v", body, err)
	}

	// The name's own address is denied: the dialled address being
	// allowed does not carry the request anywhere.
	rw.slot.apply(Policy{AllowInternet: true, DenyOut: []string{rulesHost.String() + "/32"}, Rules: authRule("x")})
	if body, err := rw.box.get("http://plain.rules.example/", inetB); err == nil {
		t.Errorf("a rule host whose address is denied answered through %s: %q", inetB, body)
	}
}

func TestRulesAnswersAreFramed(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("x")})
	conn, err := rw.box.dial("tcp4", netip.AddrPortFrom(rulesHost, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	// No Accept-Encoding (curl's default): the answer as sent, with its
	// length, and the connection stays usable.
	resp, body, err := rawRequest(conn, br, "GET /gzip HTTP/1.1\r\nHost: plain.rules.example\r\n\r\n")
	if err != nil || resp.ContentLength != int64(len(plainBody)) || body != plainBody {
		t.Fatalf("without Accept-Encoding: %+v %q %v, want %q with its length", resp, body, err, plainBody)
	}
	// Asking for gzip gets gzip, still with a length.
	resp, body, err = rawRequest(conn, br, "GET /gzip HTTP/1.1\r\nHost: plain.rules.example\r\nAccept-Encoding: gzip\r\n\r\n")
	if err != nil || resp.Header.Get("Content-Encoding") != "gzip" || resp.ContentLength != int64(len(body)) {
		t.Fatalf("with Accept-Encoding gzip: %+v %v", resp, err)
	}
	if zr, err := gzip.NewReader(strings.NewReader(body)); err != nil {
		t.Errorf("gzip answer: %v", err)
	} else if b, _ := io.ReadAll(zr); string(b) != plainBody {
		t.Errorf("gzip answer holds %q", b)
	}
	// A destination that answers without a length: the client is told
	// the connection closes, and it does.
	resp, body, err = rawRequest(conn, br, "GET /unframed HTTP/1.1\r\nHost: plain.rules.example\r\n\r\n")
	if err != nil || !resp.Close || body != plainBody {
		t.Fatalf("answer without a length: %+v %q %v, want it ended by Connection: close", resp, body, err)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after an answer ended by closing, read %d bytes, %v; want EOF", n, err)
	}
}

func TestRulesRefuseTrace(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("Bearer ${e2b.secrets.api-key}")})
	for _, method := range []string{"TRACE", "CONNECT"} {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(rw.ca.CertPEM())
		raw, err := rw.box.dial("tcp4", netip.AddrPortFrom(rulesHost, 443).String())
		if err != nil {
			t.Fatal(err)
		}
		conn := tls.Client(raw, &tls.Config{ServerName: "api.rules.example", RootCAs: roots})
		target := "/"
		if method == "CONNECT" {
			target = "api.rules.example:443"
		}
		resp, body, err := rawRequest(conn, bufio.NewReader(conn), method+" "+target+" HTTP/1.1\r\nHost: api.rules.example\r\n\r\n")
		conn.Close()
		if err != nil || resp.StatusCode != http.StatusMethodNotAllowed || strings.Contains(body, testSecret) {
			t.Errorf("%s to a host with a secret rule: %+v %q %v, want 405", method, resp, body, err)
		}
		if e, ok := rw.audit.find(func(e Event) bool { return e.Method == method }); !ok || e.Decision != Denied || e.Status != http.StatusMethodNotAllowed {
			t.Errorf("audit of %s: %+v %v", method, e, ok)
		}
	}
}

func TestRulesForgetCutsARequestInFlight(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("Bearer ${e2b.secrets.api-key}")})
	for len(slowCalls) > 0 {
		<-slowCalls
	}
	fetched := make(chan error, 1)
	go func() {
		_, _, _, err := rw.fetch("GET", "https://api.rules.example/slow", nil)
		fetched <- err
	}()
	select {
	case s := <-slowCalls:
		if s != "start" {
			t.Fatalf("slow call: %s", s)
		}
	case err := <-fetched:
		t.Fatalf("the slow request ended before reaching the destination: %v", err)
	}
	// Kill and pause forget the slot: that must not wait for an answer
	// the destination may never send.
	forgot := make(chan struct{})
	go func() { rw.filter.Forget(rw.netslot); close(forgot) }()
	select {
	case <-forgot:
	case <-time.After(30 * time.Second):
		t.Fatal("Forget still waits for the destination's answer after 30 s")
	}
	select {
	case s := <-slowCalls:
		if s != "cancelled" {
			t.Errorf("slow call: %s, want cancelled", s)
		}
	case <-time.After(30 * time.Second):
		t.Error("the destination's request was not cancelled")
	}
	if err := <-fetched; err == nil {
		t.Error("the sandbox's request succeeded though its connection was cut")
	}
}

func TestRulesPolicyChangeWhileDecidingCutsTheConnection(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, AllowOut: []string{"api.rules.example"}, Rules: authRule("x")})
	// The Filter resolves the name before it records its decision; the
	// policy changes to deny the name while it waits for the answer.
	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func(name string) {
		if name == "api.rules.example" {
			once.Do(func() { close(asked); <-release })
		}
	}
	dnsHold.Store(&hold)
	defer dnsHold.Store(nil)
	conn, err := rw.box.dial("tcp4", netip.AddrPortFrom(rulesHost, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answered := make(chan error, 1)
	go func() {
		resp, body, err := rawRequest(conn, bufio.NewReader(conn), "GET / HTTP/1.1\r\nHost: api.rules.example\r\n\r\n")
		if err == nil {
			err = fmt.Errorf("answered %d %q", resp.StatusCode, body)
		}
		answered <- err
	}()
	select {
	case <-asked:
	case err := <-answered:
		t.Fatalf("the request ended before the Filter resolved its name: %v", err)
	}
	// The name is denied, its address not: only the Filter can cut this.
	rw.slot.apply(Policy{AllowInternet: true, DenyOut: []string{"api.rules.example"}, Rules: authRule("x")})
	close(release)
	if err := <-answered; strings.HasPrefix(err.Error(), "answered") {
		t.Errorf("a connection for a name the new policy denies was served: %v", err)
	}
	if e, ok := rw.audit.find(func(e Event) bool { return e.Name == "api.rules.example" }); !ok || e.Decision != Denied || !strings.Contains(e.Reason, "no longer allowed") {
		t.Errorf("audit: %+v %v, want the connection denied by the new policy", e, ok)
	}
}

func TestRulesClientHangingUpCancelsTheCall(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("Bearer ${e2b.secrets.api-key}")})
	for len(slowCalls) > 0 {
		<-slowCalls
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rw.ca.CertPEM())
	raw, err := rw.box.dial("tcp4", netip.AddrPortFrom(rulesHost, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, &tls.Config{ServerName: "api.rules.example", RootCAs: roots})
	// A slow call with a body, as an LLM request is; the client gives up
	// waiting (its own timeout) and closes.
	if _, err := io.WriteString(conn, "POST /slow HTTP/1.1\r\nHost: api.rules.example\r\nContent-Length: 4\r\n\r\nbody"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-slowCalls:
		if s != "start" {
			t.Fatalf("slow call: %s", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the slow call never reached the destination")
	}
	conn.Close()
	select {
	case s := <-slowCalls:
		if s != "cancelled" {
			t.Errorf("slow call: %s, want cancelled", s)
		}
	case <-time.After(30 * time.Second):
		t.Error("the destination's call goes on 30 s after its client hung up")
	}
}
