package egress

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

// An audit event is bounded whatever the sandbox names: a denied
// connection's Host of 64 KiB, repeated in its reason, would otherwise be
// a 130 KB line in the sandbox's log, and the node's queue of 4096 events
// would hold half a gigabyte of them.
func TestAuditEventsAreBounded(t *testing.T) {
	long := strings.Repeat("a", 64<<10)
	e := Event{Owner: "sbx1", Decision: Transformed, Name: long + ".example", Dest: netip.MustParseAddrPort("203.0.113.30:443"),
		Method: strings.Repeat("M", 100), Path: "/" + long, Status: 200, Rule: long, Headers: []string{long, "X-Short"},
		BytesOut: 1, BytesIn: 2, Reason: fmt.Sprintf("name %q is denied; name %q again", long, long)}
	for i := range 300 {
		e.Headers = append(e.Headers, fmt.Sprintf("X-Header-%d", i))
	}
	b := e.bounded()
	if s := b.String(); len(s) > MaxEventBytes {
		t.Errorf("an event of 64 KiB fields is a line of %d bytes, want at most %d", len(s), MaxEventBytes)
	}
	for _, f := range []struct {
		name string
		got  string
		max  int
	}{{"name", b.Name, maxEventName}, {"path", b.Path, maxEventPath}, {"method", b.Method, maxEventMethod},
		{"rule", b.Rule, maxEventRule}, {"reason", b.Reason, maxEventReason}, {"headers", strings.Join(b.Headers, ","), maxEventHeaders}} {
		if len(f.got) > f.max || !strings.HasSuffix(f.got, truncated) && !strings.HasSuffix(f.got, "more)") || !utf8.ValidString(f.got) {
			t.Errorf("%s: %d bytes ending %q, want at most %d ending with the truncation mark", f.name, len(f.got), f.got[max(0, len(f.got)-20):], f.max)
		}
	}
	if b.Headers[1] != "X-Short" || !strings.HasPrefix(b.Headers[len(b.Headers)-1], "…(+") {
		t.Errorf("headers: %q ... %q, want the first names kept and how many were left out", b.Headers[:2], b.Headers[len(b.Headers)-1])
	}
	// Short fields are left alone, and a cut never splits a character.
	short := Event{Name: "api.example", Path: "/v1/chat", Reason: strings.Repeat("é", maxEventReason)}
	if got := short.bounded(); got.Name != short.Name || got.Path != short.Path || !utf8.ValidString(got.Reason) {
		t.Errorf("bounded %+v", got)
	}
}

// A flood of such events through the Filter into a queue like the node's
// (4096 events, the rest dropped) holds at most 4096 bounded events:
// nothing of the sandbox's 64 KiB names is kept beyond its bound.
func TestAuditFloodKeepsTheQueueSmall(t *testing.T) {
	const queue = 4096
	ch := make(chan Event, queue)
	dropped := 0
	f := &Filter{metrics: newMetrics(), cfg: Config{Audit: func(e Event) {
		select {
		case ch <- e:
		default:
			dropped++
		}
	}}}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 6000
	for i := range n {
		// A fresh Host each time, as a sandbox looping over connections
		// sends: a cut that kept a slice of it would keep all of it.
		host := fmt.Sprintf("%d.%s.example", i, strings.Repeat("h", 64<<10))
		// A short method and path are slices of a long request line.
		line := fmt.Sprintf("GET /p?%s HTTP/1.1", strings.Repeat("q", 64<<10))
		f.record("request", Event{Owner: "sbx1", Decision: Denied, Name: host, Method: line[:3], Path: line[4:6],
			Reason: fmt.Sprintf("name %q is denied", host)})
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if len(ch) != queue || dropped != n-queue {
		t.Fatalf("queue %d, dropped %d", len(ch), dropped)
	}
	limit := uint64(queue * (MaxEventBytes + 1024)) // the events, and their structs
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > int64(limit) {
		t.Errorf("%d queued events of 64 KiB names hold %d MB, want at most %d MB", queue, grew>>20, limit>>20)
	}
	for range queue {
		if e := <-ch; len(e.String()) > MaxEventBytes || e.Decision != Denied || !strings.HasSuffix(e.Name, truncated) {
			t.Fatalf("queued event of %d bytes: %.80s", len(e.String()), e)
		}
	}
}
