package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PgBouncer is a connection pooler in transaction mode between the nodes
// and PostgreSQL: a hundred nodes, each with a pool of its own, share a
// few server connections (CLUSTER.md, "Connections"). Each node still
// connects as its own role, so the statistics keep telling them apart.
type PgBouncer struct {
	cmd  *exec.Cmd
	dir  string
	port int
}

// pgbouncerBin finds Debian's pgbouncer.
func pgbouncerBin() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("no pgbouncer: apt-get install pgbouncer")
}

// StartPgBouncer starts a PgBouncer under dir in front of pg, for the
// given roles, holding at most pool connections to the server.
func StartPgBouncer(ctx context.Context, pg *Postgres, dir string, roles []string, pool int) (*PgBouncer, error) {
	bin, err := pgbouncerBin()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := reachableBy(pg.asUser, dir); err != nil {
		return nil, err
	}
	b := &PgBouncer{dir: dir}
	if b.port, err = freePort(); err != nil {
		return nil, err
	}
	var users strings.Builder
	for _, r := range append([]string{"postgres"}, roles...) {
		fmt.Fprintf(&users, "%q \"\"\n", r)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(users.String()), 0o644); err != nil {
		return nil, err
	}
	// max_db_connections caps the server connections of the database
	// whatever the role; each role's own pool may use them all.
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_db_connections = %d
max_client_conn = %d
server_reset_query =
ignore_startup_parameters = extra_float_digits,application_name
logfile = %s
pidfile = %s
`, pg.port, b.port, filepath.Join(dir, "users.txt"), pool, pool, 8*len(roles)+100, filepath.Join(dir, "log"), filepath.Join(dir, "pid"))
	path := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if pg.asUser != "" {
		b.cmd = exec.Command("runuser", "-u", pg.asUser, "--", bin, path)
	} else {
		b.cmd = exec.Command(bin, path)
	}
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", b.port))
		if err == nil {
			c.Close()
			return b, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			b.Stop()
			return nil, fmt.Errorf("pgbouncer does not listen: %s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Through is a node's store URL through the pooler: unnamed statements
// only, since a transaction's server connection is not the next one's.
func (b *PgBouncer) Through(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", b.port)
	q := u.Query()
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Stop ends the pooler (the process this simulation started).
func (b *PgBouncer) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		b.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { b.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			b.cmd.Process.Kill()
			<-done
		}
	}
}
