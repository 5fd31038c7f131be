#!/usr/bin/env bash
# The whole Cube test suite, in the order that fails fastest: unit tests,
# then tests that drive real gVisor sandboxes (root), then the end-to-end
# suite through the official SDKs.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-mod=mod
export CUBE_BIN_DIR="$PWD/bin"

echo "== go vet"
go vet ./...

echo "== unit and integration tests"
go test -count=1 -timeout 30m ./...
