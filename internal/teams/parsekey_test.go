package teams

import (
	"strings"
	"testing"
)

// printableKey is what ParseKey may accept, said independently of it: 1
// to MaxKeyLen bytes, each printable ASCII other than the space.
func printableKey(s string) bool {
	if len(s) == 0 || len(s) > MaxKeyLen {
		return false
	}
	for _, c := range []byte(s) {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// FuzzParseKey: whatever a request presents as a key, ParseKey does not
// panic; what it accepts is the input without surrounding white space, 1
// to MaxKeyLen bytes of printable ASCII, and accepted again unchanged;
// what it refuses could not be a key. An accepted key's mask shows its
// ends and length, never more than a few of its characters.
func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		NewKey(), NewKey() + "\n", "\t" + NewKey() + " \r\n",
		"", " ", " e2b_x\n", "e2b_", "e2b_x", "x",
		strings.Repeat("a", MaxKeyLen), strings.Repeat("a", MaxKeyLen+1),
		" " + strings.Repeat("k", MaxKeyLen) + "\n", strings.Repeat("e2b_", 1000),
		"e2b_ab cd", "e2b_\x00", "e2b_\x7f", "\u00a0e2b_abc\u0085", "e2b_ключ", "\xff\xfe", "🔑",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		k, ok := ParseKey(raw)
		trimmed := strings.TrimSpace(raw)
		if !ok {
			if k != "" {
				t.Fatalf("ParseKey(%q) refused it but returned %q", raw, k)
			}
			if printableKey(trimmed) {
				t.Fatalf("ParseKey(%q) refused %q, which can be a key", raw, trimmed)
			}
			return
		}
		if k != trimmed || strings.TrimSpace(k) != k {
			t.Fatalf("ParseKey(%q) = %q, want the input without surrounding space, %q", raw, k, trimmed)
		}
		if !printableKey(k) {
			t.Fatalf("ParseKey(%q) accepted %q: not 1 to %d bytes of printable ASCII", raw, k, MaxKeyLen)
		}
		if again, ok := ParseKey(k); !ok || again != k {
			t.Fatalf("ParseKey(%q) = %q, %v; want it unchanged", k, again, ok)
		}
		if d := Digest(k); len(d) != 64 {
			t.Fatalf("Digest(%q) = %q", k, d)
		}
		m := Mask(k)
		rest := strings.TrimPrefix(k, m.Prefix)
		if m.Prefix+rest != k || m.ValueLength != len(rest) ||
			!strings.HasPrefix(rest, m.MaskedPrefix) || !strings.HasSuffix(rest, m.MaskedSuffix) ||
			(m.MaskedPrefix != "" || m.MaskedSuffix != "") && len(m.MaskedPrefix)+len(m.MaskedSuffix) > len(rest)*3/4 {
			t.Fatalf("Mask(%q) = %+v", k, m)
		}
	})
}
