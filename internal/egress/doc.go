// Package egress enforces each sandbox's outbound network policy (E2B's
// allow_internet_access and network.allowOut / network.denyOut).
//
// Isolation from the host, other sandboxes and private ranges is not
// here: every netslot slot has it before any policy is applied. A policy
// can only narrow down what a slot may reach, never widen it.
//
// Address entries are kernel rules: Apply writes a table "policy" into the
// slot's gateway netns with github.com/google/nftables, replacing the
// previous one in a single transaction. netslot deletes that table when it
// re-arms the slot, so a policy never outlives its sandbox.
//
// Domain entries need names, which the kernel does not see. For a slot
// whose policy has any, the policy table also redirects the sandbox's DNS
// (to the gateway) and its TCP connections to ports 80 and 443 to the
// Filter, which listens inside that slot's gateway netns: the listener a
// connection comes in on says which slot it is from, SO_ORIGINAL_DST where
// it was going. DNS for a denied name answers NXDOMAIN, without asking
// upstream; so does DNS for every name no allow entry covers when the
// policy denies everything not allowed, since a query itself carries data
// out (<secret>.attacker.example reaches attacker.example's servers
// through any resolver). Such a policy without domain entries gets no DNS
// at all: the gateway refuses it at once. A web connection
// is judged by its TLS SNI or HTTP Host; an allowed name is connected to
// the name's own addresses (resolved by the Filter), so neither an IP
// literal nor a forged name reaches an address the policy denies.
//
// Rules (E2B's network.rules, Policy.Rules) transform requests to the
// hosts they name: plain HTTP is read by the Filter and rewritten in
// flight; TLS to such a host is answered with a certificate from the
// node's egress CA (OpenCA; sandboxes trust it, its key stays on the
// host) and each request is sent on over TLS of the Filter's own,
// verified for the name against Config.UpstreamRoots or the host's trust
// store, so a destination with a bad certificate gets the sandbox a 502,
// never a silent connection. An intercepted connection always goes to
// the name's own addresses (resolved by the Filter, of those the policy
// allows), whatever address the sandbox dialled; only a name that does
// not exist keeps the address dialled (within the policy), as no secret
// goes anywhere without TLS verified for the name. Connections to hosts
// without rules stay end to end. Secret placeholders in header values are
// resolved through Config.Secrets only as each request leaves, among the
// secrets of the policy's Team alone: no value ever enters a sandbox,
// none of another team's ever fills a rule, and values go only with
// requests sent on over verified TLS: a plain-HTTP request whose rules
// name a secret is answered 403 and not sent (E2B applies rules to
// outbound HTTPS; over plain HTTP nothing ties the destination to the
// name). TRACE and
// CONNECT to such a host are answered 405. Rules are read per request: a
// change applies from the next one, and a connection is judged again on
// each request. Every connection and intercepted request is an Event for
// Config.Audit and a Prometheus count (Filter.Collectors).
//
// What a sandbox makes the Filter hold is bounded whatever it sends: a
// connection's first bytes to maxPeek, an intercepted request's line and
// headers to maxRequestHeaderBytes (431 beyond, and the connection
// closed), a destination's headers to maxResponseHeaderBytes (502
// beyond); bodies are streamed both ways. A slot has at most
// Config.MaxConns web connections and maxDNSInFlight DNS queries at once.
//
// Wiring, in cube-server and the node:
//
//	// once, at start, with the pool's settings:
//	slots, _ := netslot.NewPool(netslot.Config{..., AllowPrivate: allow})
//	ca, _ := egress.OpenCA(filepath.Join(dataDir, "egress-ca"))
//	events := egress.NewEvents(4096)      // read by the node, into sandbox logs
//	filter, err := egress.NewFilter(egress.Config{AllowPrivate: allow, HostCIDR: hostCIDR,
//		CA: ca, Secrets: store.Value, Audit: events.Add})
//	defer filter.Close()
//
//	// validate a create request or PUT /sandboxes/{id}/network (400 on error):
//	p := egress.Policy{AllowInternet: req.AllowInternetAccess /* default true */,
//		AllowOut: req.Network.AllowOut, DenyOut: req.Network.DenyOut, Team: sandbox.Team}
//	if err := egress.Validate(p); err != nil { ... }
//
//	slot, _ := slots.Acquire(ctx)          // or slots.Adopt(i) after a restart
//	err = filter.Apply(slot, p)            // before the sandbox runs; fail the create on error
//	...
//	err = filter.Apply(slot, newPolicy)    // PUT /sandboxes/{id}/network: live
//	...
//	slots.Release(slot)                    // drops the policy table
//	filter.Forget(slot)                    // drops the Filter's listeners of that slot
//
// Store the policy with the sandbox: after a restart, Adopt keeps the
// policy table in the gateway, but the new Filter has no listeners there
// until Apply is called again, so call Apply for every adopted slot.
//
// Cost (2 cores, nested VM): the first Apply on a fresh slot about 1 ms
// (2 ms with domain entries, which start the slot's listeners); Apply
// with an unchanged policy under 1 ms; replacing a policy about 15 ms,
// because nftables waits for an RCU grace period when it deletes rules.
//
// Limits, by design:
//   - Names are judged on TCP ports 80 and 443 only (and DNS). Other
//     ports and UDP (QUIC) are judged by address, as E2B does.
//   - A connection carries on to the host chosen for its first name: later
//     HTTP requests on a kept-alive connection, or an inner Host behind an
//     allowed SNI (domain fronting), are not judged again. With Encrypted
//     Client Hello, the outer (public) SNI is what is judged.
//   - A denied name only covers connections that name it: a connection
//     without any name (an IP literal over TLS, say) to that name's
//     address is judged by its address. To confine a sandbox to some
//     names, allow them and deny 0.0.0.0/0, which no IP literal dodges.
//   - Under a policy that denies everything not allowed, only names an
//     allow entry covers resolve: allowing an address does not make the
//     names pointing to it resolve, so allow those names too. A wildcard
//     entry (*.example.com) lets any name below it be asked upstream,
//     which carries what the name spells to example.com's servers.
//   - IPv6 entries are refused: slots carry IPv4 only.
//   - Rules apply on ports 80 and 443 to HTTP/1.1 (the Filter offers only
//     http/1.1 in ALPN); an intercepted connection serves one host, and a
//     request on it for another Host is answered 421. Upgrades
//     (WebSockets) through an intercepted host are not passed on.
//   - E2B documents denyOut as addresses only; names there keep working
//     here, as before.
package egress
