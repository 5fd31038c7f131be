package cluster

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"cube/internal/store"
)

// records is a node's copy of the node records, read by changes
// (store.NodeChanges): placement and the cluster's totals read every
// node's record, and each read of this copy fetches only the records
// written since the last one. A record is written at each of its node's
// heartbeats, so a node reads at most every record once an interval
// however many creates it places; one that places nothing reads nothing.
type records struct {
	mu     sync.Mutex
	byID   map[string]*store.Node
	cursor store.Cursor
	// began is when the last read began (this host's monotonic clock).
	began time.Time
}

// nodes returns every node record, in the order of their IDs, read
// afresh unless a read began less than age ago (0: a read that began
// after this call did, shared by the calls waiting for it). The records
// are shared: callers do not change them.
func (r *Registry) nodes(ctx context.Context, age time.Duration) ([]*store.Node, error) {
	called := time.Now()
	rs := &r.records
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := r.readRecords(ctx, age, called); err != nil {
		return nil, err
	}
	out := make([]*store.Node, 0, len(rs.byID))
	for _, n := range rs.byID {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *store.Node) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// node is one node's record as nodes reads them (nil: no such node).
func (r *Registry) node(ctx context.Context, id string, age time.Duration) (*store.Node, error) {
	called := time.Now()
	rs := &r.records
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := r.readRecords(ctx, age, called); err != nil {
		return nil, err
	}
	return rs.byID[id], nil
}

// readRecords brings the copy up to date as nodes says, for a call made
// at called. The caller holds records.mu.
func (r *Registry) readRecords(ctx context.Context, age time.Duration, called time.Time) error {
	rs := &r.records
	if rs.byID != nil && (age != 0 || rs.began.After(called)) && (age <= 0 || time.Since(rs.began) < age) {
		return nil
	}
	began := time.Now()
	ch, err := r.cfg.Store.NodeChanges(ctx, rs.cursor)
	if err != nil {
		return err
	}
	if ch.Full || rs.byID == nil {
		rs.byID = make(map[string]*store.Node, len(ch.Changed))
	}
	for _, id := range ch.Gone {
		delete(rs.byID, id)
	}
	for _, n := range ch.Changed {
		rs.byID[n.ID] = n
	}
	rs.cursor, rs.began = ch.Next, began
	return nil
}
