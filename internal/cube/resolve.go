package cube

import "context"

// Resolver tells the proxy where a sandbox port lives. The node implements
// it. An unknown, dead or unreachable sandbox is an error, whose text is
// shown to the user; an unknown one is of kind NotFound.
type Resolver interface {
	// Resolve looks the sandbox up without changing it. A paused sandbox
	// whose lifecycle allows auto-resume is answered with Paused set and
	// its traffic token, so the proxy can check the request before anything
	// wakes the sandbox.
	Resolve(ctx context.Context, sandboxID string, port int) (Target, error)
	// Resume resumes a paused, auto-resumable sandbox and returns where the
	// port is reached. The proxy calls it only for a request that passed
	// the traffic-token check.
	Resume(ctx context.Context, sandboxID string, port int) (Target, error)
}

// Target is where one sandbox port is reached.
type Target struct {
	// Addr is "host:port" of the port inside the sandbox's network slot.
	// Empty when Paused.
	Addr string
	// Paused means the sandbox is paused and may be resumed by traffic:
	// Resume is to be called once the request is authorised.
	Paused bool
	// TrafficAccessToken, when non-empty, must arrive in the
	// e2b-traffic-access-token header, on every port but envd's.
	TrafficAccessToken string
	// EnvdAccessToken is the sandbox's access token, which envd checks
	// itself on its port; set when Paused, so the proxy can let a request
	// to envd that carries it wake the sandbox.
	EnvdAccessToken string
	// MaskRequestHost, when non-empty, replaces the Host header sent to the
	// sandbox; "${PORT}" in it is replaced by the port.
	MaskRequestHost string
	// HTTPS means the port's server speaks HTTPS (network.httpsPorts).
	HTTPS bool
	// Upstream names the sandbox instance behind Addr (its container).
	// Connections are pooled per Upstream and never shared across two, so
	// a kept-alive connection cannot outlive its sandbox into the next one
	// at the same address. Empty means Addr.
	Upstream string
}

// TokenFinder finds a sandbox by its envd access token, for requests
// that carry only something made with the token: a signed file URL, which
// names no sandbox when the SDK routes by header (E2B_SANDBOX_URL) rather
// than by host name. The node implements it; a Resolver without it leaves
// such URLs unrouted.
type TokenFinder interface {
	// FindByToken returns the sandbox (running or paused) whose envd
	// access token makes made true, if one does.
	FindByToken(ctx context.Context, made func(token string) bool) (sandboxID string, ok bool)
}
