#!/usr/bin/env bash
# Regenerates the Go code for the envd wire contracts in proto/ into
# internal/envd/gen. buf and both plugins are built from the Go module proxy
# at the versions pinned here, so every run produces the same code.
set -euo pipefail
cd "$(dirname "$0")/.."

BUF_VERSION=v1.50.0
PROTOC_GEN_GO_VERSION=v1.36.11        # google.golang.org/protobuf, as in go.mod
PROTOC_GEN_CONNECT_GO_VERSION=v1.21.1 # connectrpc.com/connect, as in go.mod

tools="${CUBE_PROTO_TOOLS:-$PWD/.cache/proto-tools}"
mkdir -p "$tools"
install() { GOFLAGS= GOBIN="$tools" go install "$1"; }
install "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION"
install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
install "connectrpc.com/connect/cmd/protoc-gen-connect-go@$PROTOC_GEN_CONNECT_GO_VERSION"

rm -rf internal/envd/gen
cd proto
PATH="$tools:$PATH" buf generate
