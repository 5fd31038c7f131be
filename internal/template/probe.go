package template

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"cube/internal/envdclient"
)

// Probe returns the readiness check of a build: HTTP GET
// http://<addr>:<port><path> until it answers 2xx, for at most timeout.
// Its error names the URL and the last answer or failure seen. Envd's own
// health is asked through its client, like every other call to envd.
func Probe(port int, path string, timeout time.Duration) func(ctx context.Context, addr netip.Addr) error {
	return func(ctx context.Context, addr netip.Addr) error {
		url := "http://" + net.JoinHostPort(addr.String(), strconv.Itoa(port)) + path
		check := envdclient.At(envdclient.NoKeepAlive, addr).Health
		if port != DefaultProbePort || path != DefaultProbePath {
			// Never through a proxy: the address is a local network slot.
			client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
			check = func(ctx context.Context) error { return envdclient.Probe(ctx, client, url) }
		}
		deadline := time.Now().Add(timeout)
		var last error
		for attempt := 0; ; attempt++ {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			last = check(actx)
			cancel()
			if last == nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !time.Now().Before(deadline) {
				return fmt.Errorf("probe: GET %s got no 2xx answer within %s (last: %w): check that the start command serves HTTP on port %d (--probe) and answers 2xx on %s (--probe-path)", url, timeout, last, port, path)
			}
			wait := min(time.Duration(50<<min(attempt, 4))*time.Millisecond, 500*time.Millisecond, time.Until(deadline))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(max(wait, 0)):
			}
		}
	}
}

// readiness is the probe of a build's template: envd answers, then the
// ready command, if any, exits 0.
func readiness(readyCmd string, st *stepState, timeout, envdTimeout time.Duration) func(ctx context.Context, addr netip.Addr) error {
	envd := Probe(DefaultProbePort, DefaultProbePath, envdTimeout)
	env := envMap(st.env)
	return func(ctx context.Context, addr netip.Addr) error {
		if err := envd(ctx, addr); err != nil {
			return err
		}
		if readyCmd == "" {
			return nil
		}
		deadline := time.Now().Add(timeout)
		for {
			var out strings.Builder
			actx, cancel := context.WithDeadline(ctx, deadline)
			err := runIn(actx, addr, st.user, st.workdir, env, readyCmd, &out)
			cancel()
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !time.Now().Before(deadline) {
				return fmt.Errorf("the ready command %q did not succeed within %s (last: %v %s)", readyCmd, timeout, err, strings.TrimSpace(out.String()))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}
