package egress

import (
	"testing"
)

// A DNS query is data leaving the sandbox: a name such as
// <secret>.leak.example reaches leak.example's servers through any
// resolver. Under a policy that denies everything not allowed, the
// resolver must never see a name the policy does not allow.
func TestDeniedNamesNeverLeaveByDNS(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "q")
	w.filter(t, cidr)
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
			setPolicy(t, s, tc.p)
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
