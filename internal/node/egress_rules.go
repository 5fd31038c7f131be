package node

import (
	"context"
	"errors"
	"strings"

	"cube/internal/cube"
	"cube/internal/egress"
	"cube/internal/store"
)

// egressRules is a sandbox's network.rules in the Filter's terms.
func egressRules(in map[string][]cube.NetworkRule) map[string][]egress.Rule {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string][]egress.Rule, len(in))
	for host, rules := range in {
		list := make([]egress.Rule, 0, len(rules))
		for _, r := range rules {
			list = append(list, egress.Rule{Headers: r.Headers})
		}
		out[host] = list
	}
	return out
}

// checkNetwork validates the network settings of a sandbox of team for a
// create or an update: the policy itself, a CA to intercept with when
// there are rules, and every secret the rules name, among team's own.
func (h *host) checkNetwork(team string, nw cube.Network) error {
	p := policyOf(nw)
	if err := egress.Validate(p); err != nil {
		field := "network"
		if len(nw.Rules) > 0 && strings.Contains(err.Error(), "network.rules") {
			field = "network.rules"
		}
		return cube.Errorf(cube.Invalid, "%v", err).WithField(field)
	}
	if len(nw.Rules) == 0 {
		return nil
	}
	if h.cfg.Egress == nil || h.cfg.EgressCA == nil {
		return cube.Errorf(cube.Unsupported, "network.rules: this server runs without an egress filter and CA, so rules cannot be applied").WithField("network.rules")
	}
	for _, ref := range egress.SecretRefs(p) {
		if h.cfg.Secrets == nil || !h.cfg.Secrets.Exists(sandboxTeam(team), ref.Name) {
			return cube.Errorf(cube.Invalid, "%s: secret %q does not exist: create it with POST /secrets (Secret.create) first", ref.Field, ref.Name).WithField(ref.Field)
		}
	}
	return nil
}

// sandboxTeam is the team whose secrets a sandbox's rules are filled
// with: its own. One recorded before Cube had teams is the first team's,
// as the store gives it to that team.
func sandboxTeam(team string) string {
	if team == "" {
		return cube.FirstTeam
	}
	return team
}

// Egress audit: the Filter's events go to the sandbox's log (GET
// /sandboxes/{id}/logs) through the bounded queue the node is given with
// the Filter (Config.EgressEvents), read by one writer.

// EgressAudit queues one event as the Filter does; it never blocks.
func (n *Node) EgressAudit(e egress.Event) {
	if e.Owner == "" {
		return
	}
	n.audit.q.Add(e)
}

// auditLog writes the queued events into sandbox logs.
type auditLog struct {
	h *host
	q *egress.Events
}

// run writes events until the node closes.
func (a *auditLog) run() {
	for {
		select {
		case <-a.h.ctx.Done():
			return
		case e := <-a.q.C():
			a.write(e)
		}
	}
}

// write adds e to its sandbox's log, unless the sandbox is gone or
// being removed. The last events of a sandbox come in as its kill cuts
// its connections, while the sandbox is deleted; one written after its
// log was removed would stay behind with no sandbox to remove it with.
// So an event for a sandbox that has gone by the time it is written is
// taken out again, with the rest of that sandbox's log.
func (a *auditLog) write(e egress.Event) {
	if e.Owner == "" || !a.h.auditable(e.Owner) {
		return
	}
	ctx := context.Background()
	level := "info"
	if e.Decision == egress.Denied || e.Decision == egress.Failed {
		level = "warn"
	}
	if err := a.h.store.AddEvent(ctx, e.Owner, level, e.String()); err != nil {
		a.h.log.Debug("record egress event", "sandbox", e.Owner, "err", err)
	}
	if d := a.q.Dropped(); d > 0 {
		a.h.event(e.Owner, "warn", "egress audit: %d events dropped (too many at once)", d)
	}
	if a.h.auditable(e.Owner) {
		return
	}
	// Its destroy may have removed the log before the event was added. A
	// sandbox still deleting removes its log itself, later; one whose
	// record is gone does not any more.
	if _, err := a.h.store.Sandboxes().Get(ctx, e.Owner); errors.Is(err, store.ErrNotFound) {
		if err := a.h.store.DeleteEvents(ctx, e.Owner); err != nil {
			a.h.log.Warn("delete events of a removed sandbox", "sandbox", e.Owner, "err", err)
		}
	}
}

// auditable reports whether a sandbox is on this node and not being
// removed.
func (h *host) auditable(sandboxID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	sb := h.sandboxes[sandboxID]
	return sb != nil && !sb.gone && !sb.state.deleting()
}
