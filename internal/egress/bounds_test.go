package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// What a sandbox can make the Filter hold in memory: every read of an
// intercepted connection is bounded or streamed, whatever the sandbox or
// the destination sends.

// heapInUse is the Go heap in use now, garbage included: a flood that is
// buffered shows in it before any collection could hide it.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// baseHeap is the heap in use after a collection, to measure growth from.
func baseHeap() uint64 {
	runtime.GC()
	return heapInUse()
}

// dialRules connects from the sandbox to the rules host on port 443 (TLS,
// trusting the egress CA, for name) or 80 (plain).
func (rw *rulesWorld) dialRules(t *testing.T, name string, isTLS bool) net.Conn {
	t.Helper()
	port := uint16(80)
	if isTLS {
		port = 443
	}
	raw, err := rw.box.dial("tcp4", netip.AddrPortFrom(rulesHost, port).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if !isTLS {
		return raw
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rw.ca.CertPEM())
	conn := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: roots})
	conn.SetDeadline(time.Now().Add(dialWait))
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Time{})
	return conn
}

// The reported attack: a request line that never ends. The Filter reads
// no more of it than maxRequestHeaderBytes, answers 431 and closes; its
// heap never holds the flood; another connection of the sandbox is served
// meanwhile.
func TestRulesBoundRequestHeaders(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Owner: "sbx1", Rules: authRule("Bearer ${e2b.secrets.api-key}")})
	const (
		flood     = 1 << 30
		maxGrowth = 100 << 20
		// What the sandbox can write before it sees the close: the bound,
		// plus what the sockets on both sides of the gateway buffer.
		maxWritten = 64 << 20
	)
	for _, tc := range []struct {
		name  string
		isTLS bool
	}{{"api.rules.example", true}, {"plain.rules.example", false}} {
		t.Run(fmt.Sprintf("tls=%v", tc.isTLS), func(t *testing.T) {
			conn := rw.dialRules(t, tc.name, tc.isTLS)
			if !tc.isTLS {
				// Plain HTTP is intercepted once its Host is known, which
				// the first request of a connection says: the flood comes
				// second. (A first request without its Host in the first
				// 64 KiB is not intercepted at all: see maxPeek.)
				resp, _, err := rawRequest(conn, bufio.NewReader(conn), "GET / HTTP/1.1\r\nHost: "+tc.name+"\r\n\r\n")
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("first request: %+v %v", resp, err)
				}
				conn.SetDeadline(time.Time{})
			}
			answer := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(io.LimitReader(conn, 4096))
				answer <- string(b)
			}()
			base := baseHeap()
			var peak uint64
			chunk := bytes.Repeat([]byte("a"), 16<<10)
			conn.SetWriteDeadline(time.Now().Add(60 * time.Second))
			written, err := io.WriteString(conn, "GET /")
			for int64(written) < flood && err == nil {
				var n int
				n, err = conn.Write(chunk)
				written += n
				if written%(1<<20) < len(chunk) {
					peak = max(peak, heapInUse())
					if peak > base+2*maxGrowth {
						// Stop before the flood takes the machine.
						break
					}
				}
				if written-n < 32<<10 && written >= 32<<10 {
					// Half way to the bound, the connection holds a part of a
					// request: the sandbox's other connections are served.
					code, body, _, err := rw.fetch("GET", "https://api.rules.example/", nil)
					if err != nil || code != 200 || !strings.Contains(body, "auth=Bearer "+testSecret) {
						t.Errorf("another connection during the flood: %d %q %v", code, body, err)
					}
				}
			}
			peak = max(peak, heapInUse())
			t.Logf("%d KiB written before %v; heap grew by %d KiB", written>>10, err, (max(peak, base)-base)>>10)
			conn.Close()
			if peak > base+maxGrowth {
				t.Errorf("the Filter's heap grew by %d MB under a request line without end (%d MB written)", (peak-base)>>20, written>>20)
			}
			if err == nil {
				t.Errorf("the Filter read %d MB of one request line without closing", written>>20)
			} else if written > maxWritten {
				t.Errorf("the connection closed after %d MB of one request line, want at most %d MB", written>>20, maxWritten>>20)
			}
			if a := <-answer; a != "" && !strings.HasPrefix(a, "HTTP/1.1 431 ") {
				t.Errorf("answer to the flood: %q, want 431", a)
			}
			if e, ok := rw.audit.find(func(e Event) bool { return e.Name == tc.name && e.Status == http.StatusRequestHeaderFieldsTooLarge }); !ok || e.Decision != Denied {
				t.Errorf("audit of the flood: %+v %v, want it denied with 431", e, ok)
			}
		})
	}
}

// A destination's headers are bounded too (maxResponseHeaderBytes): one
// that sends more gets the sandbox a 502, not a copy of them.
func TestRulesBoundResponseHeaders(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("x")})
	code, body, _, err := rw.fetch("GET", "https://api.rules.example/big-headers", nil)
	if err != nil || code != http.StatusBadGateway || !strings.Contains(body, "header") {
		t.Errorf("a destination answering with 2 MB of headers: %d %q %v, want 502", code, body, err)
	}
	// The connection's next request is not affected.
	if code, _, _, err := rw.fetch("GET", "https://api.rules.example/", nil); err != nil || code != 200 {
		t.Errorf("after: %d %v", code, err)
	}
}

// Bodies are streamed both ways: a gigabyte up and one down through an
// intercepted connection leave the Filter's heap as it was.
func TestRulesStreamBodies(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("x")})
	const size, maxGrowth = 1 << 30, 100 << 20
	conn := rw.dialRules(t, "plain.rules.example", false)
	base := baseHeap()
	var peak atomic.Uint64
	sample := func() {
		h := heapInUse()
		for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
		}
	}
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	start := time.Now()
	sent := make(chan error, 1)
	go func() {
		_, err := fmt.Fprintf(conn, "POST /big?n=%d HTTP/1.1\r\nHost: plain.rules.example\r\nContent-Length: %d\r\n\r\n", size, size)
		if err == nil {
			_, err = io.Copy(conn, io.LimitReader(&sampling{r: zeros{}, sample: sample}, size))
		}
		sent <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, &sampling{r: resp.Body, sample: sample})
	if err != nil || n != size || resp.StatusCode != 200 {
		t.Fatalf("answer: %d, %d bytes, %v; want 200 with %d", resp.StatusCode, n, err, size)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	t.Logf("1 GiB up and 1 GiB down in %v", time.Since(start))
	if p := peak.Load(); p > base+maxGrowth {
		t.Errorf("the heap grew by %d MB passing bodies on", (p-base)>>20)
	}
	if e, ok := rw.audit.find(func(e Event) bool { return e.Path == "/big" }); !ok || e.BytesOut != size || e.BytesIn < size {
		t.Errorf("audit: %+v %v", e, ok)
	}
}

// sampling calls sample once per 16 MiB read through it.
type sampling struct {
	r      io.Reader
	sample func()
	n      int
}

func (s *sampling) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if s.n += n; s.n >= 16<<20 {
		s.n = 0
		s.sample()
	}
	return n, err
}

// A slot's web connections through the Filter are capped (Config.MaxConns):
// one beyond is closed at once, and DNS, counted apart, still answers.
func TestConnectionsPerSlotAreCapped(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "c")
	const maxConns = 4
	f, err := NewFilter(Config{Resolver: w.resolver, HostCIDR: cidr, MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s := acquire(t, pool)
	box := sb(t, s)
	setPolicy(t, f, s, Policy{AllowInternet: true, DenyOut: []string{"evil.example"}})

	// Connections that send nothing are held while the Filter waits for
	// their name (peekTimeout).
	var held []net.Conn
	for range maxConns {
		c, err := box.dial("tcp4", port(inetA, 80).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond) // all accepted
	extra, err := box.dial("tcp4", port(inetA, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetDeadline(time.Now().Add(peekTimeout / 2))
	io.WriteString(extra, "GET / HTTP/1.1\r\nHost: good.example\r\n\r\n")
	if n, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("connection %d of a slot capped at %d: read %d bytes, %v; want it closed at once", maxConns+1, maxConns, n, err)
	}
	box.mustResolve("good.example", inetA)
	// One ends: the next is served.
	held[0].Close()
	time.Sleep(200 * time.Millisecond)
	box.mustGet("http://good.example/", inetA)
}
