package node

import (
	"context"
	"time"
)

// SetPoolShrinkAfter shortens how long a deepened warm pool keeps its
// extra sandboxes, for the test that watches it shrink; the returned
// function puts it back.
func SetPoolShrinkAfter(d time.Duration) (restore func()) {
	old := poolShrinkAfter.Swap(int64(d))
	return func() { poolShrinkAfter.Store(old) }
}

// SetFillWait changes how long a create waits for a refill under way;
// the returned function puts it back.
func SetFillWait(d time.Duration) (restore func()) {
	old := fillWait.Swap(int64(d))
	return func() { fillWait.Store(old) }
}

// DropStaleCopies runs the removal of copies of templates that are gone.
func (n *Node) DropStaleCopies(ctx context.Context) error { return n.copies.dropStaleCopies(ctx) }

// InstallEnvd is installEnvd, for tests.
var InstallEnvd = installEnvd
