package gvisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"

	"cube/internal/runtime"
)

// Annotations record in the bundle what later runsc calls need to know
// about a sandbox after a server restart.
const (
	annWritableMB   = "dev.cube.writable-mb"
	annWritableRoot = "dev.cube.writable-root"
	annNetNS        = "dev.cube.netns"
	// annUpperTar is gVisor's own: the tar that the root overlay's
	// writable layer starts with (runsc tar rootfs-upper wrote it).
	annUpperTar = "dev.gvisor.tar.rootfs.upper"
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
	Namespaces  []ociNamespace `json:"namespaces"`
	CgroupsPath string         `json:"cgroupsPath,omitempty"`
	Resources   *ociResources  `json:"resources,omitempty"`
}

type ociResources struct {
	Memory *struct {
		Limit int64 `json:"limit"`
	} `json:"memory,omitempty"`
	CPU *struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	} `json:"cpu,omitempty"`
	Pids *struct {
		Limit int64 `json:"limit"`
	} `json:"pids,omitempty"`
}

// hostMemoryLimit is the host cgroup's cap on a sandbox with memoryMB:
// room for gVisor's own overhead above what processes inside may use.
// Reaching it kills the whole sandbox, which only a sandbox that ignores
// its in-sandbox limit (addressSpaceLimit) can do; its neighbours and the
// host are unaffected either way.
func hostMemoryLimit(memoryMB int) int64 {
	return int64(memoryMB)<<20 + int64(memoryMB)<<18 + 256<<20
}

// addressSpaceLimit is each process's RLIMIT_AS inside a sandbox with
// memoryMB: generous enough for the virtual reservations of runtimes like
// Python with numpy, small enough that an absurd allocation fails inside
// the sandbox (ENOMEM, MemoryError) instead of reaching the host's limit.
func addressSpaceLimit(memoryMB int) uint64 {
	return uint64(memoryMB)<<20 + 2<<30
}

// NprocLimit bounds the tasks inside a sandbox so a fork bomb fails with
// EAGAIN instead of exhausting the sandbox's memory.
const NprocLimit = 1024

// PidsLimit bounds the host threads of one sandbox (gVisor's sentry and
// gofer), so a fork bomb inside cannot exhaust the host's.
const PidsLimit = 4096

// resources turns the spec's limits into cgroup settings, which runsc
// applies to the sandbox's host processes; the memory limit is also the
// total memory the sandbox sees.
func resources(s runtime.Spec) *ociResources {
	r := &ociResources{}
	r.Pids = &struct {
		Limit int64 `json:"limit"`
	}{PidsLimit}
	if s.MemoryMB > 0 {
		r.Memory = &struct {
			Limit int64 `json:"limit"`
		}{hostMemoryLimit(s.MemoryMB)}
	}
	if s.CPUCount > 0 {
		r.CPU = &struct {
			Quota  int64  `json:"quota"`
			Period uint64 `json:"period"`
		}{int64(s.CPUCount) * 100000, 100000}
	}
	return r
}

// PID 1 (cube-envd) runs as root inside the sandbox and drops to the
// requested user per process, so it keeps the default container
// capabilities; gVisor's sentry, not the host kernel, enforces them.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// ociSpec is the OCI spec of s's sandbox: the bare container, with Cube's
// agent, limits and annotations around it.
func ociSpec(s runtime.Spec) ociSpecT {
	spec := bareSpec(s)
	spec.Mounts = append(spec.Mounts, ociMount{Destination: runtime.AgentMount, Type: "bind", Source: s.AgentDir, Options: []string{"rbind", "ro"}})
	spec.Mounts = append(spec.Mounts, volumeMounts(s.Mounts)...)
	spec.Annotations = map[string]string{
		annWritableMB: strconv.Itoa(s.WritableMB),
		annNetNS:      s.NetNS,
	}
	if s.WritableRoot {
		spec.Annotations[annWritableRoot] = "true"
	}
	if s.Files != "" {
		spec.Annotations[annUpperTar] = s.Files
	}
	spec.Process.Rlimits = []ociRlimit{
		{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20},
		{Type: "RLIMIT_NPROC", Hard: NprocLimit, Soft: NprocLimit},
	}
	if s.MemoryMB > 0 {
		as := addressSpaceLimit(s.MemoryMB)
		spec.Process.Rlimits = append(spec.Process.Rlimits, ociRlimit{Type: "RLIMIT_AS", Hard: as, Soft: as})
	}
	spec.Linux.CgroupsPath = "/cube/" + s.ID
	spec.Linux.Resources = resources(s)
	return spec
}

// bareSpec is the shape every Cube sandbox has (root, process, mounts,
// namespaces) without what the service adds around it.
func bareSpec(s runtime.Spec) ociSpecT {
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
		},
	}
	spec.Process.Args = s.Args
	spec.Process.Env = s.Env
	spec.Process.Cwd = cwd
	spec.Process.Capabilities = &ociCaps{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
	netns := ociNamespace{Type: "network"}
	if s.NetNS != "" {
		netns.Path = s.NetNS
	}
	spec.Linux.Namespaces = []ociNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, netns}
	return spec
}

// WriteBareBundle makes dir an OCI bundle for s: the shape of Cube's
// sandboxes (same root, mounts and namespaces) without its agent mount,
// cgroup, limits or annotations. It is what cube-bench's raw baseline
// boots, so the baseline measures gVisor alone on the sandboxes' shape.
func WriteBareBundle(dir string, s runtime.Spec) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeSpec(dir, bareSpec(s))
}

// writeSpec writes spec as the config.json of the bundle in dir.
func writeSpec(dir string, spec ociSpecT) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600)
}
