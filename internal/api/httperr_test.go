package api

import "cube/internal/httperr"

// The tests of this package pin the answers the API gives, naming the HTTP
// layer's errors and the status of each core error kind as this package
// did before httperr held them for the proxy and the forwarding too.
type Error = httperr.Error

var (
	Errorf     = httperr.Errorf
	StatusOf   = httperr.StatusOf
	kindStatus = httperr.KindStatuses()
)
