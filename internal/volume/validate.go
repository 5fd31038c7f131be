package volume

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// MaxMounts bounds the volumes one sandbox mounts.
const MaxMounts = 8

// nameRE is E2B's volume name charset (letters, digits, '-' and '_')
// with a length bound, so a name is also safe in logs and CLI tables.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)

// ValidName reports whether s may name a volume.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// NameRule says what ValidName accepts, for error messages.
const NameRule = "1 to 63 letters, digits, '-' or '_'"

// idRE is the shape of the IDs NewID makes.
var idRE = regexp.MustCompile(`^vol-[a-z0-9]{20}$`)

// ValidID reports whether s has the shape of a volume ID; anything else
// is never looked up (and never becomes a path).
func ValidID(s string) bool { return idRE.MatchString(s) }

// reserved are the sandbox paths a volume may not be mounted on, nor
// under when the flag is set: the system's own trees and the agent's.
var reserved = map[string]bool{
	"/": false, "/bin": false, "/boot": false, "/etc": false, "/home": false, "/lib": false,
	"/lib32": false, "/lib64": false, "/libx32": false, "/run": false, "/sbin": false,
	"/tmp": false, "/usr": false, "/var": false, "/root": false, "/home/user": false,
	"/proc": true, "/sys": true, "/dev": true, "/.cube": true,
}

// CheckMountPath returns why p cannot be a mount point inside a sandbox,
// or nil: it must be absolute and clean, and must not shadow the root,
// the system's directories, /tmp, the user's home or the agent.
func CheckMountPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("the mount path is empty: give an absolute path such as /mnt/data")
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("mount path %q is not absolute: give an absolute path such as /mnt/data", p)
	case path.Clean(p) != p:
		return fmt.Errorf("mount path %q is not clean: write it as %q", p, path.Clean(p))
	case len(p) > 1024:
		return fmt.Errorf("mount path is longer than 1024 bytes")
	case strings.ContainsAny(p, "\x00,:"):
		return fmt.Errorf("mount path %q holds a character mounts cannot carry (NUL, ',' or ':')", p)
	}
	if _, ok := reserved[p]; ok {
		return fmt.Errorf("mount path %q would hide a directory the sandbox needs: mount under it instead (for example %s/data)", p, strings.TrimSuffix(p, "/"))
	}
	for r, subtree := range reserved {
		if subtree && strings.HasPrefix(p, r+"/") {
			return fmt.Errorf("mount path %q is inside %s, which belongs to the sandbox's kernel or agent: pick another place such as /mnt/data", p, r)
		}
	}
	return nil
}

// CheckOverlap returns why mounts at paths a and b cannot both exist in
// one sandbox (one would hide or nest in the other), or nil.
func CheckOverlap(a, b string) error {
	if a == b || strings.HasPrefix(b, a+"/") || strings.HasPrefix(a, b+"/") {
		return fmt.Errorf("mount paths %q and %q overlap: give each volume a path of its own, neither inside the other", a, b)
	}
	return nil
}
