// Package bench measures a running Cube server the way its users meet it:
// create, snapshot, rollback, clone and pause/resume latencies through the
// E2B API, and host memory per idle sandbox. Beside each it measures raw
// runsc on the same rootfs, driven as the server drives it, so every table
// says what the service adds on top of gVisor itself. It exists so that
// docs/BENCHMARKS.md is made of measurements rerun on demand (cmd/cube-bench,
// scripts/bench.sh) rather than of claims.
package bench
