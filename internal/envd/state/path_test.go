package state

import (
	"testing"

	"cube/internal/envd/users"
)

// Relative paths start at the acting user's home, whatever the default
// workdir; only the empty path means the workdir.
func TestPathResolution(t *testing.T) {
	alice := &users.User{Name: "alice", UID: 12345, GID: 12345, Home: "/home/alice"}
	root := &users.User{Name: "root", Home: "/root"}
	withWorkdir := New(nil, "alice", "/work/dir")
	noWorkdir := New(nil, "alice", "")
	for _, c := range []struct {
		s    *State
		u    *users.User
		in   string
		want string
	}{
		{withWorkdir, alice, "", "/work/dir"},
		{noWorkdir, alice, "", "/home/alice"},
		{withWorkdir, alice, "notes.txt", "/home/alice/notes.txt"},
		{withWorkdir, root, "notes.txt", "/root/notes.txt"},
		{withWorkdir, alice, "./a//b/../c", "/home/alice/a/c"},
		{withWorkdir, alice, "../bob/x", "/home/bob/x"},
		{withWorkdir, alice, "~", "/home/alice"},
		{withWorkdir, alice, "~/", "/home/alice"},
		{withWorkdir, alice, "~/d/x.txt", "/home/alice/d/x.txt"},
		{withWorkdir, root, "~/x", "/root/x"},
		{withWorkdir, alice, "/etc/../tmp/./y", "/tmp/y"},
		{withWorkdir, alice, "a/~/b", "/home/alice/a/~/b"},
	} {
		got, err := c.s.Path(c.u, c.in)
		if err != nil || got != c.want {
			t.Errorf("Path(%s, %q) = %q, %v; want %q", c.u.Name, c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"~bob", "~bob/x", "~root"} {
		if got, err := withWorkdir.Path(alice, in); err == nil {
			t.Errorf("Path(%q) = %q, want an error: another user's home is not expanded", in, got)
		}
	}
}
