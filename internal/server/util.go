package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"cube/internal/store"
)

// lockDataDir makes sure only one server uses a data directory: two would
// each take the other's sandboxes for leftovers of a crash. The lock is
// asked for again for up to lockWait: a server killed while it was
// starting a process leaves the lock's descriptor in that child until the
// child's exec closes it, so a restart right after a crash can find it
// held for a moment by a server that is already gone.
func lockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	for deadline := time.Now().Add(lockWait); ; time.Sleep(50 * time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another cube-server is using %s: stop it first, or choose another --data-dir", dir)
		}
	}
}

// lockWait is how long lockDataDir waits for a held lock.
const lockWait = 2 * time.Second

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("--host-cidr %q: %v", s, err)
	}
	return p, nil
}

// checkPrivate refuses a data directory that other users can read, write
// or enter: it holds the API key, every sandbox's memory image and the
// unpacked template file systems.
func checkPrivate(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %v: choose another with --data-dir", dir, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("data dir %s is mode %04o, open to other users (it holds the API key and sandbox memory images): run `chmod 700 %s`, or choose another with --data-dir", dir, perm, dir)
	}
	return nil
}

// privateSubdirs closes the data directory's top-level folders (made
// by older versions or by hand) to other users. The folders inside them,
// such as a template's rootfs, keep their own modes: sandboxes see those.
func privateSubdirs(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Chmod(p, 0o700); err != nil {
			return fmt.Errorf("make %s private: %w", p, err)
		}
	}
	return nil
}

// openStore opens the state database o names: the SQLite file in the data
// directory, or a PostgreSQL database shared with other nodes, on which
// this server then claims its node name; lost is called if another server
// takes the claim.
func openStore(ctx context.Context, o Options, nodeName string, lost func(error)) (*store.Store, error) {
	if o.Store == "" {
		return store.Open(filepath.Join(o.DataDir, "state.db"))
	}
	if !store.IsURL(o.Store) {
		return nil, fmt.Errorf("--store %q: want a postgres:// URL, or nothing for %s", o.Store, filepath.Join(o.DataDir, "state.db"))
	}
	if len(o.ClusterSecret) < 16 {
		return nil, errors.New("--store postgres://… makes this server a node of a cluster: give every node the same cluster secret (--cluster-secret-file, or $CUBE_CLUSTER_SECRET) of at least 16 characters, e.g. from `openssl rand -hex 32`")
	}
	st, err := store.OpenPostgres(ctx, o.Store)
	if err != nil {
		return nil, err
	}
	if err := st.Claim(ctx, nodeName, lost); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}
