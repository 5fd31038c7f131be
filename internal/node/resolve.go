package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// The proxy asks the node, on every request, where a sandbox's port is:
// the node is its cube.Resolver.

// Resolve maps a proxied request to the sandbox port behind it. A running
// sandbox is answered from memory, since every proxied request asks; the
// store is read only for the others. Resolve changes nothing: a paused
// sandbox that may auto-resume is reported as such, with its traffic token,
// and woken by Resume once the proxy has checked the request.
func (n *Node) Resolve(ctx context.Context, sandboxID string, port int) (cube.Target, error) {
	n.mu.Lock()
	sb := n.sandboxes[sandboxID]
	if sb != nil && sb.state.running() && sb.box != nil {
		t := cube.Target{
			Addr:               net.JoinHostPort(sb.box.slot.HostAddr.String(), strconv.Itoa(port)),
			Upstream:           sb.box.sb.ID(),
			TrafficAccessToken: sb.trafficToken,
			MaskRequestHost:    sb.maskHost,
			HTTPS:              slices.Contains(sb.httpsPorts, port),
		}
		n.mu.Unlock()
		return t, nil
	}
	n.mu.Unlock()
	rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Target{}, notFound(sandboxID)
	}
	if err != nil {
		return cube.Target{}, fmt.Errorf("sandbox %q cannot be looked up: %v", sandboxID, err)
	}
	switch {
	case recordPaused(rec) && rec.PauseFilesOnly:
		return cube.Target{}, filesOnlyPaused(sandboxID)
	case recordPaused(rec) && rec.AutoResume:
		return cube.Target{Paused: true, TrafficAccessToken: rec.TrafficToken, EnvdAccessToken: rec.EnvdToken}, nil
	case !recordIn(rec, stateRunning):
		return cube.Target{}, fmt.Errorf("sandbox %q is %s", sandboxID, rec.State)
	}
	netw, err := network(rec)
	if err != nil {
		return cube.Target{}, err
	}
	return cube.Target{
		Addr:               net.JoinHostPort(rec.HostAddr, strconv.Itoa(port)),
		Upstream:           rec.ContainerID,
		TrafficAccessToken: rec.TrafficToken,
		MaskRequestHost:    netw.MaskRequestHost,
		HTTPS:              slices.Contains(netw.HTTPSPorts, port),
	}, nil
}

// Resume wakes a paused sandbox whose lifecycle allows auto-resume, for a
// proxied request the proxy has authorised, and resolves the port again.
func (n *Node) Resume(ctx context.Context, sandboxID string, port int) (cube.Target, error) {
	rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Target{}, notFound(sandboxID)
	}
	if err != nil {
		return cube.Target{}, fmt.Errorf("sandbox %q cannot be looked up: %v", sandboxID, err)
	}
	if recordPaused(rec) {
		if rec.PauseFilesOnly {
			return cube.Target{}, filesOnlyPaused(sandboxID)
		}
		if !rec.AutoResume {
			return cube.Target{}, fmt.Errorf("sandbox %q is %s", sandboxID, rec.State)
		}
		if _, _, err := n.ConnectSandbox(ctx, sandboxID, cube.ConnectRequest{Timeout: max(rec.Timeout, time.Minute)}); err != nil {
			return cube.Target{}, err
		}
	}
	t, err := n.Resolve(ctx, sandboxID, port)
	if err == nil && t.Paused {
		// Paused again before the request got through.
		return cube.Target{}, fmt.Errorf("sandbox %q is paused", sandboxID)
	}
	return t, err
}

// filesOnlyPaused is the answer to traffic for a sandbox paused without
// its memory. As E2B does, traffic does not wake it, even with auto-resume
// on: its resume is a reboot, which only an explicit request may cause.
func filesOnlyPaused(sandboxID string) error {
	return fmt.Errorf("sandbox %q is paused without its memory: traffic does not resume it; resume it with connect (Sandbox.connect)", sandboxID)
}

// FindByToken implements cube.TokenFinder over the sandboxes this node
// runs (or holds frozen in memory): from memory, since the URLs it serves
// need no key and must not cost a store query each. Checking one is a
// hash per sandbox.
func (n *Node) FindByToken(ctx context.Context, made func(token string) bool) (string, bool) {
	n.mu.Lock()
	tokens := make(map[string]string, len(n.sandboxes))
	for id, sb := range n.sandboxes {
		if sb.box != nil && sb.envdToken != "" && sb.state.inMemory() {
			tokens[id] = sb.envdToken
		}
	}
	n.mu.Unlock()
	for id, token := range tokens {
		if made(token) {
			return id, true
		}
	}
	return "", false
}
