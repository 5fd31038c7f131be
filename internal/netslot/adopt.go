// Taking slots back after a restart: adopting the ones running sandboxes
// still use and removing the rest.

package netslot

import (
	"errors"
	"fmt"
	"slices"
)

// Adopt takes over slot index, still used by a sandbox that survived a
// restart of the server. The slot netns is left exactly as it is (runsc
// owns it); the host link and the gateway's addresses, route and NAT
// table are restored if something is missing. Other nftables tables in
// the gateway (policy) and tracked connections are kept.
func (p *Pool) Adopt(index int) (*Slot, error) {
	if index < 0 || index >= p.cfg.Size {
		return nil, fmt.Errorf("netslot: adopt slot %d: out of range 0..%d", index, p.cfg.Size-1)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if _, ok := p.owned[index]; ok {
		p.mu.Unlock()
		return nil, fmt.Errorf("netslot: adopt slot %d: already held by this pool", index)
	}
	p.owned[index] = stArming
	p.mu.Unlock()

	s := p.slot(index)
	err := func() error {
		for _, name := range []string{slotNetnsName(p.cfg.Prefix, index), gwNetnsName(p.cfg.Prefix, index)} {
			if !netnsExists(name) {
				return fmt.Errorf("netslot: adopt slot %d: netns %s does not exist", index, name)
			}
		}
		h, err := openNS("", s.GatewayNetNS)
		if err != nil {
			return err
		}
		defer h.close()
		if err := p.armHost(s); err != nil {
			return err
		}
		return p.armGateway(s, h, false)
	}()

	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.notify()
	if err != nil {
		delete(p.owned, index)
		return nil, err
	}
	s = p.lease(index)
	delete(p.foreign, index)
	p.log.Info("adopted slot", "slot", index, "host_addr", s.HostAddr.String())
	return s, nil
}

// Reconcile removes every object of this prefix on the host (slot and
// gateway netns, host veth; the gateway's nftables tables go with its
// netns) whose index is neither in inUse nor held by the pool: the
// leftovers of a crash. In-use indices are kept for Adopt. It returns the
// names it removed and logs each decision.
func (p *Pool) Reconcile(inUse map[int]bool) (removed []string, err error) {
	found, err := p.scan()
	if err != nil {
		return nil, err
	}
	indices := make([]int, 0, len(found))
	for i := range found {
		indices = append(indices, i)
	}
	slices.Sort(indices)
	var errs []error
	for _, i := range indices {
		names := found[i]
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return removed, ErrClosed
		}
		if _, held := p.owned[i]; held {
			p.mu.Unlock()
			continue
		}
		if inUse[i] {
			p.foreign[i] = true
			p.mu.Unlock()
			p.log.Info("reconcile: kept slot in use", "slot", i, "objects", names)
			continue
		}
		p.owned[i] = stCleaning
		p.mu.Unlock()

		terr := p.teardown(i)

		p.mu.Lock()
		delete(p.owned, i)
		if terr != nil {
			p.foreign[i] = true
		} else {
			delete(p.foreign, i)
		}
		p.notify()
		p.mu.Unlock()
		if terr != nil {
			p.log.Error("reconcile: could not remove leftover slot", "slot", i, "objects", names, "err", terr)
			errs = append(errs, terr)
			continue
		}
		p.log.Info("reconcile: removed leftover slot", "slot", i, "objects", names)
		removed = append(removed, names...)
	}
	// Indices held back at start whose objects have gone since are free.
	p.mu.Lock()
	for i := range p.foreign {
		if _, ok := found[i]; !ok && len(p.existing(i)) == 0 {
			delete(p.foreign, i)
			p.log.Info("reconcile: slot of a previous run is gone", "slot", i)
		}
	}
	p.notify()
	p.mu.Unlock()
	p.wakeWarmer()
	return removed, errors.Join(errs...)
}
