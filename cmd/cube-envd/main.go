// Command cube-envd is the agent inside every Cube sandbox, normally its
// PID 1. It serves the E2B envd protocol, runs the template's start command,
// reaps orphaned processes and passes SIGTERM on to its children.
//
//	cube-envd [--port 49983] [--code-port 49999] [--code-contexts-need-token]
//	          [--start-user NAME] [--start-cwd DIR] [-- start command args...]
//
// The environment it is started with is the template's ENV; the start
// command and every process started through envd inherit it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"cube/internal/envd"
	"cube/internal/envd/codeinterp"
	"cube/internal/envd/protocol"
	"cube/internal/envd/reap"
	"cube/internal/envd/startcmd"
	"cube/internal/envd/users"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cube-envd:", err)
		os.Exit(1)
	}
}

func run() error {
	port := flag.Int("port", protocol.EnvdPort, "port of the envd protocol")
	codePort := flag.Int("code-port", protocol.CodePort, "port of the code interpreter (0: off)")
	contextsNeedToken := flag.Bool("code-contexts-need-token", false,
		"require the access token on the code interpreter's context routes too (@e2b/code-interpreter up to 2.8.0 sends none there)")
	startUser := flag.String("start-user", "", "account the start command runs as (default: envd's own)")
	startCwd := flag.String("start-cwd", "", "working directory of the start command (default: the user's home)")
	showVersion := flag.Bool("version", false, "print the envd protocol version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(protocol.Version)
		return nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Orphans are re-parented to envd (as PID 1, or as a subreaper on a
	// host), and the reaper collects every one of them.
	if os.Getpid() != 1 {
		if err := reap.BecomeSubreaper(); err != nil {
			log.Warn("cannot become a subreaper; orphans go to the host's init", "err", err)
		}
	}
	reaper := reap.New()
	go reaper.Run(ctx)

	if os.Geteuid() == 0 {
		created, err := users.Ensure("/", users.DefaultName, "/home/"+users.DefaultName)
		if err != nil {
			log.Warn("cannot create the default user", "user", users.DefaultName, "err", err)
		} else if created {
			log.Info("created the default user", "user", users.DefaultName)
		}
	}

	srv, err := envd.New(envd.Options{Env: os.Environ(), Reaper: reaper, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	httpSrv := srv.HTTPServer(ln.Addr().String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	log.Info("envd serving", "addr", ln.Addr().String(), "version", protocol.Version, "pid", os.Getpid())

	// The code interpreter listens beside envd and warms its default
	// Python kernel at once, so a template snapshot holds a ready kernel.
	if *codePort > 0 {
		srv.State.SetContextsNeedToken(*contextsNeedToken)
		ci := codeInterpreter(srv, reaper, log)
		ciLn, err := net.Listen("tcp", ":"+strconv.Itoa(*codePort))
		if err != nil {
			return err
		}
		ciSrv := &http.Server{Handler: ci.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go ciSrv.Serve(ciLn)
		ci.Start(ctx)
		defer ci.Close()
		log.Info("code interpreter serving", "addr", ciLn.Addr().String())
	}

	if args := flag.Args(); len(args) > 0 {
		if _, err := startcmd.Start(startcmd.Config{Args: args, User: *startUser, Dir: *startCwd, Env: os.Environ()}, reaper, log); err != nil {
			// The sandbox stays reachable so the failure can be inspected.
			log.Error("start command failed", "err", err)
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-serveErr:
		return err
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String())
	}

	// Pass the signal on and give children a moment to finish before the
	// sandbox goes away with them.
	reaper.SignalAll(syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for reaper.Running() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("shutdown", "err", err)
	}
	srv.Close()
	return nil
}

// codeInterpreter is the code interpreter served beside envd. It reads the
// sandbox's environment from envd and takes the same access token as envd
// on every route but its health probe and, unless envd's state says they
// need it (state.ContextsNeedToken), the context routes, which the
// official SDKs call without the token.
func codeInterpreter(srv *envd.Server, reaper *reap.Reaper, log *slog.Logger) *codeinterp.Server {
	return codeinterp.New(codeinterp.Options{
		Env:        srv.State.Env,
		DefaultCwd: "/home/" + users.DefaultName,
		Authorize: func(r *http.Request) bool {
			return srv.State.Authorized(r.Header.Get(protocol.HeaderAccessToken))
		},
		ContextsOpen: func() bool { return !srv.State.ContextsNeedToken() },
		Logger:       log,
		Spawn: func(c *exec.Cmd) (func() syscall.WaitStatus, error) {
			ch, err := reaper.Start(c)
			if err != nil {
				return nil, err
			}
			return ch.Wait, nil
		},
	})
}
