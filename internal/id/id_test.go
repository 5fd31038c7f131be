package id

import "testing"

func TestSandboxIDsAreLabels(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		s := Sandbox()
		if !ValidSandbox(s) || len(s) != 20 {
			t.Fatalf("bad sandbox id %q", s)
		}
		if seen[s] {
			t.Fatalf("duplicate id %q", s)
		}
		seen[s] = true
	}
}

func TestPrefixAndToken(t *testing.T) {
	if s := New("snap-", 8); len(s) != 13 || s[:5] != "snap-" || !ValidName(s) {
		t.Fatalf("New(snap-) = %q", s)
	}
	if tok := Token(20); len(tok) != 40 {
		t.Fatalf("Token(20) has %d chars", len(tok))
	}
}

func TestValidName(t *testing.T) {
	for _, bad := range []string{"", "..", "a/b", "A", "-x", "x y", "a\x00"} {
		if ValidName(bad) {
			t.Errorf("ValidName(%q) = true", bad)
		}
	}
	for _, good := range []string{"base", "code-interpreter-v1", "snap-abc", "a_1"} {
		if !ValidName(good) {
			t.Errorf("ValidName(%q) = false", good)
		}
	}
}
