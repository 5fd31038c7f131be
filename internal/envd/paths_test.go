package envd_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	fspb "cube/internal/envd/gen/filesystem"
	"cube/internal/envd/users"
)

var rootUser = &users.User{Name: users.RootName}

// nobody is the unprivileged account these tests act as.
func (s *sandbox) nobody() *users.User {
	s.t.Helper()
	u, err := users.Lookup("nobody")
	if err != nil {
		s.t.Skip("no nobody account: ", err)
	}
	return u
}

// ownedBy fails unless path (not followed) belongs to u's uid and primary
// gid and has the permission bits mode.
func ownedBy(t *testing.T, path string, u *users.User, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != u.UID || st.Gid != u.GID || fi.Mode().Perm() != mode {
		t.Fatalf("%s: uid %d gid %d mode %v, want %d %d %v", path, st.Uid, st.Gid, fi.Mode().Perm(), u.UID, u.GID, mode)
	}
}

// openWay lets unprivileged users reach s.dir, which t.TempDir makes
// root-only, and makes s.dir itself root's, 0755.
func openWay(t *testing.T, s *sandbox) {
	t.Helper()
	for _, d := range []string{filepath.Dir(s.dir), s.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// A write creates each missing parent for the acting user, as E2B's agent
// does, even where that user could not; the file itself is still written
// as the user; existing parents keep their owner and mode.
func TestUploadMakesMissingParentsForTheUser(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	nobody := s.nobody()
	openWay(t, s)
	old := filepath.Join(s.dir, "old")
	os.Mkdir(old, 0o711)
	os.Chmod(old, 0o711)
	asNobody := map[string]string{"Authorization": basic("nobody"), "Content-Type": "application/octet-stream"}

	dest := filepath.Join(old, "new", "a", "b.txt")
	if st, body, _ := s.do("POST", "/files?path="+dest, bytes.NewReader([]byte("mine")), asNobody); st != 200 {
		t.Fatalf("upload as nobody below missing directories: %d %s", st, body)
	}
	ownedBy(t, filepath.Join(old, "new"), nobody, 0o755)
	ownedBy(t, filepath.Join(old, "new", "a"), nobody, 0o755)
	ownedBy(t, dest, nobody, 0o644)
	ownedBy(t, old, rootUser, 0o711)
	ownedBy(t, s.dir, rootUser, 0o755)

	// Below a file nothing can be made.
	os.WriteFile(filepath.Join(s.dir, "plain"), nil, 0o644)
	if st, body, _ := s.do("POST", "/files?path="+filepath.Join(s.dir, "plain", "sub", "c.txt"), bytes.NewReader([]byte("x")), asNobody); st != 400 {
		t.Fatalf("upload below a file: %d %s, want 400", st, body)
	}
	if _, err := os.Lstat(filepath.Join(s.dir, "plain", "sub")); err == nil {
		t.Fatal("a directory appeared below a file")
	}
}

// MakeDir and Move create missing parents the same way.
func TestMakeDirAndMoveMakeParentsForTheUser(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	nobody := s.nobody()
	openWay(t, s)
	s.user = "nobody"
	ctx := s.ctx()

	res, err := s.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(s.dir, "m", "n")}))
	if err != nil {
		t.Fatal(err)
	}
	if e := res.Msg.GetEntry(); e.GetOwner() != "nobody" || e.GetPermissions() != "drwxr-xr-x" || e.GetPath() != filepath.Join(s.dir, "m", "n") {
		t.Fatalf("made directory: %v", e)
	}
	ownedBy(t, filepath.Join(s.dir, "m"), nobody, 0o755)
	ownedBy(t, filepath.Join(s.dir, "m", "n"), nobody, 0o755)
	ownedBy(t, s.dir, rootUser, 0o755)
	_, err = s.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(s.dir, "m")}))
	wantCode(t, err, connect.CodeAlreadyExists)
	os.WriteFile(filepath.Join(s.dir, "plain"), nil, 0o644)
	_, err = s.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(s.dir, "plain")}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = s.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(s.dir, "plain", "below")}))
	wantCode(t, err, connect.CodeInvalidArgument)

	src := filepath.Join(s.dir, "m", "f.txt")
	os.WriteFile(src, []byte("moved"), 0o644)
	os.Lchown(src, int(nobody.UID), int(nobody.GID))
	dst := filepath.Join(s.dir, "to", "deep", "f.txt")
	if _, err := s.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: src, Destination: dst})); err != nil {
		t.Fatal(err)
	}
	ownedBy(t, filepath.Join(s.dir, "to"), nobody, 0o755)
	ownedBy(t, filepath.Join(s.dir, "to", "deep"), nobody, 0o755)
	if b, _ := os.ReadFile(dst); string(b) != "moved" {
		t.Fatalf("moved file holds %q", b)
	}
	// A missing source is reported before anything is created.
	_, err = s.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: src, Destination: filepath.Join(s.dir, "never", "f.txt")}))
	wantCode(t, err, connect.CodeNotFound)
	if _, err := os.Lstat(filepath.Join(s.dir, "never")); err == nil {
		t.Fatal("a failed move created the destination's parent")
	}
}

// The empty path is the default workdir; "~" and other relative paths are
// the acting user's home; "~name" is refused everywhere.
func TestPathRules(t *testing.T) {
	s := newSandbox(t)
	ctx := s.ctx()
	stat := func(p string) (string, error) {
		res, err := s.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
		if err != nil {
			return "", err
		}
		return res.Msg.GetEntry().GetPath(), nil
	}
	if got, err := stat(""); err != nil || got != s.dir {
		t.Fatalf("stat of the empty path: %q %v, want the workdir %s", got, err, s.dir)
	}
	home := filepath.Clean(s.home())
	if got, err := stat("~"); err != nil || got != home {
		t.Fatalf("stat of ~: %q %v, want %s", got, err, home)
	}
	os.WriteFile(s.inHome("r.txt"), []byte("r"), 0o644)
	for _, p := range []string{s.rel("r.txt"), "~/" + s.rel("r.txt"), "./" + s.rel("sub/../r.txt")} {
		if got, err := stat(p); err != nil || got != s.inHome("r.txt") {
			t.Fatalf("stat of %q: %q %v, want %s", p, got, err, s.inHome("r.txt"))
		}
	}
	_, err := stat("~nobody/x")
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = s.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "~root"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = s.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "~nobody/d"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = s.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "~nobody"}))
	wantCode(t, err, connect.CodeInvalidArgument)

	// Removing a path that is not there succeeds.
	if _, err := s.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: s.rel("never-there")})); err != nil {
		t.Fatalf("remove of a missing path: %v", err)
	}
}

// A process's cwd follows the same rules: none is the default workdir, a
// relative one starts at the user's home, and it must exist.
func TestProcessCwdRules(t *testing.T) {
	s := newSandbox(t)
	pwd := func(cwd *string) (string, error) {
		req := shell("pwd")
		req.Process.Cwd = cwd
		r := s.run(s.proc, req)
		return strings.TrimSpace(r.stdout), r.err
	}
	str := func(v string) *string { return &v }
	home := filepath.Clean(s.home())
	for _, c := range []struct {
		cwd  *string
		want string
	}{
		{nil, s.dir},
		{str(""), s.dir},
		{str("~"), home},
		{str(s.rel("")), s.inHome("")},
		{str("~/" + s.rel("")), s.inHome("")},
	} {
		if got, err := pwd(c.cwd); err != nil || got != c.want {
			t.Errorf("cwd %v: pwd %q %v, want %s", c.cwd, got, err, c.want)
		}
	}
	os.WriteFile(filepath.Join(s.dir, "plain"), nil, 0o644)
	for cwd, msg := range map[string]string{
		s.rel("missing"):                "cwd '" + s.inHome("missing") + "' does not exist",
		filepath.Join(s.dir, "missing"): "cwd '" + filepath.Join(s.dir, "missing") + "' does not exist",
		filepath.Join(s.dir, "plain"):   "is not a directory",
		"~nobody":                       "~name",
	} {
		_, err := pwd(str(cwd))
		wantCode(t, err, connect.CodeInvalidArgument)
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("cwd %q: %v, want it to say %q", cwd, err, msg)
		}
	}
}
