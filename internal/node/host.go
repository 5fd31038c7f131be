package node

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"cube/internal/store"
)

// host is what the node and each of its sandboxes share: the runtime,
// store and network slots, the pools new containers come from, the
// registry of sandboxes and the background work Close waits for. A
// sandbox holds it rather than the node, so that what a lifecycle method
// may reach is this and its own fields, not the node's API.
type host struct {
	cfg   Config
	log   *slog.Logger
	tel   *telemetry
	store *store.Store
	rt    Runtime
	slots Slots
	// agentDir holds the cube-envd this node boots new templates with.
	agentDir string
	agentAt  func(addr netip.Addr) Agent
	// pools hold the warm sandboxes and the prepared containers.
	pools *pools

	// mu guards sandboxes, closing and the shared fields of each sandbox.
	// It is taken after a sandbox's own lock and after the pools' lock,
	// never before either.
	mu sync.Mutex
	// sandboxes holds every sandbox of this node by ID, running, paused
	// or being created; an entry goes with its sandbox.
	sandboxes map[string]*sandbox
	// closing is set by Close: no background work starts from then on,
	// and no warm sandbox joins the pool.
	closing bool
	// deadlinesRead is when the reaper last read its sandboxes' end times
	// from the store; only the reaper's goroutine touches it.
	deadlinesRead time.Time

	// ctx ends background work (reaper, refiller, write-outs) when Close
	// cancels it; wg waits for that work.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// closed reports whether Close has begun.
func (h *host) closed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closing
}
