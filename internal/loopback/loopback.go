// Package loopback picks ports on 127.0.0.1 for the services Cube's
// simulation and tests start beside it (PostgreSQL, PgBouncer), which
// must be told a port rather than choose one.
package loopback

import "net"

// FreePort is a loopback TCP port nothing listens on now. Another process
// may take it before the caller's service binds it; the services that use
// it fail to start then and say so.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
