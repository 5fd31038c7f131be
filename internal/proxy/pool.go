package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// Pool is the proxy's connections to sandboxes, a pool per upstream (a
// sandbox's container). It is its own part, made before the node and
// given to it, because the node must tell it when a container stops and
// the proxy, which resolves sandboxes through the node, is made after.
type Pool struct {
	dialer *net.Dialer

	mu         sync.Mutex
	transports map[string]*http.Transport // by Target.Upstream
	// active holds the cancel function of every request in flight, by
	// upstream, so Forget can end them.
	active map[string]map[*context.CancelFunc]struct{}
}

// NewPool returns an empty pool whose connections take at most
// dialTimeout to open; 0 means 10s.
func NewPool(dialTimeout time.Duration) *Pool {
	if dialTimeout <= 0 {
		dialTimeout = 10 * time.Second
	}
	return &Pool{
		dialer:     &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		transports: map[string]*http.Transport{},
		active:     map[string]map[*context.CancelFunc]struct{}{},
	}
}

// Forget drops the connection pool of one upstream. The node calls it
// when a sandbox container stops: its network slot, and so its address,
// goes to the next sandbox. Other sandboxes' connections are untouched.
//
// Requests in flight to it end too: a stream from a sandbox that is gone
// (a command's output when the sandbox is killed) would otherwise wait on
// a connection whose other end vanished with its network namespace, with
// no reset to end it, until a timeout far away.
func (p *Pool) Forget(upstream string) {
	p.mu.Lock()
	tr := p.transports[upstream]
	delete(p.transports, upstream)
	inFlight := p.active[upstream]
	delete(p.active, upstream)
	p.mu.Unlock()
	for cancel := range inFlight {
		(*cancel)()
	}
	if tr != nil {
		tr.CloseIdleConnections()
	}
}

// track registers a request in flight to upstream, cancelled by cancel;
// the returned function unregisters it.
func (p *Pool) track(upstream string, cancel context.CancelFunc) (untrack func()) {
	key := &cancel
	p.mu.Lock()
	if p.active[upstream] == nil {
		p.active[upstream] = map[*context.CancelFunc]struct{}{}
	}
	p.active[upstream][key] = struct{}{}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if set := p.active[upstream]; set != nil {
			delete(set, key)
			if len(set) == 0 {
				delete(p.active, upstream)
			}
		}
		p.mu.Unlock()
	}
}

// transport returns the connection pool of one upstream.
func (p *Pool) transport(upstream string) *http.Transport {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr, ok := p.transports[upstream]
	if !ok {
		tr = &http.Transport{
			// Never the environment's HTTP proxy: the target is a local slot.
			Proxy:                 nil,
			DialContext:           p.dialer.DialContext,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			DisableCompression:    true,
			ExpectContinueTimeout: time.Second,
			// For ports the sandbox serves over HTTPS (network.httpsPorts):
			// as E2B does, certificates are not checked, since a
			// sandbox's own are self-signed as often as not; the
			// connection never leaves the host.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		}
		p.transports[upstream] = tr
	}
	return tr
}
