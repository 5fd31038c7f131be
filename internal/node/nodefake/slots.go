package nodefake

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"cube/internal/netslot"
)

// Slots is a node.Slots of a fixed number of indices that exist only in
// memory. Like netslot.Pool it hands out the lowest free index, fails
// with netslot.ErrExhausted when every index is held, and after a restart
// leaves the slots of the previous run (Crash) alone until Adopt takes
// one over or Reconcile removes it.
type Slots struct {
	mu       sync.Mutex
	size     int
	held     map[int]*netslot.Slot // handed out by Acquire or Adopt, with the handle given
	leftover map[int]bool          // of a previous run, neither held nor removed
	fail     map[string]error
}

// NewSlots returns a pool of size slots, none in use.
func NewSlots(size int) *Slots {
	return &Slots{size: size, held: map[int]*netslot.Slot{}, leftover: map[int]bool{}, fail: map[string]error{}}
}

// Fail makes every later call of op ("acquire", "release", "adopt",
// "reconcile") fail with err, until Fail(op, nil).
func (p *Slots) Fail(op string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.fail, op)
		return
	}
	p.fail[op] = err
}

func (p *Slots) failing(op string) error {
	if err := p.fail[op]; err != nil {
		return fmt.Errorf("fake slots: %s: %w", op, err)
	}
	return nil
}

// Crash is what a new pool finds after the server died: every held slot
// is still on the host, but no longer held.
func (p *Slots) Crash() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.held {
		p.leftover[i] = true
	}
	clear(p.held)
}

// Held returns the indices handed out, sorted.
func (p *Slots) Held() []int {
	return p.sorted(func() map[int]bool {
		m := map[int]bool{}
		for i := range p.held {
			m[i] = true
		}
		return m
	})
}

// Leftovers returns the indices of a previous run not yet adopted or
// removed, sorted.
func (p *Slots) Leftovers() []int { return p.sorted(func() map[int]bool { return p.leftover }) }

func (p *Slots) sorted(set func() map[int]bool) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []int{}
	for i := range set() {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// Slot is the slot of index i: made-up namespace paths and a loopback
// host address nothing listens on.
func Slot(i int) *netslot.Slot {
	j := i + 1
	return &netslot.Slot{
		Index:        i,
		NetNS:        fmt.Sprintf("/run/netns/fake-s%d", i),
		GatewayNetNS: fmt.Sprintf("/run/netns/fake-g%d", i),
		HostAddr:     netip.AddrFrom4([4]byte{127, 77, byte(j >> 8), byte(j)}),
		HostPeer:     netip.AddrFrom4([4]byte{127, 78, byte(j >> 8), byte(j)}),
		HostIf:       fmt.Sprintf("fake-h%d", i),
	}
}

func (p *Slots) Acquire(ctx context.Context) (*netslot.Slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failing("acquire"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := 0; i < p.size; i++ {
		if p.held[i] == nil && !p.leftover[i] {
			p.held[i] = Slot(i)
			return p.held[i], nil
		}
	}
	return nil, netslot.ErrExhausted
}

func (p *Slots) Release(s *netslot.Slot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failing("release"); err != nil {
		return err
	}
	if s == nil || p.held[s.Index] == nil {
		return fmt.Errorf("fake slots: release of a slot not in use: %v", s)
	}
	if p.held[s.Index] != s {
		// As netslot.Pool: a stale handle must not free another's slot.
		return fmt.Errorf("fake slots: release of slot %d through a handle it was not handed out with", s.Index)
	}
	delete(p.held, s.Index)
	return nil
}

// Adopt takes over a slot of the previous run.
func (p *Slots) Adopt(index int) (*netslot.Slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failing("adopt"); err != nil {
		return nil, err
	}
	if p.held[index] != nil {
		return nil, fmt.Errorf("fake slots: adopt slot %d: already held", index)
	}
	if !p.leftover[index] {
		return nil, fmt.Errorf("fake slots: adopt slot %d: not on the host", index)
	}
	delete(p.leftover, index)
	p.held[index] = Slot(index)
	return p.held[index], nil
}

// Describe names the fake slot; it has no network to describe.
func (p *Slots) Describe(s *netslot.Slot) string { return fmt.Sprintf("fake slot %d", s.Index) }

// Reconcile removes the leftovers not in inUse and names what it removed.
func (p *Slots) Reconcile(inUse map[int]bool) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failing("reconcile"); err != nil {
		return nil, err
	}
	var removed []string
	for i := range p.leftover {
		if !inUse[i] {
			delete(p.leftover, i)
			removed = append(removed, Slot(i).HostIf)
		}
	}
	slices.Sort(removed)
	return removed, nil
}
