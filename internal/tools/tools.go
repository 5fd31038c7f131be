//go:build tools

// Package tools pins, in go.mod, the modules Cube builds programs from or
// that packages not yet written will import, so every build resolves the
// same versions. `make build` compiles gVisor's runsc from the version
// pinned here.
package tools

import (
	_ "connectrpc.com/connect"
	_ "github.com/go-zeromq/zmq4"
	_ "github.com/google/go-containerregistry/pkg/v1/remote"
	_ "github.com/google/nftables"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "github.com/vishvananda/netlink"
	_ "google.golang.org/protobuf/proto"
	_ "gvisor.dev/gvisor/runsc"
	_ "modernc.org/sqlite"
)
