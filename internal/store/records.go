package store

import (
	"encoding/json"
	"time"
)

// SandboxState is where a sandbox is in its lifecycle. The transitional
// states are written before the node acts so a crash mid-way is visible.
// These names are what data directories and a cluster's shared store
// hold, and nodes of other versions read them, so they never change and
// none is added lightly (see PauseState).
type SandboxState string

const (
	Creating SandboxState = "creating"
	Running  SandboxState = "running"
	// Paused is each of the paused states; Sandbox.Pause says which.
	Paused   SandboxState = "paused"
	Resuming SandboxState = "resuming"
	Killing  SandboxState = "killing"
)

// PauseState is which of the paused states a sandbox is in.
//
// It is a field of its own rather than more SandboxState names because
// nodes of different versions share one store: a node that does not know
// a state name removes the sandbox as one it cannot handle (files and
// record), so a new name in State would have older nodes delete every
// paused sandbox they reconcile. They read State "paused" for all three
// and ignore Pause, telling the three apart by the record's fields as
// they always did; those fields stay as they were for that reason. An
// older node that rewrites a record drops Pause, and such a record is
// read as the state its fields show (see UnmarshalJSON).
type PauseState string

const (
	// PauseFrozen: paused in memory, the record naming its container.
	PauseFrozen PauseState = "frozen"
	// PauseWritingOut: being checkpointed to disk, the record naming the
	// image in flight (PauseImageTarget).
	PauseWritingOut PauseState = "writing-out"
	// PauseOnDisk: only its image (PauseImage) remains.
	PauseOnDisk PauseState = "on-disk"
)

// Sandbox is the persisted record of one sandbox.
type Sandbox struct {
	ID string `json:"id"`
	// Team owns the sandbox: no other team's key sees or touches it.
	Team        string       `json:"team,omitempty"`
	TemplateID  string       `json:"templateId"`
	Alias       string       `json:"alias,omitempty"`
	State       SandboxState `json:"state"`
	ContainerID string       `json:"containerId"` // runsc container; changes on rollback and resume
	Slot        int          `json:"slot"`        // network slot index, -1 when none
	HostAddr    string       `json:"hostAddr,omitempty"`
	// Pause is which paused state a paused sandbox is in; empty in the
	// other states.
	Pause PauseState `json:"pause,omitempty"`
	// Node is the node that runs the sandbox (its container, slot and
	// files are on that host). Empty in records written before nodes
	// shared a store: the node that reconciles one first takes it.
	Node string `json:"node,omitempty"`

	CreatedAt time.Time `json:"createdAt"`
	StartedAt time.Time `json:"startedAt"`
	EndAt     time.Time `json:"endAt"`
	// Timeout is the lifetime asked for at creation; an auto-resume grants
	// it again.
	Timeout time.Duration `json:"timeout,omitempty"`
	// PausedAt is set while paused; time paused does not count against the timeout.
	PausedAt time.Time `json:"pausedAt,omitzero"`
	// RunningSince is when the sandbox last started running (created,
	// forked, resumed), set while it runs: the open end of its usage, whose
	// closed stretches are rows of the usage table (usage.go). Zero in
	// the other states, and in records written before usage was kept.
	RunningSince time.Time `json:"runningSince,omitzero"`

	CPUCount   int `json:"cpuCount"`
	MemoryMB   int `json:"memoryMB"`
	DiskSizeMB int `json:"diskSizeMB"`

	Metadata     map[string]string `json:"metadata,omitempty"`
	EnvVars      map[string]string `json:"envVars,omitempty"`
	EnvdToken    string            `json:"envdToken"`
	TrafficToken string            `json:"trafficToken,omitempty"`

	AutoPause bool `json:"autoPause,omitempty"`
	// AutoPauseFilesOnly makes the pause at the end of the timeout keep
	// files only (E2B's autoPauseMemory false).
	AutoPauseFilesOnly bool   `json:"autoPauseFilesOnly,omitempty"`
	AutoResume         bool   `json:"autoResume,omitempty"`
	Network            []byte `json:"network,omitempty"` // the create request's network settings, as sent
	// PauseImage is the checkpoint directory of a sandbox paused on disk,
	// and PauseChecksum its imageChecksum, verified before a resume.
	PauseImage    string `json:"pauseImage,omitempty"`
	PauseChecksum string `json:"pauseChecksum,omitempty"`
	// PauseImageTarget is set while a paused sandbox is being written to
	// disk: the directory the image goes to. It is recorded before the
	// checkpoint starts, so after a crash the reconciler knows a write-out
	// was in flight and finishes it (the image is complete and matches
	// PauseChecksum) or rolls it back to the frozen container.
	PauseImageTarget string `json:"pauseImageTarget,omitempty"`
	// PauseFilesOnly marks a pause that keeps the sandbox's files but not
	// its memory (E2B's keepMemory false): its image is a files image, and
	// a resume boots the template afresh with it.
	PauseFilesOnly bool `json:"pauseFilesOnly,omitempty"`

	// Boot is the template as it was when the sandbox was created: resume
	// and rollback restore with its rootfs and agent even after the
	// template itself is deleted.
	Boot *Template `json:"boot,omitempty"`
}

// PausedOnDisk reports whether the sandbox is paused on disk: its image
// is all there is of it, so any node that gets the image can resume it.
func (s *Sandbox) PausedOnDisk() bool { return s.State == Paused && s.Pause == PauseOnDisk }

// UnmarshalJSON reads a record, giving one that says only "paused" the
// paused state its fields show: records written before Pause was kept, or
// rewritten since by an older node, which drops it. A Pause this version
// does not know (written by a later one) is read the same way rather than
// refused: the fields every version keeps tell the three states apart.
func (s *Sandbox) UnmarshalJSON(data []byte) error {
	type plain Sandbox // without this method
	if err := json.Unmarshal(data, (*plain)(s)); err != nil {
		return err
	}
	switch {
	case s.State != Paused:
		s.Pause = ""
	case s.Pause == PauseFrozen, s.Pause == PauseWritingOut, s.Pause == PauseOnDisk:
	case s.PauseImageTarget != "":
		s.Pause = PauseWritingOut
	case s.ContainerID != "":
		s.Pause = PauseFrozen
	default:
		s.Pause = PauseOnDisk
	}
	return nil
}

// TemplateStatus is the state of a template or snapshot. A snapshot is
// recorded as building before its checkpoint is taken (Checkpoint names
// the directory, Checksum is set once the image is written) and ready
// only once the image is durable; deleting is recorded before anything is
// removed, and the reconciler completes an interrupted delete.
type TemplateStatus string

const (
	TemplateBuilding TemplateStatus = "building"
	TemplateReady    TemplateStatus = "ready"
	TemplateFailed   TemplateStatus = "failed"
	TemplateDeleting TemplateStatus = "deleting"
)

// Template is a bootable snapshot: either built from an OCI image or taken
// from a running sandbox (ID prefix "snap-").
type Template struct {
	ID string `json:"id"`
	// Team owns the template or snapshot; Public lets every team start
	// sandboxes from it.
	Team      string         `json:"team,omitempty"`
	Aliases   []string       `json:"aliases,omitempty"`
	Status    TemplateStatus `json:"status"`
	Error     string         `json:"error,omitempty"`
	CreatedAt time.Time      `json:"createdAt"`
	UpdatedAt time.Time      `json:"updatedAt"`

	// Node is the node whose data directory holds the template's files
	// (rootfs and checkpoint): sandboxes of it are placed there. Empty in
	// records written before nodes shared a store.
	Node string `json:"node,omitempty"`
	// Copies are the other nodes that hold a verified copy of the
	// template's files, each beneath its own data directory: placement
	// prefers them as it prefers Node.
	Copies []string `json:"copies,omitempty"`

	Image string `json:"image,omitempty"`
	// ImageDigest is the image ID (config digest) the rootfs was unpacked from.
	ImageDigest string `json:"imageDigest,omitempty"`
	// BuildJob is the job that built the template from its image.
	BuildJob   string `json:"buildJob,omitempty"`
	Rootfs     string `json:"rootfs"`     // read-only rootfs directory
	Envd       string `json:"envd"`       // host path of the cube-envd binary the snapshot was taken with
	Checkpoint string `json:"checkpoint"` // checkpoint image directory
	SizeBytes  int64  `json:"sizeBytes"`
	Checksum   string `json:"checksum,omitempty"`

	StartCmd []string `json:"startCmd,omitempty"`
	Env      []string `json:"env,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	User     string   `json:"user,omitempty"`

	CPUCount     int    `json:"cpuCount"`
	MemoryMB     int    `json:"memoryMB"`
	DiskSizeMB   int    `json:"diskSizeMB"`
	ExposedPorts []int  `json:"exposedPorts,omitempty"`
	ProbePort    int    `json:"probePort,omitempty"`
	ProbePath    string `json:"probePath,omitempty"`

	// For snapshots: the sandbox it was taken from and its names.
	SourceSandbox string `json:"sourceSandbox,omitempty"`
	// Parent is the template the snapshotted sandbox was created from.
	Parent string `json:"parent,omitempty"`
	// Mounts are the volumes bound into the sandbox (see volumes.go). A
	// checkpoint carries its mounts, so sandboxes restored from one mount
	// the same volumes at the same paths.
	Mounts []VolumeMount `json:"volumeMounts,omitempty"`
	// EnvdToken is the envd access token inside the checkpoint (snapshots
	// of initialised sandboxes); re-initialising envd needs it.
	EnvdToken string `json:"envdToken,omitempty"`

	// Layers are the cached build layers (keys) the rootfs of a template
	// built by steps was flattened from; a layer no template names is
	// collected when a template is deleted.
	Layers []string `json:"layers,omitempty"`
	// Tags name builds of the template; only the current build (BuildJob)
	// is kept, so a tag naming an earlier one no longer resolves.
	Tags   []TemplateTag `json:"tags,omitempty"`
	Public bool          `json:"public,omitempty"`
}

// HeldBy reports whether node holds the template's files: a template
// without a node is held by whichever node reads it.
func (t *Template) HeldBy(node string) bool { return t.Node == "" || t.Node == node }

// Holders are the nodes that have the template's files, its builder
// first; none for a template without a node (any node has it).
func (t *Template) Holders() []string {
	if t.Node == "" {
		return nil
	}
	return append([]string{t.Node}, t.Copies...)
}

// HeldBy reports whether node holds the volume's disk (see Template.HeldBy).
func (v *Volume) HeldBy(node string) bool { return v.Node == "" || v.Node == node }

// TemplateTag is a tag given to one build of a template.
type TemplateTag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildId"`
	CreatedAt time.Time `json:"createdAt"`
}

// JobPhase is where a template build is.
type JobPhase string

const (
	PhasePulling      JobPhase = "PULLING"
	PhaseUnpacking    JobPhase = "UNPACKING"
	PhaseBooting      JobPhase = "BOOTING"
	PhaseProbing      JobPhase = "PROBING"
	PhaseSnapshotting JobPhase = "SNAPSHOTTING"
	PhaseReady        JobPhase = "READY"
	// The phases of a build by steps: requested (its files may be
	// uploading), waiting for a build slot, running its steps.
	PhaseRequested JobPhase = "REQUESTED"
	PhaseWaiting   JobPhase = "WAITING"
	PhaseSteps     JobPhase = "STEPS"
	PhaseFailed    JobPhase = "FAILED"
)

// Job is a template build.
type Job struct {
	ID         string    `json:"id"`
	Team       string    `json:"team,omitempty"`
	TemplateID string    `json:"templateId"`
	Phase      JobPhase  `json:"phase"`
	Progress   int       `json:"progress"`
	Error      string    `json:"error,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`

	// For builds by steps: the tags and resources asked for, and the
	// step that failed.
	Steps bool `json:"steps,omitempty"`
	// Node is the node that runs the build (its template's Node).
	Node       string   `json:"node,omitempty"`
	Tags       []string `json:"tags,omitempty"`
	CPUCount   int      `json:"cpuCount,omitempty"`
	MemoryMB   int      `json:"memoryMB,omitempty"`
	FailedStep string   `json:"failedStep,omitempty"`
}
