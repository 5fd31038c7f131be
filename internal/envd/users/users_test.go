package users

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureCreatesMissingAccountOnce(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nbob:x:1000:1000::/home/bob:/bin/sh"), 0o644)
	os.WriteFile(filepath.Join(root, "etc", "group"), []byte("root:x:0:\nbob:x:1000:\nstaff:x:1001:\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc", "shadow"), []byte("root:*:1::::::\n"), 0o640)

	created, err := Ensure(root, "user", "/home/user")
	if err != nil || !created {
		t.Fatalf("Ensure = %v, %v; want created", created, err)
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if !strings.Contains(string(passwd), "\nuser:x:1002:1002::/home/user:/bin/bash\n") {
		t.Fatalf("passwd lacks the new account:\n%s", passwd)
	}
	group, _ := os.ReadFile(filepath.Join(root, "etc", "group"))
	if !strings.Contains(string(group), "user:x:1002:") {
		t.Fatalf("group lacks the new group:\n%s", group)
	}
	shadow, _ := os.ReadFile(filepath.Join(root, "etc", "shadow"))
	if !strings.Contains(string(shadow), "user:*:") {
		t.Fatalf("shadow lacks the new account:\n%s", shadow)
	}
	if st, err := os.Stat(filepath.Join(root, "home", "user")); err != nil || !st.IsDir() {
		t.Fatalf("home directory: %v", err)
	}

	created, err = Ensure(root, "user", "/home/user")
	if err != nil || created {
		t.Fatalf("second Ensure = %v, %v; want nothing to do", created, err)
	}
	again, _ := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if string(again) != string(passwd) {
		t.Fatalf("second Ensure changed passwd")
	}
}

func TestLookupUnknown(t *testing.T) {
	if _, err := Lookup("no-such-user-for-cube"); err == nil {
		t.Fatal("Lookup of a missing account succeeded")
	}
}

func TestDoActsAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching identity needs root")
	}
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Skip("no nobody account: ", err)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	err = nobody.Do(func() error {
		_, err := os.ReadDir(dir)
		return err
	})
	if !os.IsPermission(err) {
		t.Fatalf("nobody reading a root-only directory: %v, want permission denied", err)
	}
	// The identity must not leak to other goroutines.
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatalf("root after Do: %v", err)
	}
	open := t.TempDir()
	os.Chmod(open, 0o777)
	os.Chmod(filepath.Dir(open), 0o755)
	p := filepath.Join(open, "f")
	if err := nobody.Do(func() error { return os.WriteFile(p, nil, 0o644) }); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if uid := statUID(st); uid != nobody.UID {
		t.Fatalf("file made as nobody is owned by %d, want %d", uid, nobody.UID)
	}
}

func TestRootIsUIDZeroWithHomeRoot(t *testing.T) {
	u, err := Lookup("root")
	if err != nil || u.UID != 0 || u.GID != 0 || u.Home != "/root" || u.Name != "root" {
		t.Fatalf("Lookup(root) = %+v, %v; want uid 0, gid 0, home /root", u, err)
	}
	if os.Geteuid() == 0 {
		cur, err := Current()
		if err != nil || cur.UID != 0 || cur.Home != "/root" {
			t.Fatalf("Current as root = %+v, %v", cur, err)
		}
	}
}
