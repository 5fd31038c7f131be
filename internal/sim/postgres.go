package sim

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"cube/internal/loopback"
)

// Postgres is the simulation's own PostgreSQL server: a data directory
// under a temporary directory, a free loopback port, pg_stat_statements
// loaded, stopped by Stop. The nodes share its database "cube"; the
// simulation reads statistics through database "postgres", so that its own
// queries are not counted against the nodes.
type Postgres struct {
	// URL is the nodes' database; AdminURL the one statistics are read on.
	URL, AdminURL string
	dir, bin      string
	port          int
	// asUser runs PostgreSQL's programs as the postgres system user when
	// this process is root (PostgreSQL refuses to run as root).
	asUser string
	admin  *sql.DB
}

// PostgresOptions tune the server.
type PostgresOptions struct {
	// MaxConnections is max_connections (0: PostgreSQL's default, 100).
	MaxConnections int
	// Bin is the directory of initdb, pg_ctl and postgres; empty finds
	// them on PATH, then in Debian's /usr/lib/postgresql/*/bin.
	Bin string
	// Settings are more -c name=value settings.
	Settings []string
}

// StartPostgres initialises and starts a server under dir.
func StartPostgres(ctx context.Context, dir string, o PostgresOptions) (*Postgres, error) {
	bin, err := postgresBin(o.Bin)
	if err != nil {
		return nil, err
	}
	pg := &Postgres{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		pg.asUser = "postgres"
		if err := reachableBy(pg.asUser, dir); err != nil {
			return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no system user postgres to run it as: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := pg.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if pg.port, err = loopback.FreePort(); err != nil {
		return nil, err
	}
	settings := []string{
		"listen_addresses=127.0.0.1", "port=" + strconv.Itoa(pg.port), "unix_socket_directories=" + dir,
		"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.max=10000", "pg_stat_statements.track_utility=on",
		"fsync=on", "log_min_messages=warning",
	}
	if o.MaxConnections > 0 {
		settings = append(settings, "max_connections="+strconv.Itoa(o.MaxConnections))
	}
	settings = append(settings, o.Settings...)
	var conf strings.Builder
	conf.WriteString("\n# cube-sim\n")
	for _, kv := range settings {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&conf, "%s = '%s'\n", strings.TrimSpace(k), strings.ReplaceAll(strings.TrimSpace(v), "'", "''"))
	}
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf.String())
	f.Close()
	if err != nil {
		return nil, err
	}
	if out, err := pg.run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return nil, fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	pg.AdminURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
	pg.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/cube?sslmode=disable", pg.port)
	if pg.admin, err = sql.Open("pgx", pg.AdminURL); err != nil {
		pg.Stop()
		return nil, err
	}
	pg.admin.SetMaxOpenConns(2)
	for _, q := range []string{`CREATE DATABASE cube`, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`} {
		if _, err := pg.admin.ExecContext(ctx, q); err != nil {
			pg.Stop()
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return pg, nil
}

// Role makes a login role of the given name (a superuser, as the one
// the nodes would otherwise share) and returns the URL of the nodes'
// database as that role: each node connecting as its own role, the
// statistics tell the nodes apart.
func (pg *Postgres) Role(ctx context.Context, name string) (string, error) {
	if _, err := pg.admin.ExecContext(ctx, `CREATE ROLE "`+strings.ReplaceAll(name, `"`, ``)+`" LOGIN SUPERUSER`); err != nil {
		return "", fmt.Errorf("create role %s: %w", name, err)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/cube?sslmode=disable", url.User(name).String(), pg.port), nil
}

// reachableBy gives dir to the user name (none: leave it) and lets that
// user pass through every folder above it.
func reachableBy(name, dir string) error {
	if name == "" {
		return nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o001)
		}
	}
	return nil
}

// run runs one of PostgreSQL's programs, as the postgres user when this
// process is root.
func (pg *Postgres) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := filepath.Join(pg.bin, name)
	var cmd *exec.Cmd
	if pg.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", pg.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = pg.dir
	// pg_ctl's server must outlive neither ctx nor this process's group
	// signals; it is stopped by Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Stop stops the server at once and removes nothing (the caller owns dir).
func (pg *Postgres) Stop() error {
	if pg.admin != nil {
		pg.admin.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := pg.run(ctx, "pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-m", "fast", "-w", "stop")
	if err != nil && !bytes.Contains(out, []byte("Is server running?")) {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Log is the server's log so far.
func (pg *Postgres) Log() string {
	b, _ := os.ReadFile(filepath.Join(pg.dir, "log"))
	return string(b)
}

// postgresBin finds the directory of initdb and pg_ctl.
func postgresBin(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Dir(p), nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(found) == 0 {
		return "", errors.New("PostgreSQL is not installed (no pg_ctl on PATH or in /usr/lib/postgresql/*/bin)")
	}
	return filepath.Dir(found[len(found)-1]), nil
}

// postmaster is the PID of the server's main process.
func (pg *Postgres) postmaster() (int, error) {
	b, err := os.ReadFile(filepath.Join(pg.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// clockTicks is USER_HZ, the unit of /proc's CPU times on Linux.
const clockTicks = 100

// CPU is the CPU time PostgreSQL's processes have used so far: the
// postmaster's own and that of the children it reaped (its cumulative
// times), and that of its live children (backends, background workers).
func (pg *Postgres) CPU() (time.Duration, error) {
	pid, err := pg.postmaster()
	if err != nil {
		return 0, err
	}
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	ticks := f.utime + f.stime + f.cutime + f.cstime
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if c, err := procStat(child); err == nil && c.ppid == pid {
			ticks += c.utime + c.stime
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// SelfCPU is the CPU time this process (the nodes and the workload) has
// used so far.
func SelfCPU() time.Duration {
	f, err := procStat(os.Getpid())
	if err != nil {
		return 0
	}
	return time.Duration(f.utime+f.stime) * time.Second / clockTicks
}

// HostCPU is the CPU time every process of the host has used so far
// (/proc/stat: all but idle and iowait), to tell what else ran meanwhile.
func HostCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is counted in user already
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

type procFields struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// procStat reads /proc/<pid>/stat.
func procStat(pid int) (procFields, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procFields{}, err
	}
	// The command name is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procFields{}, errors.New("bad stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 15 {
		return procFields{}, errors.New("short stat")
	}
	num := func(n int) int64 { v, _ := strconv.ParseInt(f[n-3], 10, 64); return v }
	return procFields{ppid: int(num(4)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, nil
}
