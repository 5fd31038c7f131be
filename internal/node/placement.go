package node

import (
	"context"
	"sync"
	"time"

	"cube/internal/store"
)

// placementAge is how old the template record a create is placed by may
// be. Placement reads only where the template's files are and how much
// memory it asks for; the create itself reads the record afresh on the
// node that makes it. A burst of creates of one template (the rollouts
// of a training step) then reads it once a second to place them, not
// once each.
const placementAge = time.Second

// placementTemplates remembers the template records placements read.
type placementTemplates struct {
	mu   sync.Mutex
	seen map[[2]string]placementRead
}

type placementRead struct {
	t  *store.Template
	at time.Time
}

// PlacementTemplate is TeamTemplate for placing a create: a record read
// at most placementAge ago will do. The record is shared: callers do not
// change it.
func (n *Node) PlacementTemplate(ctx context.Context, team, idOrAlias string) (*store.Template, error) {
	key := [2]string{team, idOrAlias}
	pt := &n.placement
	pt.mu.Lock()
	r, ok := pt.seen[key]
	pt.mu.Unlock()
	if ok && time.Since(r.at) < placementAge {
		return r.t, nil
	}
	t, err := n.TeamTemplate(ctx, team, idOrAlias)
	if err != nil {
		return nil, err
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.seen == nil || len(pt.seen) >= 1024 {
		pt.seen = map[[2]string]placementRead{}
	}
	pt.seen[key] = placementRead{t: t, at: time.Now()}
	return t, nil
}
