// Package users resolves the Unix accounts envd acts as. E2B clients pick an
// account per request (root, or the unprivileged "user" that templates ship
// with); files and processes must then belong to that account, so every
// operation carries a *User from here.
package users

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// DefaultName is the unprivileged account E2B templates provide and the SDKs
// assume when they name no user.
const DefaultName = "user"

// ErrUnknown is returned for a name that has no account in this sandbox.
var ErrUnknown = errors.New("unknown user")

// User is one account, with what a process needs to run as it.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32
	Home   string
}

// RootName is the superuser's account name.
const RootName = "root"

// root is the superuser as the kernel knows it: uid 0, gid 0, home /root,
// whatever the image's account database says. Minimal images (distroless,
// scratch) ship no /etc/passwd at all, and root must work there too.
func root() *User {
	return &User{Name: RootName, UID: 0, GID: 0, Home: "/root"}
}

// Lookup finds the account called name.
func Lookup(name string) (*User, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty name", ErrUnknown)
	}
	if name == RootName {
		return root(), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("%w %q", ErrUnknown, name)
		}
		return nil, fmt.Errorf("look up user %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has gid %q: %w", name, u.Gid, err)
	}
	out := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	// Supplementary groups are best effort: a missing /etc/group must not
	// make the account unusable.
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				out.Groups = append(out.Groups, uint32(g))
			}
		}
	}
	if out.Home == "" {
		out.Home = "/"
	}
	return out, nil
}

// Current is the account envd itself runs as; root when its effective uid
// is 0, with or without an account database.
func Current() (*User, error) {
	if os.Geteuid() == 0 {
		return root(), nil
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	return Lookup(u.Username)
}

// canSwitch reports whether this process may take on other accounts.
func canSwitch() bool { return os.Geteuid() == 0 }

// Credential is what a child process of envd needs to run as u. It is nil
// when envd already is u, or cannot change identity because it does not run
// as root (as on a developer's host); the child then runs as envd does.
func (u *User) Credential() *syscall.Credential {
	if !canSwitch() || (u.UID == uint32(os.Geteuid()) && u.GID == uint32(os.Getegid())) {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
}

// Chown gives path to u when envd can change owners; otherwise the file
// stays with envd's own account.
func (u *User) Chown(path string) error {
	if !canSwitch() {
		return nil
	}
	return os.Lchown(path, int(u.UID), int(u.GID))
}

// Env is the identity part of a process environment for u.
func (u *User) Env() map[string]string {
	return map[string]string{"HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
}
