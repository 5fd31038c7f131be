// Command cube-bench benchmarks an E2B-compatible sandbox service: the
// create/delete load test of the CubeSandbox performance report, its
// snapshot, rollback, clone and pause/resume measurements, memory density,
// and the raw gVisor baseline beside them. See internal/bench.
package main

import (
	"fmt"
	"os"

	"cube/internal/bench"
)

func main() {
	if err := bench.NewCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "cube-bench:", err)
		os.Exit(1)
	}
}
