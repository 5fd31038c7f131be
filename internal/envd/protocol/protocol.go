// Package protocol is what envd and its clients must agree on: the
// protocol version, the ports, the header names and the JSON bodies both
// sides encode. It holds no behaviour beyond the file URL signature both
// sides compute, so it is the only envd package the control plane links;
// cube-server names the version SDKs see and talks to every sandbox's envd
// without carrying the agent that runs inside them.
package protocol

import "time"

// Version is the envd protocol version whose features this envd really
// implements; the control plane reports it to SDKs as envdVersion, and the
// SDKs gate features on it (0.3.0 stdin choice, 0.4.0 default user, 0.5.2
// closeStdin, 0.5.7 raw uploads, 0.6.2 file metadata, 0.6.3 entries in
// watch events, 0.6.4 watching network mounts).
const Version = "0.6.4"

// Ports inside every sandbox, where the SDKs expect them.
const (
	// EnvdPort serves the envd protocol.
	EnvdPort = 49983
	// CodePort serves the code interpreter beside envd.
	CodePort = 49999
)

// Header names envd reads or sets.
const (
	// HeaderAccessToken carries the sandbox's envd access token, the one
	// credential every route but the public ones requires.
	HeaderAccessToken = "X-Access-Token"
	// HeaderVersion answers /health and /init with Version, so a caller
	// learns which agent it reached.
	HeaderVersion = "X-Envd-Version"
)

// Init is the body of POST /init: what the control plane may set when it
// hands a sandbox out. Fields left nil or empty keep their current value,
// except EnvVars: any object, even an empty one, replaces the variables an
// earlier /init set, so it is encoded even when empty.
type Init struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    *string           `json:"accessToken,omitempty"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	// Timestamp must be newer than the last /init envd applied, so a late
	// retry cannot undo a newer token.
	Timestamp *time.Time `json:"timestamp,omitempty"`
	// CodeContextsNeedToken (a Cube extension) sets whether the code
	// interpreter's context routes require the access token; agents that
	// predate it ignore it.
	CodeContextsNeedToken *bool `json:"codeContextsNeedToken,omitempty"`
}

// Metrics is the resource usage GET /metrics reports, in E2B's field
// names.
type Metrics struct {
	Timestamp   int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// Error is the body of envd's plain-HTTP error answers, the shape the
// SDKs read; Code repeats the status.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}
