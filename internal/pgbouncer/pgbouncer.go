// Package pgbouncer runs Debian's PgBouncer in transaction mode in front
// of a PostgreSQL server, so that many clients (a hundred nodes, each with
// a pool of its own) share a few server connections (CLUSTER.md,
// "Connections"). The cluster simulation and the store's tests start it;
// Cube itself only connects through one an operator runs.
package pgbouncer

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

	"cube/internal/loopback"
)

// ErrNotInstalled is Start's error where PgBouncer is not installed.
var ErrNotInstalled = errors.New("no pgbouncer: apt-get install pgbouncer")

// Options say where PgBouncer runs and what it lets through.
type Options struct {
	// Upstream is the PostgreSQL server's host:port.
	Upstream string
	// Dir holds the configuration, log and pid file; AsUser must be able
	// to write it.
	Dir string
	// AsUser runs PgBouncer as this user (it refuses to run as root); ""
	// runs it as the caller.
	AsUser string
	// Roles connect besides postgres; each connects as itself, so the
	// server's statistics keep telling them apart.
	Roles []string
	// Pool is the most server connections of the database, whatever the
	// role; each role's own pool may use them all.
	Pool int
	// MaxClients is the most client connections (0: 8 per role and 100).
	MaxClients int
}

// Pooler is a running PgBouncer.
type Pooler struct {
	cmd  *exec.Cmd
	stop context.CancelFunc
	port int
}

// bin finds Debian's pgbouncer.
func bin() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNotInstalled
}

// Start starts PgBouncer as o says and returns once it listens.
func Start(ctx context.Context, o Options) (*Pooler, error) {
	path, err := bin()
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", o.Upstream, err)
	}
	b := &Pooler{}
	if b.port, err = loopback.FreePort(); err != nil {
		return nil, err
	}
	var users strings.Builder
	for _, r := range append([]string{"postgres"}, o.Roles...) {
		fmt.Fprintf(&users, "%q \"\"\n", r)
	}
	usersFile := filepath.Join(o.Dir, "users.txt")
	if err := os.WriteFile(usersFile, []byte(users.String()), 0o644); err != nil {
		return nil, err
	}
	clients := o.MaxClients
	if clients == 0 {
		clients = 8*len(o.Roles) + 100
	}
	logFile := filepath.Join(o.Dir, "log")
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s
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
`, host, port, b.port, usersFile, o.Pool, o.Pool, clients, logFile, filepath.Join(o.Dir, "pid"))
	confFile := filepath.Join(o.Dir, "pgbouncer.ini")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	args := []string{path, confFile}
	if o.AsUser != "" {
		args = append([]string{"runuser", "-u", o.AsUser, "--"}, args...)
	}
	// The pooler lives until Stop, not until ctx (which bounds the start):
	// Stop cancels its own context, and exec sends SIGTERM, then SIGKILL
	// if it has not exited 5 s later.
	life, stop := context.WithCancel(context.Background())
	b.cmd, b.stop = exec.CommandContext(life, args[0], args[1:]...), stop
	b.cmd.Cancel = func() error { return b.cmd.Process.Signal(syscall.SIGTERM) }
	b.cmd.WaitDelay = 5 * time.Second
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		stop()
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", b.port))
		if err == nil {
			c.Close()
			return b, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(logFile)
			b.Stop()
			return nil, fmt.Errorf("pgbouncer does not listen: %s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Through is dsn reaching the same database through the pooler, with
// unnamed statements only: PgBouncer before 1.21 keeps no prepared
// statements across the server connections it hands out, and a
// transaction's server connection is not the next one's.
func (b *Pooler) Through(dsn string) (string, error) {
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

// Stop ends the pooler: SIGTERM, then SIGKILL after 5 s.
func (b *Pooler) Stop() {
	b.stop()
	b.cmd.Wait()
}
