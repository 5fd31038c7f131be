// Package nodefake holds in-memory stand-ins for what a node drives on its
// host: the isolation runtime, the network slot pool and the agent inside
// each sandbox. With them, and a real state store in a temporary
// directory, the node's own logic (state transitions, the warm pool, the
// reaper, reconciling after a crash, error kinds, cleanup on failure) is
// tested without root, gVisor or network namespaces, in milliseconds.
// Each fake keeps what a test asserts on (which containers run, which
// slots are held, which /init calls were made) and can be told to fail
// any operation. Only tests import it; internal/nodetest builds real
// nodes.
package nodefake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"cube/internal/runtime"
)

// Op names a runtime or sandbox operation, for failure injection.
type Op string

const (
	OpBoot       Op = "boot"
	OpRestore    Op = "restore"
	OpAttach     Op = "attach"
	OpList       Op = "list"
	OpRemove     Op = "remove"
	OpCheckpoint Op = "checkpoint"
	OpPause      Op = "pause"
	OpSaveFiles  Op = "save-files"
	OpResume     Op = "resume"
	OpKill       Op = "kill"
	OpStats      Op = "stats"
	OpPromote    Op = "promote"
)

// State is where a fake container is.
type State string

const (
	Running State = "running"
	Paused  State = "paused"
)

// Runtime is a node.Runtime whose containers are records in memory. A
// checkpoint writes a small image directory (checkpoint.img naming the
// container, pages.img), which is what the node checksums and verifies
// before each restore; a restore needs that image to exist. Containers
// outlive the Node that started them, as runsc containers outlive the
// server, so a second Node on the same Runtime sees them after a "crash".
type Runtime struct {
	mu         sync.Mutex
	containers map[string]*Sandbox
	fail       map[Op]error
	restores   []Restore
	// prepareGate and restoreGate hold those calls while closed.
	prepareGate, restoreGate gate
}

// gate keeps the calls of one operation waiting from hold until its
// release, as a slow runsc command would; guarded by Runtime.mu.
type gate struct {
	// held, while not nil, is closed when held calls may go on.
	held chan struct{}
	// waiting counts the calls held now.
	waiting int
}

// hold closes g until the returned function is called.
func (r *Runtime) hold(g *gate) (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := make(chan struct{})
	g.held = held
	return sync.OnceFunc(func() {
		r.mu.Lock()
		g.held = nil
		r.mu.Unlock()
		close(held)
	})
}

// pass waits, r.mu held (and released meanwhile), until g lets calls go
// on or ctx ends.
func (r *Runtime) pass(ctx context.Context, g *gate) error {
	for g.held != nil {
		held := g.held
		g.waiting++
		r.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
		}
		r.mu.Lock()
		g.waiting--
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Restore is one call of Runtime.Restore that succeeded.
type Restore struct {
	Image string
	Spec  runtime.Spec
}

// NewRuntime returns a runtime holding no containers.
func NewRuntime() *Runtime {
	return &Runtime{containers: map[string]*Sandbox{}, fail: map[Op]error{}}
}

// Fail makes every later call of op fail with err, until Fail(op, nil).
func (r *Runtime) Fail(op Op, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.fail, op)
		return
	}
	r.fail[op] = err
}

// failing is the error injected for op, if any; r.mu is held.
func (r *Runtime) failing(op Op) error {
	if err := r.fail[op]; err != nil {
		return fmt.Errorf("fake runtime: %s: %w", op, err)
	}
	return nil
}

// Containers returns the IDs of the containers that exist, sorted.
func (r *Runtime) Containers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.containers))
	for id := range r.containers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Container returns the container with this ID, or nil when none exists.
func (r *Runtime) Container(id string) *Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.containers[id]
}

// Restores lists the restores made so far, oldest first.
func (r *Runtime) Restores() []Restore {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.restores)
}

// Lose removes a container as a host reboot or the OOM killer would:
// without the node being told.
func (r *Runtime) Lose(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.containers, id)
}

// start adds a running container, in the background if ctx is marked
// so; r.mu is held.
func (r *Runtime) start(ctx context.Context, spec runtime.Spec, image string) (*Sandbox, error) {
	if _, ok := r.containers[spec.ID]; ok {
		return nil, fmt.Errorf("fake runtime: container %q exists already", spec.ID)
	}
	sb := &Sandbox{rt: r, id: spec.ID, spec: spec, image: image, state: Running, background: runtime.InBackground(ctx)}
	r.containers[spec.ID] = sb
	return sb, nil
}

func (r *Runtime) Boot(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failing(OpBoot); err != nil {
		return nil, err
	}
	if spec.Files != "" {
		if _, err := os.Stat(spec.Files); err != nil {
			return nil, fmt.Errorf("fake runtime: boot with files: %w", err)
		}
	}
	return r.start(ctx, spec, spec.Files)
}

// HoldRestores makes Restore wait, as a slow restore would, until the
// returned function is called.
func (r *Runtime) HoldRestores() (release func()) { return r.hold(&r.restoreGate) }

// Restoring is the number of restores waiting on HoldRestores.
func (r *Runtime) Restoring() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restoreGate.waiting
}

func (r *Runtime) Restore(ctx context.Context, image string, spec runtime.Spec) (runtime.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.pass(ctx, &r.restoreGate); err != nil {
		return nil, err
	}
	if err := r.failing(OpRestore); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		return nil, fmt.Errorf("fake runtime: restore: %w", err)
	}
	sb, err := r.start(ctx, spec, image)
	if err != nil {
		return nil, err
	}
	r.restores = append(r.restores, Restore{Image: image, Spec: spec})
	return sb, nil
}

func (r *Runtime) Attach(ctx context.Context, id string) (runtime.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failing(OpAttach); err != nil {
		return nil, err
	}
	sb, ok := r.containers[id]
	if !ok {
		return nil, fmt.Errorf("fake runtime: attach %q: no such container", id)
	}
	return sb, nil
}

func (r *Runtime) List(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	err := r.failing(OpList)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return r.Containers(), nil
}

// Remove removes a container, running or not; an unknown ID is no error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failing(OpRemove); err != nil {
		return err
	}
	delete(r.containers, id)
	return nil
}

// Sandbox is one fake container.
type Sandbox struct {
	rt    *Runtime
	id    string
	spec  runtime.Spec
	image string // restored from; "" when booted

	// state and background are guarded by rt.mu.
	state State
	// background is set while the container runs at the priority of
	// background work: made by a Background context, not promoted since.
	background bool
}

// Background reports whether the container runs at the priority of
// background work.
func (s *Sandbox) Background() bool {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	return s.background
}

// Promote gives the container a request's priority.
func (s *Sandbox) Promote() error {
	return s.do(OpPromote, func() error {
		s.background = false
		return nil
	})
}

// Spec is what the container was booted or restored with.
func (s *Sandbox) Spec() runtime.Spec { return s.spec }

// Image is the checkpoint the container was restored from; "" when it
// was booted.
func (s *Sandbox) Image() string { return s.image }

// State is where the container is; "" once it is gone.
func (s *Sandbox) State() State {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if s.rt.containers[s.id] != s {
		return ""
	}
	return s.state
}

func (s *Sandbox) ID() string { return s.id }

// do runs f under the runtime's lock unless op is set to fail or the
// container is gone.
func (s *Sandbox) do(op Op, f func() error) error {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if err := s.rt.failing(op); err != nil {
		return err
	}
	if s.rt.containers[s.id] != s {
		return fmt.Errorf("fake runtime: %s %q: %w", op, s.id, errGone)
	}
	return f()
}

var errGone = errors.New("container is gone")

// Checkpoint writes a small image into dir: checkpoint.img names the
// container and what it was restored from, so images of different
// containers differ; pages.img stands for memory.
func (s *Sandbox) Checkpoint(ctx context.Context, dir string, leaveRunning bool) error {
	return s.do(OpCheckpoint, func() error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		img := fmt.Sprintf("fake checkpoint of container %s (restored from %q)\n", s.id, s.image)
		if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte(img), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "pages.img"), make([]byte, 4096), 0o600); err != nil {
			return err
		}
		if !leaveRunning {
			delete(s.rt.containers, s.id)
		}
		return nil
	})
}

// SaveFiles writes a small files image naming the container, so images
// of different containers differ.
func (s *Sandbox) SaveFiles(ctx context.Context, dir string) error {
	return s.do(OpSaveFiles, func() error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		img := fmt.Sprintf("fake files of container %s (restored from %q)\n", s.id, s.image)
		return os.WriteFile(filepath.Join(dir, runtime.FilesImage), []byte(img), 0o600)
	})
}

func (s *Sandbox) Pause(ctx context.Context) error {
	return s.do(OpPause, func() error {
		s.state = Paused
		return nil
	})
}

func (s *Sandbox) Resume(ctx context.Context) error {
	return s.do(OpResume, func() error {
		s.state = Running
		return nil
	})
}

// Kill removes the container; killing one that is gone is no error.
func (s *Sandbox) Kill(ctx context.Context) error {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if err := s.rt.failing(OpKill); err != nil {
		return err
	}
	if s.rt.containers[s.id] == s {
		delete(s.rt.containers, s.id)
	}
	return nil
}

// Stats reports a fixed reading: 64 MiB in use, a second of CPU.
func (s *Sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	var st runtime.Stats
	err := s.do(OpStats, func() error {
		st = runtime.Stats{CPUTime: 1e9, MemoryBytes: 64 << 20, Pids: 1}
		return nil
	})
	return st, err
}

func (s *Sandbox) Console() ([]byte, error) { return nil, nil }

func (s *Sandbox) Exec(ctx context.Context, args ...string) ([]byte, error) {
	return nil, errors.New("fake runtime: exec is not supported")
}

// Created is the state of a container made by Prepare and not yet
// restored into.
const Created State = "created"

// OpPrepare names Prepare, for failure injection.
const OpPrepare Op = "prepare"

// PrepareKey keys a restore by the spec's rootfs, agent and limits, as the
// real runtime does by everything but the container's ID and namespace.
func (r *Runtime) PrepareKey(image string, spec runtime.Spec) (string, error) {
	return fmt.Sprintf("%s|%s|%d|%d|%d", spec.Rootfs, spec.AgentDir, spec.WritableMB, spec.CPUCount, spec.MemoryMB), nil
}

// HoldPrepares makes Prepare wait, as a slow runsc create would, until
// the returned function is called.
func (r *Runtime) HoldPrepares() (release func()) { return r.hold(&r.prepareGate) }

// Prepare adds a container in state Created.
func (r *Runtime) Prepare(ctx context.Context, image string, spec runtime.Spec) (runtime.Prepared, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.pass(ctx, &r.prepareGate); err != nil {
		return nil, err
	}
	if err := r.failing(OpPrepare); err != nil {
		return nil, err
	}
	sb, err := r.start(ctx, spec, "")
	if err != nil {
		return nil, err
	}
	sb.state = Created
	return prepared{sb}, nil
}

// prepared is a fake container waiting for a restore.
type prepared struct{ sb *Sandbox }

func (p prepared) ID() string { return p.sb.id }

// Restore loads image into the created container; on failure the
// container is gone, as with runsc.
func (p prepared) Restore(ctx context.Context, image string) (runtime.Sandbox, error) {
	r := p.sb.rt
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.failing(OpRestore)
	if err == nil {
		if _, serr := os.Stat(filepath.Join(image, "checkpoint.img")); serr != nil {
			err = fmt.Errorf("fake runtime: restore: %w", serr)
		}
	}
	if err == nil && (r.containers[p.sb.id] != p.sb || p.sb.state != Created) {
		err = fmt.Errorf("fake runtime: restore into %q: not a created container", p.sb.id)
	}
	if err != nil {
		delete(r.containers, p.sb.id)
		return nil, err
	}
	p.sb.state, p.sb.image = Running, image
	if !runtime.InBackground(ctx) {
		p.sb.background = false
	}
	r.restores = append(r.restores, Restore{Image: image, Spec: p.sb.spec})
	return p.sb, nil
}

func (p prepared) Kill(ctx context.Context) error { return p.sb.Kill(ctx) }
