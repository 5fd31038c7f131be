package node

import "errors"

// cleanup collects the undo of each step of a multi-step operation, so a
// failure half-way leaves nothing behind: every step that takes something
// (a slot, a container, a record, a directory) registers how to give it
// back, and the operation either releases them all on success or runs
// them, newest first, on failure.
//
//	var c cleanup
//	defer c.Clean()
//	... c.Add(func() error { return n.slots.Release(slot) }) ...
//	c.Release()
//	return nil
//
// A deferred Clean after Release does nothing.
type cleanup struct{ undo []func() error }

// Add registers the undo of a step that just succeeded.
func (c *cleanup) Add(f func() error) { c.undo = append(c.undo, f) }

// Release keeps what the steps made: the operation succeeded.
func (c *cleanup) Release() { c.undo = nil }

// Clean undoes the registered steps newest first, every one of them even
// when some fail, and returns their errors joined.
func (c *cleanup) Clean() error {
	var errs []error
	for i := len(c.undo) - 1; i >= 0; i-- {
		if err := c.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.undo = nil
	return errors.Join(errs...)
}
