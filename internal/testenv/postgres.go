package testenv

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"cube/internal/loopback"
)

// Postgres starts a PostgreSQL server of its own for the test, from
// Debian's packages (`make test-deps` installs them), in a temporary
// directory, listening on a free loopback port, and returns the URL of
// its database "cube". The server is stopped when the test ends. It runs
// as the system user postgres (PostgreSQL refuses root), so it needs root.
func Postgres(t testing.TB) string { return PostgresServer(t).URL }

// PG is a test's own PostgreSQL server, which the test may stop and start
// again (an outage, a restart) on the same port and data.
type PG struct {
	// URL is the database "cube" on it.
	URL string
	// start and stop run pg_ctl on it.
	start, stop func() error
}

// Stop shuts the server down at once, as a crash would: sessions are cut
// and nothing answers on its port until Start.
func (pg *PG) Stop(t testing.TB) {
	t.Helper()
	if err := pg.stop(); err != nil {
		t.Fatal(err)
	}
}

// Start starts the stopped server again and returns once it takes
// connections.
func (pg *PG) Start(t testing.TB) {
	t.Helper()
	if err := pg.start(); err != nil {
		t.Fatal(err)
	}
}

// URLAt is URL with the server reached at host, one of the addresses it
// listens on (see PostgresServer).
func (pg *PG) URLAt(host string) string {
	u, err := url.Parse(pg.URL)
	if err != nil {
		return pg.URL
	}
	u.Host = net.JoinHostPort(host, u.Port())
	return u.String()
}

// PostgresServer is Postgres, with the server's controls. It listens on
// 127.0.0.1, and on also's addresses (which must exist on this host), to
// clients within their prefixes.
func PostgresServer(t testing.TB, also ...netip.Prefix) *PG {
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
	listen := "127.0.0.1"
	var hba strings.Builder
	for _, p := range also {
		listen += "," + p.Addr().String()
		fmt.Fprintf(&hba, "host all all %s trust\n", p.Masked())
	}
	if hba.Len() > 0 {
		f, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(hba.String())
		f.Close()
	}
	opts := fmt.Sprintf("-c listen_addresses=%s -p %d -k %s -c fsync=on", listen, port, dir)
	server := &PG{
		URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/cube?sslmode=disable", port),
		start: func() error {
			if out, err := as("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start").CombinedOutput(); err != nil {
				log, _ := os.ReadFile(filepath.Join(dir, "log"))
				return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
			}
			return nil
		},
		stop: func() error {
			if out, err := as("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
				return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
			}
			return nil
		},
	}
	if err := server.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := server.stop(); err != nil && !strings.Contains(err.Error(), "Is server running?") {
			t.Log(err)
		}
	})
	if out, err := as("createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "cube").CombinedOutput(); err != nil {
		t.Fatalf("createdb: %v\n%s", err, out)
	}
	return server
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
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
