package nodefake

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"cube/internal/envd/protocol"
	"cube/internal/node"
)

// InitCall is one /init the node made.
type InitCall struct {
	Host netip.Addr
	// Token is the access token handed in; OldToken authorised the call.
	Token, OldToken string
	EnvVars         map[string]string
	// Err is what the agent answered: nil when it took the token.
	Err error
}

// Agents stands for the envd of every sandbox, told apart by the host
// address the node reaches them at. Its At is a node.Config.AgentAt.
type Agents struct {
	mu     sync.Mutex
	inits  []InitCall
	asked  []netip.Addr // hosts whose /metrics was read, in order
	refuse error        // answered to every call while set
	next   []error      // answered to the next /init calls, one each
	// nextBy answers the next /init authorised by one of nextByTokens.
	nextBy       error
	nextByTokens []string
	hold         chan struct{} // while non-nil, Init waits for it to close
	entered      chan netip.Addr
}

// NewAgents returns agents that accept every /init.
func NewAgents() *Agents { return &Agents{} }

// At returns the agent of the sandbox reached at host.
func (a *Agents) At(host netip.Addr) node.Agent { return agent{a, host} }

// Refuse makes every agent refuse /init and /metrics with err, until
// Refuse(nil).
func (a *Agents) Refuse(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refuse = err
}

// RefuseNext makes the next /init, whichever agent gets it, refuse with
// err. Slots are reused, so a refusal tied to an address could hit the
// sandbox started in place of the one refused.
func (a *Agents) RefuseNext(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next = append(a.next, err)
}

// RefuseNextAuthorisedBy makes the next /init authorised by one of
// tokens (its old token) refuse with err, leaving every other /init be:
// a test can refuse the create that takes a warm sandbox its pool keyed
// ahead, and not the pool's keying of the next, which is authorised by
// the image's token.
func (a *Agents) RefuseNextAuthorisedBy(err error, tokens ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextBy, a.nextByTokens = err, slices.Clone(tokens)
}

// Hold makes every later Init wait until release is called or its
// context ends, so a test can act while a create is in flight. Each Init
// that starts waiting sends its host on entered (which holds 16).
func (a *Agents) Hold() (entered <-chan netip.Addr, release func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	hold, ch := make(chan struct{}), make(chan netip.Addr, 16)
	a.hold, a.entered = hold, ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			a.mu.Lock()
			if a.hold == hold {
				a.hold, a.entered = nil, nil
			}
			a.mu.Unlock()
			close(hold)
		})
	}
}

// Inits lists the /init calls made so far, oldest first.
func (a *Agents) Inits() []InitCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.inits)
}

type agent struct {
	a    *Agents
	host netip.Addr
}

func (g agent) Init(ctx context.Context, in protocol.Init, oldToken string) error {
	call := InitCall{Host: g.host, OldToken: oldToken, EnvVars: maps.Clone(in.EnvVars)}
	if in.AccessToken != nil {
		call.Token = *in.AccessToken
	}
	g.a.mu.Lock()
	hold, entered := g.a.hold, g.a.entered
	g.a.mu.Unlock()
	if hold != nil {
		select {
		case entered <- g.host:
		default:
		}
		select {
		case <-hold:
		case <-ctx.Done():
			call.Err = ctx.Err()
		}
	}
	g.a.mu.Lock()
	defer g.a.mu.Unlock()
	if call.Err == nil && len(g.a.next) > 0 {
		call.Err, g.a.next = g.a.next[0], g.a.next[1:]
	}
	if call.Err == nil && g.a.nextBy != nil && slices.Contains(g.a.nextByTokens, oldToken) {
		call.Err, g.a.nextBy, g.a.nextByTokens = g.a.nextBy, nil, nil
	}
	if call.Err == nil {
		call.Err = g.a.refuse
	}
	g.a.inits = append(g.a.inits, call)
	return call.Err
}

// MetricsAsked lists the hosts whose agent was asked for its metrics, in
// order.
func (a *Agents) MetricsAsked() []netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asked)
}

// Metrics reports a fixed sample: 1 MiB of a 64 MiB disk used.
func (g agent) Metrics(ctx context.Context, token string) (*protocol.Metrics, error) {
	g.a.mu.Lock()
	defer g.a.mu.Unlock()
	g.a.asked = append(g.a.asked, g.host)
	if g.a.refuse != nil {
		return nil, g.a.refuse
	}
	return &protocol.Metrics{DiskUsed: 1 << 20, DiskTotal: 64 << 20}, nil
}
