// Command cube-console is the console keeper cube-server starts for each
// sandbox (see internal/runtime/gvisor/keeper): a small process of its
// own, so that a sandbox's output keeps draining while the server
// restarts.
package main

import (
	"fmt"
	"os"

	"cube/internal/runtime/gvisor/keeper"
)

func main() {
	dir := os.Getenv(keeper.Env)
	if dir == "" {
		fmt.Fprintln(os.Stderr, "cube-console: cube-server starts this, one per sandbox; it is not run by hand")
		os.Exit(2)
	}
	os.Exit(keeper.Keep(dir, 3))
}
