package egress

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestValidateAccepts(t *testing.T) {
	p := Policy{
		AllowOut: []string{"1.1.1.1", "8.8.8.0/24", "Example.COM.", "*.example.org", "_dmarc.example.net", "intranet"},
		DenyOut:  []string{"0.0.0.0/0", " 10.1.2.3/8 "},
	}
	if err := Validate(p); err != nil {
		t.Fatal(err)
	}
	r, _ := compile(p)
	if got := r.denyNets[1]; got != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("CIDR with host bits: got %s, want the network", got)
	}
	if r.allowNames[0].name != "example.com" {
		t.Errorf("name not normalised: %q", r.allowNames[0].name)
	}
}

func TestValidateNamesTheBadEntry(t *testing.T) {
	for _, tc := range []struct {
		entry, want string
	}{
		{"", "empty"},
		{"1.2.3.4/33", "not a valid CIDR"},
		{"1.2.3/24", "not a valid CIDR"},
		{"::1", "IPv6"},
		{"fd00::/8", "IPv6"},
		{"example.com:443", "ports"},
		{"exa mple.com", "not allowed"},
		{"a..b", "empty label"},
		{"*.", "not supported"},
		{"*.*.a", "wildcard"},
		{"foo.*.com", "wildcard"},
		{"*", "not supported"},
		{"-a.com", "starts or ends"},
		{"1.2.3", "not a valid IPv4 address"},
		{"300.1.1.1", "not a valid IPv4 address"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{strings.Repeat("abcdefghi.", 26) + "com", "longer than 253"},
	} {
		err := Validate(Policy{AllowInternet: true, DenyOut: []string{"1.1.1.1", tc.entry}})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `denyOut entry "`+tc.entry+`"`) {
			t.Errorf("%q: got %v, want an error naming the entry and saying %q", tc.entry, err, tc.want)
		}
	}
	many := make([]string, MaxEntries+1)
	for i := range many {
		many[i] = "1.1.1.1"
	}
	if err := Validate(Policy{AllowOut: many}); err == nil {
		t.Error("a list longer than MaxEntries was accepted")
	}
}

func TestAllowBeatsDeny(t *testing.T) {
	r, err := compile(Policy{
		AllowInternet: true,
		AllowOut:      []string{"203.0.113.10", "*.example.com", "good.example"},
		DenyOut:       []string{"203.0.113.0/24", "api.example.com", "*.example"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{{"203.0.113.10", true}, {"203.0.113.11", false}, {"198.51.100.1", true}} {
		if got := r.addrAllowed(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("address %s: allowed=%v, want %v", tc.addr, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		want verdict
	}{
		{"api.example.com", allowed}, // allow beats deny
		{"a.b.example.com", allowed},
		{"example.com", undecided}, // a wildcard is for names below it only
		{"good.example", allowed},
		{"evil.example", denied},
		{"notexample.com", undecided},
		{"", undecided},
	} {
		if got := r.nameVerdict(tc.name); got != tc.want {
			t.Errorf("name %q: verdict %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNoInternetIsDenyAll(t *testing.T) {
	r, _ := compile(Policy{})
	if !r.denyAll() || r.addrAllowed(netip.MustParseAddr("1.1.1.1")) || r.open() {
		t.Fatal("the zero policy lets traffic out")
	}
	r, _ = compile(Policy{AllowOut: []string{"1.1.1.1"}})
	if !r.denyAll() || !r.addrAllowed(netip.MustParseAddr("1.1.1.1")) || r.addrAllowed(netip.MustParseAddr("1.1.1.2")) {
		t.Fatal("AllowInternet false with AllowOut does not allow exactly AllowOut")
	}
	r, _ = compile(Open)
	if !r.open() {
		t.Fatal("Open restricts something")
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM":       "example.com",
		"example.com:8080":  "example.com",
		"example.com.":      "example.com",
		"203.0.113.10":      "",
		"203.0.113.10:80":   "",
		"[2001:db8::1]:443": "",
		"":                  "",
	} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// clientBytes returns what a client writes first when it opens a
// connection with fn.
func clientBytes(t *testing.T, fn func(c net.Conn)) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		fn(a)
		a.Close()
	}()
	rec := &recorder{r: b}
	peekName(rec)
	b.Close()
	return rec.buf
}

func TestPeekName(t *testing.T) {
	hello := clientBytes(t, func(c net.Conn) {
		tls.Client(c, &tls.Config{ServerName: "Good.Example", InsecureSkipVerify: true}).Handshake()
	})
	if got := peekName(&recorder{r: strings.NewReader(string(hello))}); got != "good.example" {
		t.Errorf("SNI: got %q", got)
	}
	noSNI := clientBytes(t, func(c net.Conn) {
		tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
	})
	if got := peekName(&recorder{r: strings.NewReader(string(noSNI))}); got != "" {
		t.Errorf("ClientHello without SNI: got %q", got)
	}
	req := "GET / HTTP/1.1\r\nHost: good.example:80\r\nUser-Agent: x\r\n\r\nbody"
	rec := &recorder{r: strings.NewReader(req)}
	if got := peekName(rec); got != "good.example" {
		t.Errorf("HTTP Host: got %q", got)
	}
	// Everything read is kept to be replayed upstream.
	if !strings.HasPrefix(req, string(rec.buf)) || !strings.Contains(string(rec.buf), "\r\n\r\n") {
		t.Errorf("recorded %q", rec.buf)
	}
	if got := peekName(&recorder{r: strings.NewReader("SSH-2.0-OpenSSH\r\n")}); got != "" {
		t.Errorf("not HTTP: got %q", got)
	}
	endless := bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 2*maxPeek)))
	if got := peekName(&recorder{r: endless}); got != "" {
		t.Errorf("endless header: got %q", got)
	}
}

// FuzzPolicy feeds arbitrary entries to the policy parser: it must never
// panic, and what it accepts must mean the same when written back.
func FuzzPolicy(f *testing.F) {
	for _, s := range []string{"1.1.1.1", "8.8.8.0/24", "example.com", "*.example.com", "0.0.0.0/0", "::1", "a..b", "*", "é.com", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		p := Policy{AllowOut: []string{entry}, DenyOut: []string{entry}}
		r, err := compile(p)
		if err != nil {
			if !strings.Contains(err.Error(), "allowOut entry") {
				t.Fatalf("error does not name the list: %v", err)
			}
			return
		}
		if len(r.allowNets)+len(r.allowNames) != 1 {
			t.Fatalf("%q gave %d allow entries", entry, len(r.allowNets)+len(r.allowNames))
		}
		var again string
		if len(r.allowNets) == 1 {
			again = r.allowNets[0].String()
		} else {
			again = r.allowNames[0].String()
			if r.nameVerdict(r.allowNames[0].name) != allowed && !r.allowNames[0].wildcard {
				t.Fatalf("%q does not match itself", entry)
			}
		}
		r2, err := compile(Policy{AllowOut: []string{again}})
		if err != nil {
			t.Fatalf("%q was accepted as %q, which is not: %v", entry, again, err)
		}
		if len(r2.allowNets) != len(r.allowNets) || len(r2.allowNames) != len(r.allowNames) {
			t.Fatalf("%q and %q parse differently", entry, again)
		}
	})
}

// FuzzPeekName feeds arbitrary first bytes of a connection to the name
// peeker: it must never panic and must keep every byte it read.
func FuzzPeekName(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := &recorder{r: strings.NewReader(string(data))}
		peekName(rec)
		if !strings.HasPrefix(string(data), string(rec.buf)) {
			t.Fatalf("recorded bytes differ from the input")
		}
	})
}
