package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// Postgres starts a PostgreSQL server of its own for the test, from
// Debian's packages (`make test-deps` installs them), in a temporary
// directory, listening on a free loopback port, and returns the URL of
// its database "cube". The server is stopped when the test ends. It runs
// as the system user postgres (PostgreSQL refuses root), so it needs root.
func Postgres(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	bin := postgresBin(t)
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("no system user postgres: install Debian's postgresql package (make test-deps): %v", err)
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	dir, err := os.MkdirTemp("", "cube-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	as := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		cmd.Dir = dir
		return cmd
	}
	if out, err := as("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=on", port, dir)
	if out, err := as("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		if out, err := as("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	if out, err := as("createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "cube").CombinedOutput(); err != nil {
		t.Fatalf("createdb: %v\n%s", err, out)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/cube?sslmode=disable", port)
}

// postgresBin is the newest installed PostgreSQL's bin directory.
func postgresBin(t testing.TB) string {
	t.Helper()
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		t.Fatal("PostgreSQL is not installed: install Debian's postgresql package (make test-deps)")
	}
	sort.Strings(found)
	return filepath.Dir(found[len(found)-1])
}

// freePort is a loopback TCP port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
