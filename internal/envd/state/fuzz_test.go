package state

import (
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/envd/users"
)

// FuzzPath: whatever path a request names, resolution never panics and
// yields a clean absolute path (or an error for an empty one).
func FuzzPath(f *testing.F) {
	for _, seed := range []string{"", "~", "~/a", "/etc/../x", "rel/../../up", "./a//b/", "~user", "\x00", "a\\b"} {
		f.Add(seed)
	}
	u, err := users.Current()
	if err != nil {
		f.Fatal(err)
	}
	s := New(nil, u.Name, "/work/dir")
	f.Fuzz(func(t *testing.T, p string) {
		got, err := s.Path(u, p)
		if p == "" {
			if err == nil {
				t.Fatalf("empty path accepted as %q", got)
			}
			return
		}
		if err != nil {
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("Path(%q) = %q: not clean and absolute", p, got)
		}
		if !filepath.IsAbs(p) && !strings.HasPrefix(p, "~") {
			if rel, err := filepath.Rel("/work/dir", got); err != nil || (rel != "." && strings.HasPrefix(rel, "..") && !strings.Contains(p, "..")) {
				t.Fatalf("relative %q resolved outside the workdir: %q", p, got)
			}
		}
	})
}
