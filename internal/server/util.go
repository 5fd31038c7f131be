package server

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir makes sure only one server uses a data directory: two would
// each take the other's sandboxes for leftovers of a crash.
func lockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another cube-server is using %s: stop it first, or choose another --data-dir", dir)
	}
	return func() { f.Close() }, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("--host-cidr %q: %v", s, err)
	}
	return p, nil
}
