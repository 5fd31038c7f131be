// Package startcmd runs a template's own start command (the image's
// ENTRYPOINT and CMD, or the command given at template build) beside envd.
// envd supervises it only in the sense of logging its exit: the sandbox
// stays usable when the command ends, since clients may still want to look
// at what it left behind.
package startcmd

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"

	"cube/internal/envd/reap"
	"cube/internal/envd/users"
)

// Config describes the command.
type Config struct {
	Args []string // program and arguments; Args[0] is looked up on PATH
	User string   // account to run as; empty for envd's own
	Dir  string   // working directory; empty for the user's home
	Env  []string // the template's environment
}

// Start launches the command, its output going to envd's own stdout and
// stderr (the sandbox log), and returns a channel closed when it has exited.
func Start(cfg Config, reaper *reap.Reaper, log *slog.Logger) (<-chan struct{}, error) {
	if len(cfg.Args) == 0 {
		return nil, fmt.Errorf("empty start command")
	}
	var u *users.User
	var err error
	if cfg.User != "" {
		u, err = users.Lookup(cfg.User)
	} else {
		u, err = users.Current()
	}
	if err != nil {
		return nil, fmt.Errorf("start command user: %w", err)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = u.Home
		// Service accounts often name a home that does not exist.
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			dir = "/"
		}
	}
	env := append([]string(nil), cfg.Env...)
	// An explicit user brings its own identity; otherwise the template's
	// values stand and only missing ones are filled in. (os/exec keeps the
	// last of duplicate keys.)
	for k, v := range u.Env() {
		if cfg.User != "" || !has(env, k) {
			env = append(env, k+"="+v)
		}
	}
	path := cfg.Args[0]
	if lp, err := exec.LookPath(path); err == nil {
		path = lp
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   cfg.Args,
		Env:    env,
		Dir:    dir,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Credential: u.Credential(),
			Setpgid:    true,
		},
	}
	child, err := reaper.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("start command %q: %w", cfg.Args[0], err)
	}
	pid := child.Pid()
	log.Info("start command running", "pid", pid, "args", cfg.Args, "user", u.Name, "dir", dir)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ws := child.Wait()
		log.Warn("start command exited; envd keeps serving", "pid", pid, "status", describe(ws))
	}()
	return done, nil
}

func has(env []string, key string) bool {
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
			return true
		}
	}
	return false
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}
