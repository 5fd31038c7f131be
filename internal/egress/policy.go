package egress

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Policy is one sandbox's outbound network policy, in E2B's terms.
//
// Allow beats deny: a destination that an AllowOut entry covers is
// reachable whatever DenyOut says. AllowInternet false is the same as
// DenyOut containing "0.0.0.0/0", so with AllowOut empty nothing is
// reachable, and with AllowOut given only those targets are. Note the zero
// Policy therefore allows no egress; E2B's default is AllowInternet true.
//
// Entries are IPv4 addresses ("1.1.1.1"), IPv4 CIDRs ("8.8.8.0/24") or
// domain names ("example.com", or "*.example.com" for every name below
// example.com but not example.com itself). IP and CIDR entries apply to
// every protocol and port. Domain entries apply to DNS (a denied name does
// not resolve) and to TCP ports 80 and 443, where the name is the HTTP
// Host header or the TLS SNI: a connection whose name is allowed goes to
// the name's own addresses, whatever address the sandbox dialled, and one
// without a name is judged by its address alone. Other ports and UDP
// (QUIC) fall back to the address rules.
//
// Sandboxes never reach private, loopback, link-local or metadata ranges,
// the host or each other, whatever their policy says (see netslot); a
// policy only narrows that down.
type Policy struct {
	// AllowInternet false: no egress at all but what AllowOut lists.
	AllowInternet bool
	// AllowOut and DenyOut are CIDRs, IPs or domain names.
	AllowOut, DenyOut []string
	// Rules transform requests to matching hosts (E2B's network.rules):
	// keys are names or *. wildcards; see Rule. Rules grant no access.
	Rules map[string][]Rule
	// Owner names the sandbox in the Filter's audit events.
	Owner string
	// Team is the sandbox's team: its rules' ${e2b.secrets.<ref>}
	// placeholders are filled only with that team's secrets (see
	// Config.Secrets).
	Team string
}

// Open is the policy of a sandbox created without any network settings.
var Open = Policy{AllowInternet: true}

// Limits on a policy's size, so a request cannot make rule sets that take
// the kernel or the filter long to evaluate.
const (
	MaxEntries   = 512
	maxNameLen   = 253
	maxLabelLen  = 63
	allTrafficV4 = "0.0.0.0/0"
)

// Validate checks every entry of p and names the first bad one, for an
// answer of 400 Bad Request.
func Validate(p Policy) error {
	_, err := compile(p)
	return err
}

// rules is a validated policy in the form the kernel rules and the
// filter use.
type rules struct {
	allowNets, denyNets   []netip.Prefix
	allowNames, denyNames []namePattern
	transforms            *transforms
	owner, team           string
}

// namePattern is an exact name or, with wildcard, every name below suffix.
type namePattern struct {
	name     string // without "*."
	wildcard bool
}

func (n namePattern) matches(name string) bool {
	if n.wildcard {
		return len(name) > len(n.name) && strings.HasSuffix(name, n.name) && name[len(name)-len(n.name)-1] == '.'
	}
	return name == n.name
}

func (n namePattern) String() string {
	if n.wildcard {
		return "*." + n.name
	}
	return n.name
}

func compile(p Policy) (*rules, error) {
	if len(p.AllowOut) > MaxEntries || len(p.DenyOut) > MaxEntries {
		return nil, fmt.Errorf("egress: at most %d entries per list (allowOut has %d, denyOut %d)", MaxEntries, len(p.AllowOut), len(p.DenyOut))
	}
	r := &rules{}
	for _, list := range []struct {
		name    string
		entries []string
		nets    *[]netip.Prefix
		names   *[]namePattern
	}{
		{"allowOut", p.AllowOut, &r.allowNets, &r.allowNames},
		{"denyOut", p.DenyOut, &r.denyNets, &r.denyNames},
	} {
		for _, e := range list.entries {
			pfx, name, err := parseEntry(e)
			if err != nil {
				return nil, fmt.Errorf("egress: %s entry %q: %w", list.name, e, err)
			}
			if pfx.IsValid() {
				*list.nets = append(*list.nets, pfx)
			} else {
				*list.names = append(*list.names, name)
			}
		}
	}
	if !p.AllowInternet {
		r.denyNets = append(r.denyNets, netip.MustParsePrefix(allTrafficV4))
	}
	t, err := compileRules(p.Rules)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	r.transforms, r.owner, r.team = t, p.Owner, p.Team
	return r, nil
}

// parseEntry reads one list entry: an IPv4 address or CIDR (returned as a
// masked prefix) or a domain name.
func parseEntry(s string) (netip.Prefix, namePattern, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Prefix{}, namePattern{}, errors.New("empty")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, namePattern{}, errors.New("not a valid CIDR")
		}
		if !p.Addr().Is4() {
			return netip.Prefix{}, namePattern{}, errors.New("IPv6 is not supported: sandboxes have IPv4 only")
		}
		return p.Masked(), namePattern{}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if !a.Is4() {
			return netip.Prefix{}, namePattern{}, errors.New("IPv6 is not supported: sandboxes have IPv4 only")
		}
		return netip.PrefixFrom(a, 32), namePattern{}, nil
	}
	if strings.Contains(s, ":") || strings.HasPrefix(s, "[") {
		return netip.Prefix{}, namePattern{}, errors.New("not an IPv4 address, CIDR or domain name (ports are not supported)")
	}
	n, err := parseName(s)
	return netip.Prefix{}, n, err
}

// parseName checks a domain name, with an optional leading "*." wildcard.
func parseName(s string) (namePattern, error) {
	var n namePattern
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "*" {
		return n, errors.New(`a lone "*" is not supported: 0.0.0.0/0 stands for all traffic`)
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		n.wildcard = true
		s = rest
	}
	if s == "" {
		return n, errors.New("no domain name")
	}
	if len(s) > maxNameLen {
		return n, fmt.Errorf("domain name longer than %d characters", maxNameLen)
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return n, err
		}
	}
	// "1.2.3" or "300.1.1.1" are typos for addresses, not names: a name
	// whose last label is all digits cannot be registered.
	if isDigits(labels[len(labels)-1]) {
		return n, errors.New("not a valid IPv4 address or domain name")
	}
	n.name = s
	return n, nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label in domain name")
	case len(l) > maxLabelLen:
		return fmt.Errorf("domain name label longer than %d characters", maxLabelLen)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("domain name label %q starts or ends with '-'", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			if c == '*' {
				return errors.New("a wildcard may only stand first, as in *.example.com")
			}
			return fmt.Errorf("character %q is not allowed in a domain name", c)
		}
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// verdict is what a rule list says about a target.
type verdict int

const (
	undecided verdict = iota
	allowed
	denied
)

// tag identifies the kernel rules made from r, so an unchanged policy can
// be recognised in the gateway (nftables keeps at most 256 bytes of user
// data per rule, hence the hash). The rule layout's version is part of it.
func (r *rules) tag() []byte {
	h := sha256.New()
	fmt.Fprintf(h, "egress/1 %v %v %v %v", r.allowNets, r.denyNets, r.allowNames, r.denyNames)
	if !r.transforms.empty() {
		// Rules need the web redirect even without domain entries.
		fmt.Fprint(h, " intercept")
	}
	return fmt.Appendf(nil, "egress/1 %x", h.Sum(nil)[:16])
}

// hasNames reports whether any domain entry or rule exists, which is when
// the sandbox's DNS and web traffic must go through the Filter.
func (r *rules) hasNames() bool {
	return len(r.allowNames)+len(r.denyNames) > 0 || !r.transforms.empty()
}

// open reports whether the policy restricts and transforms nothing.
func (r *rules) open() bool {
	return len(r.allowNets)+len(r.denyNets)+len(r.allowNames)+len(r.denyNames) == 0 && r.transforms.empty()
}

// denyAll reports whether everything not allowed is denied.
func (r *rules) denyAll() bool {
	for _, p := range r.denyNets {
		if p.Bits() == 0 {
			return true
		}
	}
	return false
}

// nameVerdict judges a host name (lower-case, no trailing dot).
func (r *rules) nameVerdict(name string) verdict {
	if name == "" {
		return undecided
	}
	for _, n := range r.allowNames {
		if n.matches(name) {
			return allowed
		}
	}
	for _, n := range r.denyNames {
		if n.matches(name) {
			return denied
		}
	}
	return undecided
}

// addrAllowed judges an address by the IP and CIDR entries alone.
func (r *rules) addrAllowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range r.allowNets {
		if p.Contains(a) {
			return true
		}
	}
	for _, p := range r.denyNets {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// normalizeHost turns an SNI or Host header value into a name to judge:
// lower-case, without port and trailing dot. IP literals give "" (the
// address decides, not a name).
func normalizeHost(h string) string {
	h = strings.TrimSpace(h)
	if strings.HasPrefix(h, "[") {
		return "" // IPv6 literal
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if _, err := netip.ParseAddr(h); err == nil {
		return ""
	}
	return h
}
