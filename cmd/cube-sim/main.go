// Command cube-sim runs clusters of Cube nodes in one process, on
// in-memory runtimes, against a PostgreSQL server of its own, and reports
// what each size costs and what breaks first (see docs/SCALE.md).
//
//	cube-sim --nodes 1,10,50,100 --sandboxes 20000 --duration 1m -o results.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cube/internal/sim"
)

func main() {
	var (
		nodes       = flag.String("nodes", "1,10", "node counts to simulate, one cluster each, comma-separated")
		sandboxes   = flag.String("sandboxes", "2000", "live sandboxes to reach: one number for every size, or one per node count")
		duration    = flag.Duration("duration", 30*time.Second, "length of the mixed workload")
		fillTimeout = flag.Duration("fill-timeout", 10*time.Minute, "longest the creates up to --sandboxes may take; the report says how many were reached")
		concurrency = flag.Int("concurrency", 16, "clients at once")
		rateLimit   = flag.Float64("rate", 0, "operations per second of the mixed workload (0: as fast as the clients go)")
		seed        = flag.Uint64("seed", 1, "seed of every random choice")
		costOps     = flag.Int("cost-ops", 100, "creates, reads and kills of each measurement of their cost in PostgreSQL")
		idle        = flag.Duration("idle", 10*time.Second, "how long the background is measured with no workload")
		maxConns    = flag.Int("pg-max-connections", 0, "PostgreSQL's max_connections (0: its default, 100)")
		pauseShare  = flag.Float64("pause-share", 0.1, "share of live sandboxes the mixed workload keeps paused")
		drainPaused = flag.Int("drain-paused", 50, "sandboxes of the drained node paused before it is drained")
		skipLoss    = flag.Bool("skip-loss", false, "leave out the loss of a node")
		pgbouncer   = flag.Int("pgbouncer", 0, "run the nodes through a PgBouncer in transaction mode holding at most this many server connections (0: straight to PostgreSQL)")
		losses      = flag.Int("losses", 5, "nodes lost at once in the last phase, before every sandbox is accounted for (0: none)")
		skipDrain   = flag.Bool("skip-drain", false, "leave out the drain")
		dir         = flag.String("dir", "", "directory for PostgreSQL and the nodes (default: a temporary one, removed at the end)")
		logFile     = flag.String("log", "", "file for the nodes' warnings (default: discarded; they are counted in the report)")
		out         = flag.String("o", "", "also write the results as JSON to this file")
		storeParams = flag.String("store-params", "", "query parameters added to every node's --store URL, e.g. pool_max_conns=16")
		pprofAddr   = flag.String("pprof", "", "serve net/http/pprof on this loopback address (e.g. 127.0.0.1:6060), to see where the nodes spend their time")
	)
	flag.Parse()
	if *pprofAddr != "" {
		go func() {
			if err := http.ListenAndServe(*pprofAddr, nil); err != nil {
				fmt.Fprintf(os.Stderr, "cube-sim: pprof: %v\n", err)
			}
		}()
	}
	sizes, err := ints(*nodes)
	if err != nil {
		fail("--nodes: %v", err)
	}
	counts, err := ints(*sandboxes)
	if err != nil || (len(counts) != 1 && len(counts) != len(sizes)) {
		fail("--sandboxes: one number, or one per node count")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logw := os.Stderr
	var logOut *os.File
	if *logFile != "" {
		if logOut, err = os.Create(*logFile); err != nil {
			fail("%v", err)
		}
		defer logOut.Close()
	}
	var results []*sim.Result
	for i, n := range sizes {
		count := counts[0]
		if len(counts) > 1 {
			count = counts[i]
		}
		cfg := sim.Config{Nodes: n, Sandboxes: count, Duration: *duration, FillTimeout: *fillTimeout, Concurrency: *concurrency,
			Rate: *rateLimit, Seed: *seed, CostOps: *costOps, IdleWindow: *idle, MaxConnections: *maxConns, PauseShare: *pauseShare,
			DrainPaused: *drainPaused, SkipLoss: *skipLoss, Losses: *losses, PgBouncer: *pgbouncer, SkipDrain: *skipDrain, Dir: *dir, StoreParams: *storeParams,
			Progress: func(format string, args ...any) {
				fmt.Fprintf(logw, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
			}}
		if logOut != nil {
			cfg.Log = logOut
		}
		res, err := sim.Run(ctx, cfg)
		if res != nil {
			results = append(results, res)
			sim.Print(os.Stdout, []*sim.Result{res})
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cube-sim: %d nodes: %v\n", n, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Println()
	sim.PrintSummary(os.Stdout, results)
	if *out != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fail("%v", err)
		}
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cube-sim: "+format+"\n", args...)
	os.Exit(2)
}
