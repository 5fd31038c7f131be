package runtime

import "context"

// Work done ahead of demand (preparing containers, filling warm pools)
// competes for the host's cores with the requests it exists to speed up:
// on a small host, a container prepared while a sandbox restores slows
// that restore by a fifth. A runtime therefore runs what it starts for
// work marked Background at a low CPU priority, so that it takes the CPU
// requests leave idle, and a sandbox made so keeps that priority until it
// is promoted, when a request takes it.

type backgroundKey struct{}

// Background marks ctx, and every context derived from it, as work done
// ahead of demand.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

// InBackground reports whether ctx was marked by Background.
func InBackground(ctx context.Context) bool {
	v, _ := ctx.Value(backgroundKey{}).(bool)
	return v
}

// Promoter is a Sandbox that may have been made in the background.
// Promote gives its processes the priority of a request's before it
// serves one. A Prepared container restored with a context not marked
// Background is promoted by its Restore.
type Promoter interface {
	Promote() error
}
