package egress

import (
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// A sandbox flooding its resolver with queries that the upstream never
// answers holds at most maxDNSInFlight of them at once: the rest are
// dropped (the client retries), and the server's goroutines and memory
// stay flat however long the flood lasts.
func TestDNSFloodIsBounded(t *testing.T) {
	// An upstream that reads and never answers: every forwarded query
	// waits its whole timeout.
	upstream, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := upstream.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	listen, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := compile(Policy{AllowInternet: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &slotFilter{
		f:      &Filter{cfg: Config{Resolver: netip.MustParseAddrPort(upstream.LocalAddr().String())}},
		log:    slog.New(slog.DiscardHandler),
		dnsUDP: listen,
		dnsSem: make(chan struct{}, maxDNSInFlight),
	}
	s.rules.Store(r)
	s.wg.Add(1)
	go s.serveDNSUDP()
	defer func() { listen.Close(); s.wg.Wait() }()

	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 9, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("flood.example."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	query, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.Dial("udp", listen.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	baseGoroutines := runtime.NumGoroutine()
	peak := 0
	const queries = 200_000
	for i := range queries {
		client.Write(query)
		if i%1000 == 0 {
			peak = max(peak, runtime.NumGoroutine()-baseGoroutines)
		}
	}
	time.Sleep(100 * time.Millisecond)
	peak = max(peak, runtime.NumGoroutine()-baseGoroutines)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d queries: at most %d goroutines above the start, heap %d → %d MB", queries, peak, before.HeapInuse>>20, after.HeapInuse>>20)
	if peak > maxDNSInFlight+8 {
		t.Errorf("%d goroutines answered queries at once, the cap is %d", peak, maxDNSInFlight)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 100<<20 {
		t.Errorf("the flood grew the heap by %d MB", grew>>20)
	}
}
