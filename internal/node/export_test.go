package node

import "time"

// SetPoolShrinkAfter shortens how long a deepened warm pool keeps its
// extra sandboxes, for the test that watches it shrink; the returned
// function puts it back.
func SetPoolShrinkAfter(d time.Duration) (restore func()) {
	old := poolShrinkAfter.Swap(int64(d))
	return func() { poolShrinkAfter.Store(old) }
}
