package egress

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestRuleMatchPrecedence(t *testing.T) {
	set := func(v string) []Rule { return []Rule{{Headers: map[string]string{"X-Rule": v}}} }
	tr, err := compileRules(map[string][]Rule{
		"api.example.com":      set("exact"),
		"*.example.com":        set("short"),
		"*.api.example.com":    set("long"),
		"*.com":                set("broad"),
		"Upper.Example.ORG":    set("upper"),
		"other.example.com.":   set("dot"),
		"*.deep.example.net":   set("deep"),
		"deep.example.net":     set("apex"),
		"x.deep.example.net":   set("x-exact"),
		"*.x.deep.example.net": set("x-wild"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"api.example.com":      "exact", // exact beats every wildcard
		"v1.api.example.com":   "long",  // the longest wildcard suffix wins
		"a.b.api.example.com":  "long",  // at any depth
		"www.example.com":      "short",
		"example.com":          "broad", // a wildcard never matches its apex...
		"other.example.com":    "dot",   // trailing dot normalised away
		"upper.example.org":    "upper", // keys are lower-cased
		"deep.example.net":     "apex",
		"y.deep.example.net":   "deep",
		"x.deep.example.net":   "x-exact",
		"z.x.deep.example.net": "x-wild",
		"unrelated.org":        "",
		"":                     "",
	} {
		hr := tr.match(name)
		got := ""
		if hr != nil {
			got = hr.rules[0].Headers["X-Rule"]
		}
		if got != want {
			t.Errorf("match(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestRuleValidation(t *testing.T) {
	long := strings.Repeat("v", MaxHeaderValueLen+1)
	for _, c := range []struct {
		rules map[string][]Rule
		want  string // in the error: the field and what is wrong
	}{
		{map[string][]Rule{"*": {{}}}, `network.rules["*"]: a bare "*"`},
		{map[string][]Rule{"1.2.3.4": {{}}}, `network.rules["1.2.3.4"]: rules match host names`},
		{map[string][]Rule{"a..b": {{}}}, `network.rules["a..b"]: empty label`},
		{map[string][]Rule{"api.example.com": {{Headers: map[string]string{"Bad Header": "v"}}}}, `network.rules["api.example.com"][0].transform.headers["Bad Header"]: not a valid HTTP header name`},
		{map[string][]Rule{"api.example.com": {{}, {Headers: map[string]string{"X-A": "a\r\nInjected: 1"}}}}, `[1].transform.headers["X-A"]: value holds a control character`},
		{map[string][]Rule{"api.example.com": {{Headers: map[string]string{"X-A": long}}}}, `value longer than 8192 bytes`},
		{map[string][]Rule{"api.example.com": {{Headers: map[string]string{"Host": "evil.example"}}}}, `Host is set by the connection itself`},
		{map[string][]Rule{"api.example.com": {{Headers: map[string]string{"X-A": "${e2b.secrets.}"}}}}, `names no secret`},
		{map[string][]Rule{"API.example.com": {{}}, "api.example.com": {{}}}, `the same host is given twice`},
	} {
		_, err := compile(Policy{AllowInternet: true, Rules: c.rules})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rules %v: error %v, want one containing %q", keysOf(c.rules), err, c.want)
		}
	}
	many := map[string][]Rule{}
	for i := range MaxRuleHosts + 1 {
		many[strings.Repeat("a", i+1)+".example"] = nil
	}
	if _, err := compile(Policy{Rules: many}); err == nil || !strings.Contains(err.Error(), "network.rules: at most") {
		t.Errorf("too many hosts: %v", err)
	}
}

func keysOf(m map[string][]Rule) []string { return sortedKeys(m) }

func TestRuleApplyResolvesSecrets(t *testing.T) {
	tr, err := compileRules(map[string][]Rule{"api.example.com": {
		{Headers: map[string]string{"Authorization": "Bearer ${e2b.secrets.openai}", "X-Old": "1"}},
		{Headers: map[string]string{"x-old": "2", "X-Both": "${e2b.secrets.a}-${e2b.secrets.b}"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]string{"openai": "sk-123", "a": "A", "b": "B"}
	lookup := func(n string) (string, error) {
		if v, ok := vals[n]; ok {
			return v, nil
		}
		return "", errSecretMissing
	}
	h := http.Header{"Authorization": {"Bearer sandbox-made"}, "X-Keep": {"k"}}
	set, err := tr.match("api.example.com").apply(h, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("Authorization"); got != "Bearer sk-123" {
		t.Errorf("Authorization = %q: an existing header is replaced", got)
	}
	if got := h.Values("X-Old"); len(got) != 1 || got[0] != "2" {
		t.Errorf("X-Old = %q: later rules of a set replace earlier ones", got)
	}
	if h.Get("X-Both") != "A-B" || h.Get("X-Keep") != "k" {
		t.Errorf("headers %v", h)
	}
	if strings.Join(set, ",") != "Authorization,X-Old,X-Both,X-Old" {
		t.Errorf("set = %v", set)
	}
	delete(vals, "b")
	if _, err := tr.match("api.example.com").apply(http.Header{}, lookup); !errors.Is(err, errSecretMissing) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("missing secret: %v", err)
	}
	vals["b"] = "bad\nvalue"
	if _, err := tr.match("api.example.com").apply(http.Header{}, lookup); err == nil {
		t.Error("a secret holding a newline made a header")
	}
}

func TestSecretRefs(t *testing.T) {
	refs := SecretRefs(Policy{Rules: map[string][]Rule{
		"b.example": {{Headers: map[string]string{"X": "${e2b.secrets.one}"}}},
		"a.example": {{}, {Headers: map[string]string{"Y": "${e2b.secrets.two} ${e2b.secrets.one}", "Z": "plain"}}},
	}})
	if len(refs) != 2 || refs[0].Name != "two" || refs[1].Name != "one" ||
		refs[0].Field != `network.rules["a.example"][1].transform.headers["Y"]` {
		t.Errorf("refs = %+v", refs)
	}
}

func TestRulesNeedTheFilter(t *testing.T) {
	r, err := compile(Policy{AllowInternet: true, Rules: map[string][]Rule{"api.example.com": {{}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.open() || !r.hasNames() {
		t.Error("a policy with only rules must redirect web traffic to the Filter")
	}
	plain, _ := compile(Policy{AllowInternet: true, AllowOut: []string{"1.1.1.1"}})
	withRules, _ := compile(Policy{AllowInternet: true, AllowOut: []string{"1.1.1.1"}, Rules: map[string][]Rule{"a.example": {{}}}})
	if string(plain.tag()) == string(withRules.tag()) {
		t.Error("rules do not change the kernel rules' tag: an update adding rules would keep the old table")
	}
}
