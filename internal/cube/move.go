package cube

import "context"

// moveKey carries, through a request's context, the node a paused
// sandbox is to be taken from: a cluster resumes a sandbox of a node that
// takes no new sandboxes on another node (see node's move.go).
type moveKey struct{}

// WithMoveFrom marks ctx as a request to take the sandbox it is about
// from node, and resume it here.
func WithMoveFrom(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, moveKey{}, node)
}

// MoveFrom is the node WithMoveFrom named, or "".
func MoveFrom(ctx context.Context) string {
	s, _ := ctx.Value(moveKey{}).(string)
	return s
}
