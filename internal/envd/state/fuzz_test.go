package state

import (
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/envd/users"
)

// FuzzPath: whatever path a request names, resolution never panics and
// yields a clean absolute path or an error; the empty path is the default
// workdir, other relative paths stay in the user's home unless they climb
// out with "..", and only "~" and "~/…" of the tilde forms are accepted.
func FuzzPath(f *testing.F) {
	for _, seed := range []string{"", "~", "~/a", "/etc/../x", "rel/../../up", "./a//b/", "~user", "\x00", "a\\b"} {
		f.Add(seed)
	}
	u := &users.User{Name: "someone", UID: 12345, GID: 12345, Home: "/home/someone"}
	s := New(nil, u.Name, "/work/dir")
	f.Fuzz(func(t *testing.T, p string) {
		got, err := s.Path(u, p)
		tilde := strings.HasPrefix(p, "~") && p != "~" && !strings.HasPrefix(p, "~/")
		switch {
		case tilde:
			if err == nil {
				t.Fatalf("Path(%q) = %q, want an error for another user's home", p, got)
			}
			return
		case err != nil:
			t.Fatalf("Path(%q): %v", p, err)
		case p == "" && got != "/work/dir":
			t.Fatalf("empty path resolved to %q, want the default workdir", got)
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("Path(%q) = %q: not clean and absolute", p, got)
		}
		if p != "" && !filepath.IsAbs(p) && !strings.Contains(p, "..") {
			if rel, err := filepath.Rel(u.Home, got); err != nil || strings.HasPrefix(rel, "..") {
				t.Fatalf("relative %q resolved outside the user's home: %q", p, got)
			}
		}
	})
}
