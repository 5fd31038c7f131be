package gvisor

import (
	"strconv"

	"cube/internal/runtime"
)

// Annotations record in the bundle what later runsc calls need to know
// about a sandbox after a server restart.
const (
	annWritableMB = "dev.cube.writable-mb"
	annNetNS      = "dev.cube.netns"
)

// The OCI runtime spec, reduced to the fields Cube sets.
type ociSpecT struct {
	OCIVersion  string            `json:"ociVersion"`
	Process     ociProcess        `json:"process"`
	Root        ociRoot           `json:"root"`
	Hostname    string            `json:"hostname,omitempty"`
	Mounts      []ociMount        `json:"mounts"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Linux       ociLinux          `json:"linux"`
}

type ociProcess struct {
	User struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	} `json:"user"`
	Args         []string    `json:"args"`
	Env          []string    `json:"env,omitempty"`
	Cwd          string      `json:"cwd"`
	Capabilities *ociCaps    `json:"capabilities,omitempty"`
	Rlimits      []ociRlimit `json:"rlimits,omitempty"`
	NoNewPrivs   bool        `json:"noNewPrivileges,omitempty"`
}

type ociCaps struct {
	Bounding  []string `json:"bounding"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

type ociLinux struct {
	Namespaces []ociNamespace `json:"namespaces"`
}

// PID 1 (cube-envd) runs as root inside the sandbox and drops to the
// requested user per process, so it keeps the default container
// capabilities; gVisor's sentry, not the host kernel, enforces them.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

func ociSpec(s runtime.Spec) ociSpecT {
	cwd := s.Cwd
	if cwd == "" {
		cwd = "/"
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = "cube"
	}
	spec := ociSpecT{
		OCIVersion: "1.0.2",
		// The root is writable through gVisor's overlay; the host directory
		// underneath is only ever read.
		Root:     ociRoot{Path: s.Rootfs, Readonly: false},
		Hostname: hostname,
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: runtime.AgentMount, Type: "bind", Source: s.AgentDir, Options: []string{"rbind", "ro"}},
		},
		Annotations: map[string]string{
			annWritableMB: strconv.Itoa(s.WritableMB),
			annNetNS:      s.NetNS,
		},
	}
	spec.Process.Args = s.Args
	spec.Process.Env = s.Env
	spec.Process.Cwd = cwd
	spec.Process.Capabilities = &ociCaps{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
	spec.Process.Rlimits = []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}}
	netns := ociNamespace{Type: "network"}
	if s.NetNS != "" {
		netns.Path = s.NetNS
	}
	spec.Linux.Namespaces = []ociNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, netns}
	return spec
}
