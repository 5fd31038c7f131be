// Package version holds the release identity every Cube binary reports.
package version

// Version is the Cube release. Builds may override it with
// -ldflags "-X cube/internal/version.Version=...".
var Version = "0.1.0-dev"
