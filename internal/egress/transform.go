package egress

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Rule is one transform of E2B's network.rules: the request headers it
// sets on every request to a matching host. A value may hold secret
// placeholders, ${e2b.secrets.<name or ID>}, which are resolved only in
// the Filter, as the request leaves; the sandbox never sees the value.
type Rule struct {
	Headers map[string]string
}

// Limits on rules, so a policy stays small to keep and quick to apply.
const (
	MaxRuleHosts      = 64
	MaxRulesPerHost   = 16
	MaxRuleHeaders    = 32
	MaxHeaderValueLen = 8 << 10
)

// placeholder is how a header value names a secret, as the SDK's
// Secret.fill writes it.
var placeholder = regexp.MustCompile(`\$\{e2b\.secrets\.([^{}]*)\}`)

// SecretRefs lists the secrets the rules of p name, sorted and without
// repeats, each with the field that names it first (for an error that
// points at it).
func SecretRefs(p Policy) []SecretRef {
	seen := map[string]bool{}
	var out []SecretRef
	for _, host := range sortedKeys(p.Rules) {
		for i, r := range p.Rules[host] {
			for _, h := range sortedKeys(r.Headers) {
				for _, m := range placeholder.FindAllStringSubmatch(r.Headers[h], -1) {
					if !seen[m[1]] {
						seen[m[1]] = true
						out = append(out, SecretRef{Name: m[1], Field: ruleField(host, i, h)})
					}
				}
			}
		}
	}
	return out
}

// SecretRef is a secret named by a rule and where.
type SecretRef struct {
	Name  string
	Field string
}

func ruleField(host string, i int, header string) string {
	return fmt.Sprintf("network.rules[%q][%d].transform.headers[%q]", host, i, header)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// hostRules is the rule set of one host pattern.
type hostRules struct {
	pattern namePattern
	key     string // as the policy spelled it, normalised
	rules   []Rule
}

// transforms is a policy's rules in match order.
type transforms struct {
	exact    map[string]*hostRules
	wildcard []*hostRules // longest suffix first
}

func (t *transforms) empty() bool { return t == nil || len(t.exact)+len(t.wildcard) == 0 }

// match finds the rule set for a host name: an exact key first, else the
// longest wildcard whose suffix the name is below. Rule sets are never
// merged.
func (t *transforms) match(name string) *hostRules {
	if t.empty() || name == "" {
		return nil
	}
	if hr := t.exact[name]; hr != nil {
		return hr
	}
	for _, hr := range t.wildcard {
		if hr.pattern.matches(name) {
			return hr
		}
	}
	return nil
}

// compileRules checks p.Rules and puts them in match order. Errors name
// the field, as the API reports it.
func compileRules(in map[string][]Rule) (*transforms, error) {
	if len(in) > MaxRuleHosts {
		return nil, fmt.Errorf("network.rules: at most %d hosts (got %d)", MaxRuleHosts, len(in))
	}
	t := &transforms{exact: map[string]*hostRules{}}
	for _, key := range sortedKeys(in) {
		field := fmt.Sprintf("network.rules[%q]", key)
		if strings.TrimSpace(key) == "*" {
			return nil, fmt.Errorf(`%s: a bare "*" is not allowed: name a host or a wildcard such as *.example.com`, field)
		}
		if _, err := parseEntryName(key); err != nil {
			return nil, fmt.Errorf("%s: %v", field, err)
		}
		pat, _ := parseName(key)
		list := in[key]
		if len(list) > MaxRulesPerHost {
			return nil, fmt.Errorf("%s: at most %d rules per host (got %d)", field, MaxRulesPerHost, len(list))
		}
		for i, r := range list {
			if err := checkRule(key, i, r); err != nil {
				return nil, err
			}
		}
		hr := &hostRules{pattern: pat, key: pat.String(), rules: list}
		if prev := t.exact[pat.name]; !pat.wildcard && prev != nil || pat.wildcard && t.hasWildcard(pat) {
			return nil, fmt.Errorf("%s: the same host is given twice (keys are compared in lower case)", field)
		}
		if pat.wildcard {
			t.wildcard = append(t.wildcard, hr)
		} else {
			t.exact[pat.name] = hr
		}
	}
	sort.SliceStable(t.wildcard, func(i, j int) bool { return len(t.wildcard[i].pattern.name) > len(t.wildcard[j].pattern.name) })
	return t, nil
}

func (t *transforms) hasWildcard(p namePattern) bool {
	for _, hr := range t.wildcard {
		if hr.pattern == p {
			return true
		}
	}
	return false
}

// parseEntryName accepts only a name (no address or CIDR) as a rules key.
func parseEntryName(key string) (namePattern, error) {
	pfx, n, err := parseEntry(key)
	if err != nil {
		return n, err
	}
	if pfx.IsValid() {
		return n, errors.New("rules match host names, not addresses")
	}
	return n, nil
}

// hopHeaders are managed by the connection itself; a rule may not set them.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true,
}

func checkRule(host string, i int, r Rule) error {
	if len(r.Headers) > MaxRuleHeaders {
		return fmt.Errorf("network.rules[%q][%d].transform.headers: at most %d headers (got %d)", host, i, MaxRuleHeaders, len(r.Headers))
	}
	for name, v := range r.Headers {
		field := ruleField(host, i, name)
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("%s: not a valid HTTP header name", field)
		}
		if hopHeaders[http.CanonicalHeaderKey(name)] {
			return fmt.Errorf("%s: %s is set by the connection itself and cannot be changed by a rule", field, http.CanonicalHeaderKey(name))
		}
		if len(v) > MaxHeaderValueLen {
			return fmt.Errorf("%s: value longer than %d bytes", field, MaxHeaderValueLen)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return fmt.Errorf("%s: value holds a control character (CR, LF or NUL are not allowed)", field)
		}
		for _, m := range placeholder.FindAllStringSubmatch(v, -1) {
			if strings.TrimSpace(m[1]) == "" {
				return fmt.Errorf("%s: ${e2b.secrets.} names no secret", field)
			}
		}
	}
	return nil
}

// errSecretMissing means a rule names a secret that no longer exists.
var errSecretMissing = errors.New("secret not found")

// apply sets rs's headers on h, resolving secret placeholders through
// lookup. It reports which headers it set (names only).
func (hr *hostRules) apply(h http.Header, lookup func(string) (string, error)) ([]string, error) {
	var set []string
	for _, r := range hr.rules {
		for _, name := range sortedKeys(r.Headers) {
			v, err := expand(r.Headers[name], lookup)
			if err != nil {
				return nil, err
			}
			h.Set(name, v)
			set = append(set, http.CanonicalHeaderKey(name))
		}
	}
	return set, nil
}

// expand replaces each placeholder in v by its secret's value.
func expand(v string, lookup func(string) (string, error)) (string, error) {
	var firstErr error
	out := placeholder.ReplaceAllStringFunc(v, func(m string) string {
		name := placeholder.FindStringSubmatch(m)[1]
		if lookup == nil {
			firstErr = fmt.Errorf("secret %q: %w", name, errSecretMissing)
			return ""
		}
		s, err := lookup(name)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("secret %q: %w", name, err)
		}
		return s
	})
	if firstErr != nil {
		return "", firstErr
	}
	if !httpguts.ValidHeaderFieldValue(out) {
		return "", errors.New("a secret's value is not a valid header value")
	}
	return out, nil
}
