// Package gvisor runs Cube sandboxes under gVisor's runsc with the systrap
// platform, which needs no KVM.
//
// Each operation is one runsc invocation against a private --root, so the
// state runsc keeps there is also what the server reconciles after a crash.
// The writable layer is gVisor's memory-backed root overlay: it lives in
// the sandbox's own memory, so one checkpoint carries files and memory
// together, and its size cap turns a full disk into ENOSPC inside the
// sandbox rather than on the host.
package gvisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/runsc/boot"

	"cube/internal/runtime"
)

// Config locates runsc and its state.
type Config struct {
	// Runsc is the path of a statically built runsc binary.
	Runsc string
	// Root is runsc's state directory (--root), private to Cube.
	Root string
	// Bundles is where per-sandbox OCI bundles and console logs live.
	Bundles string
	// Debug, when set, makes runsc write debug logs under Bundles/<id>/.
	Debug bool
	// Keeper is the cube-console binary each sandbox's console keeper
	// runs; empty runs this binary again as the keeper (see console.go).
	Keeper string
	// PrivateMemory gives each restored sandbox a private copy of its
	// image's memory, as stock gVisor does. By default they share it
	// copy-on-write (Runsc.SharedMemory), which needs a runsc built with
	// scripts/runsc-patches; New checks that it has the flag.
	PrivateMemory bool
	// EagerCopy copies the pages a restore is known to write first (its
	// image's pages.hot, see hot.go) into the sandbox's own memory at
	// restore instead of sharing them; it needs shared memory and a runsc
	// with scripts/runsc-patches/0003-cow-eager.patch.
	EagerCopy bool
	// StartTimeout bounds how long a sandbox takes to start: a runsc run,
	// create or restore, or a restore into a prepared container. One that
	// has not started by then is killed and removed, so that a sandbox
	// wedged while starting fails its request instead of holding it (and
	// the server's shutdown, which waits for the starts under way) for
	// good. Zero means DefaultStartTimeout.
	StartTimeout time.Duration
}

// DefaultStartTimeout is far above a start's time on a loaded host
// (a restore takes 0.1–1 s, runsc run of a build sandbox a few seconds).
const DefaultStartTimeout = time.Minute

// errStartTimeout is the cause of a start's context ending at
// StartTimeout.
var errStartTimeout = errors.New("start timed out")

// startTimeout is StartTimeout, or its default.
func (r *Runtime) startTimeout() time.Duration {
	if r.cfg.StartTimeout > 0 {
		return r.cfg.StartTimeout
	}
	return DefaultStartTimeout
}

// boundStart bounds ctx by StartTimeout for one start.
func (r *Runtime) boundStart(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, r.startTimeout(), errStartTimeout)
}

// startErr says that a start that failed was cut short by StartTimeout,
// when it was.
func (r *Runtime) startErr(ctx context.Context, err error) error {
	if context.Cause(ctx) != errStartTimeout {
		return err
	}
	return fmt.Errorf("the sandbox did not start within %v and was killed (%w); the host may be overloaded", r.startTimeout(), err)
}

// Runtime is the gVisor implementation of runtime.Runtime.
type Runtime struct {
	cfg Config
	// filesMu serialises boots with files: they share filesLink.
	filesMu sync.Mutex
	// threads names the file listing a container's threads (see
	// priority.go); nil when the host has no cgroups to find them in.
	threads func(id string) string
}

// New checks the configuration and returns a Runtime.
func New(cfg Config) (*Runtime, error) {
	if cfg.Runsc == "" {
		return nil, errors.New("no runsc binary configured")
	}
	st, err := os.Stat(cfg.Runsc)
	if err != nil {
		return nil, fmt.Errorf("runsc not found at %s: build it with `make bin/runsc`", cfg.Runsc)
	}
	if st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("runsc at %s is not executable", cfg.Runsc)
	}
	for _, d := range []string{cfg.Root, cfg.Bundles} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	if !cfg.PrivateMemory {
		need := []patchFlag{sharedMemory}
		if cfg.EagerCopy {
			need = append(need, eagerCopy)
		}
		if err := checkPatched(cfg.Runsc, need...); err != nil {
			return nil, err
		}
	}
	r := &Runtime{cfg: cfg, threads: threadsFile(cgroupRoot)}
	if err := r.prepareFiles(); err != nil {
		return nil, err
	}
	return r, nil
}

// keeperBin is the binary console keepers run.
func (r *Runtime) keeperBin() string {
	if r.cfg.Keeper != "" {
		return r.cfg.Keeper
	}
	return "/proc/self/exe"
}

// patchFlag is a flag scripts/runsc-patches add to runsc: a stock runsc
// refuses to start a sandbox with it, which is better said once, at start.
type patchFlag struct {
	name string // without dashes
	says string // the error, with the path and runsc's words
}

var (
	sharedMemory = patchFlag{"cow-restore", "runsc at %s cannot share template memory (%s): rebuild it with `make bin/runsc`, which applies scripts/runsc-patches, or start with --private-memory"}
	eagerCopy    = patchFlag{"cow-eager", "runsc at %s cannot copy hot pages at restore (%s): rebuild it with `make bin/runsc`, or start without eager copies"}
)

// checkPatched reports whether the runsc at path knows every flag of
// flags, with one run of it; a failure names the first flag runsc did
// not know (the first of flags when it cannot tell).
func checkPatched(path string, flags ...patchFlag) error {
	args := make([]string, 0, len(flags)+1)
	for _, f := range flags {
		args = append(args, "--"+f.name+"=false")
	}
	out, err := exec.Command(path, append(args, "help")...).CombinedOutput()
	if err == nil || len(flags) == 0 {
		return nil
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	missing := flags[0]
	for _, f := range flags {
		if strings.HasSuffix(first, "-"+f.name) {
			missing = f
			break
		}
	}
	return fmt.Errorf(missing.says, path, first)
}

// runscFor is the runsc command line for calls on sandbox id ("" for
// calls on none), with its debug log when Debug is set.
func (r *Runtime) runscFor(id string) Runsc {
	rs := Runsc{Path: r.cfg.Runsc, Root: r.cfg.Root, SharedMemory: !r.cfg.PrivateMemory, EagerCopy: r.cfg.EagerCopy}
	if r.cfg.Debug && id != "" {
		rs.DebugLog = filepath.Join(r.cfg.Bundles, id) + "/runsc.%COMMAND%.log"
	}
	return rs
}

// runsc runs one runsc command and returns its stdout; a failure carries
// runsc's own last words.
func (r *Runtime) runsc(ctx context.Context, id string, spec *runtime.Spec, args ...string) ([]byte, error) {
	return r.runscFor(id).Run(ctx, spec, args...)
}

// bundle writes the OCI bundle for spec and returns its directory. When
// restoring, base is the spec the image was checkpointed with: gVisor
// insists that a restore describes the same process, root and mounts, so
// only what belongs to the new sandbox (network namespace, cgroup,
// resources, Cube's annotations) is taken from spec. Templates thereby
// keep restoring after Cube changes how it writes new specs.
func (r *Runtime) bundle(spec runtime.Spec, base *ociSpecT) (string, error) {
	dir := filepath.Join(r.cfg.Bundles, spec.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := writeSpec(dir, mergeSpec(spec, base)); err != nil {
		return "", err
	}
	return dir, nil
}

// mergeSpec is the OCI spec of spec, or, when restoring, base with only
// what belongs to the new sandbox taken from spec (see bundle).
func mergeSpec(spec runtime.Spec, base *ociSpecT) ociSpecT {
	oci := ociSpec(spec)
	if base == nil {
		return oci
	}
	merged := *base
	merged.Linux.Namespaces = oci.Linux.Namespaces
	merged.Linux.CgroupsPath = oci.Linux.CgroupsPath
	merged.Linux.Resources = oci.Linux.Resources
	merged.Annotations = oci.Annotations
	if tar, ok := base.Annotations[annUpperTar]; ok {
		// Booted with files: runsc wants the same annotation again.
		merged.Annotations = maps.Clone(oci.Annotations)
		merged.Annotations[annUpperTar] = tar
	}
	return merged
}

// specFile is where a checkpoint image keeps the spec it was taken with.
const specFile = "spec.json"

// savedSpec reads the spec a checkpoint image was taken with, if it has one.
func savedSpec(image string) (*ociSpecT, error) {
	data, err := os.ReadFile(filepath.Join(image, specFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s ociSpecT
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("checkpoint spec %s: %w", image, err)
	}
	return &s, nil
}

// start runs runsc run, restore or create, with the sandbox's console
// going to a log file in the bundle. The bundle is removed if it fails.
func (r *Runtime) start(ctx context.Context, spec runtime.Spec, base *ociSpecT, args ...string) (runtime.Sandbox, error) {
	if spec.ID == "" || spec.Rootfs == "" {
		return nil, errors.New("sandbox spec needs an ID and a rootfs")
	}
	dir, err := r.bundle(spec, base)
	if err != nil {
		return nil, fmt.Errorf("write bundle: %w", err)
	}
	// The bundle is new or left by a runsc that failed: its console
	// holds nothing of this sandbox.
	for _, f := range []string{consoleLog, consoleOld} {
		os.Remove(filepath.Join(dir, f))
	}
	console, err := openConsole(dir, r.keeperBin())
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Both streams go to the console FIFO, which the sandbox process runsc
	// leaves behind inherits (a pipe of ours would never reach EOF).
	ctx, cancel := r.boundStart(ctx)
	defer cancel()
	if err := r.runDetached(ctx, spec, dir, console.w, args...); err != nil {
		return nil, r.failed(spec.ID, dir, console.w, args[0], r.startErr(ctx, err))
	}
	console.w.Close()
	return &sandbox{r: r, id: spec.ID, spec: spec}, nil
}

// runDetached runs one runsc command on spec's container in bundle dir
// with its output (and that of any sandbox process it leaves behind) on
// the console FIFO w.
func (r *Runtime) runDetached(ctx context.Context, spec runtime.Spec, dir string, w *os.File, args ...string) error {
	full := append(append([]string(nil), args...), "--bundle", dir, spec.ID)
	cmd := r.runscFor(spec.ID).Command(ctx, &spec, full...)
	cmd.Stdout, cmd.Stderr = w, w
	return r.run(ctx, cmd)
}

// failed removes what a failed run, restore or create may have left
// behind (a half-made container as Remove does, the bundle) and returns the error with
// runsc's own last words, read from the console first. w is the caller's
// end of the console, closed once the container's processes are gone so
// that the keeper finishes writing out.
func (r *Runtime) failed(id, dir string, w *os.File, op string, err error) error {
	r.removeContainer(context.Background(), id)
	w.Close()
	waitKeeper(dir)
	out, _ := readConsole(dir)
	os.RemoveAll(dir)
	return fmt.Errorf("runsc %s %s: %w: %s", op, id, err, Reason(string(out)))
}

// Boot starts a fresh sandbox.
func (r *Runtime) Boot(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	if spec.Files != "" {
		return r.bootWithFiles(ctx, spec)
	}
	return r.start(ctx, spec, nil, "run", "--detach")
}

// Restore starts a sandbox from a checkpoint image.
func (r *Runtime) Restore(ctx context.Context, image string, spec runtime.Spec) (runtime.Sandbox, error) {
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		return nil, fmt.Errorf("checkpoint image %s is incomplete: %w", image, err)
	}
	base, err := savedSpec(image)
	if err != nil {
		return nil, err
	}
	parents, err := r.restoreParents(filepath.Join(r.cfg.Bundles, spec.ID), image)
	if err != nil {
		return nil, err
	}
	return r.start(ctx, spec, base, restoreArgs(image, parents)...)
}

// restoreArgs are the arguments of runsc's restore of image, which maps
// the images in parents too. --background lets the sandbox run while its
// memory still streams in from the uncompressed image; runsc holds the
// image files open, so deleting the image meanwhile cannot break it.
func restoreArgs(image string, parents []string) []string {
	args := []string{"restore", "--detach", "--background", "--image-path", image}
	for _, dir := range parents {
		args = append(args, "--cow-parent", dir)
	}
	return args
}

// restoreParents are the image directories a restore of image into the
// container with bundle dir hands runsc besides image (--cow-parent), and
// for a sandbox that shares memory, it keeps the images the sandbox maps
// in dir (keepImages). A sandbox whose images cannot be kept is still
// restored; its checkpoints are full.
func (r *Runtime) restoreParents(dir, image string) ([]string, error) {
	if r.cfg.PrivateMemory {
		return nil, nil
	}
	own, chain, err := imageChain(image)
	if err != nil {
		return nil, fmt.Errorf("checkpoint image %s: %w", image, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	keepImages(dir, own, chain) // on failure nothing is kept: full checkpoints
	return parentDirs(own, chain), nil
}

// PrepareKey names the containers Prepare makes that a restore of image
// with spec can use: the merged OCI spec and the global flags, without the
// container ID and network namespace, which each prepared container has
// of its own.
func (r *Runtime) PrepareKey(image string, spec runtime.Spec) (string, error) {
	base, err := savedSpec(image)
	if err != nil {
		return "", err
	}
	spec.ID = "-"
	if spec.NetNS != "" {
		spec.NetNS = "-"
	}
	b, err := json.Marshal(struct {
		Flags []string
		Spec  ociSpecT
	}{r.runscFor("").Flags(&spec), mergeSpec(spec, base)})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12]), nil
}

// Prepare runs `runsc create` for a restore of image (or of any image with
// the same PrepareKey): the sandbox and gofer processes start, install
// their seccomp filters and wait. runsc's restore loads a checkpoint into
// a container that exists instead of creating one, which is most of a
// cold restore's process set-up, done here ahead of the request.
func (r *Runtime) Prepare(ctx context.Context, image string, spec runtime.Spec) (runtime.Prepared, error) {
	base, err := savedSpec(image)
	if err != nil {
		return nil, err
	}
	if base == nil {
		// Without the image's spec the container would differ from its
		// key (see PrepareKey), and restores into it would fail.
		return nil, fmt.Errorf("checkpoint image %s is gone or has no spec", image)
	}
	if _, err := r.start(ctx, spec, base, "create"); err != nil {
		return nil, err
	}
	p := &prepared{r: r, id: spec.ID, spec: spec}
	// Without a restore started ahead, the restore runs all of runsc's.
	p.ahead, _ = r.restoreAhead(ctx, spec, filepath.Join(r.cfg.Bundles, spec.ID))
	return p, nil
}

// prepared is a container made by runsc create, waiting for a restore.
type prepared struct {
	r    *Runtime
	id   string
	spec runtime.Spec
	// ahead is the restore started ahead for it (see awaiting), or nil.
	ahead *awaiting
}

func (p *prepared) ID() string { return p.id }

// Restore loads image into the prepared container. On failure the
// container is gone.
func (p *prepared) Restore(ctx context.Context, image string) (runtime.Sandbox, error) {
	dir := filepath.Join(p.r.cfg.Bundles, p.id)
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		p.Kill(context.Background())
		return nil, fmt.Errorf("checkpoint image %s is incomplete: %w", image, err)
	}
	// Prepared in the background, the container serves a request now
	// unless it is restored for a pool.
	if !runtime.InBackground(ctx) {
		err := p.r.promote(p.id)
		if err == nil && p.ahead != nil {
			err = p.ahead.promote()
		}
		if err != nil {
			p.Kill(context.Background())
			return nil, err
		}
	}
	w, err := consoleWriter(dir, p.id)
	if err != nil {
		p.Kill(context.Background())
		return nil, err
	}
	parents, err := p.r.restoreParents(dir, image)
	if err != nil {
		w.Close()
		p.Kill(context.Background())
		return nil, err
	}
	ctx, cancel := p.r.boundStart(ctx)
	defer cancel()
	if p.ahead != nil && !p.ahead.exited() {
		err = p.ahead.restore(ctx, image, parents)
	} else {
		// None started ahead, or it ended before its image came: its
		// output is on the console, and the CLI does the whole restore.
		err = p.r.runDetached(ctx, p.spec, dir, w, restoreArgs(image, parents)...)
	}
	if err != nil {
		return nil, p.r.failed(p.id, dir, w, "restore", p.r.startErr(ctx, err))
	}
	w.Close()
	return &sandbox{r: p.r, id: p.id, spec: p.spec}, nil
}

// Kill deletes the prepared container and its bundle, after the restore
// started ahead for it has ended.
func (p *prepared) Kill(ctx context.Context) error {
	if p.ahead != nil {
		p.ahead.cancel()
	}
	return p.r.Remove(ctx, p.id)
}

// Attach returns a handle to a container that runsc already runs.
func (r *Runtime) Attach(ctx context.Context, id string) (runtime.Sandbox, error) {
	out, err := r.runsc(ctx, id, nil, "state", id)
	// runsc rewrites a state file in place (truncate, then write) under a
	// lock its readers do not take, so a read can meet it empty while
	// another command saves it: asked again, it answers.
	for wait := 50 * time.Millisecond; err != nil && isTornState(err) && wait < 3*time.Second; wait *= 2 {
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		out, err = r.runsc(ctx, id, nil, "state", id)
	}
	if err != nil {
		return nil, err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("runsc state %s: %w", id, err)
	}
	if st.Status != "running" && st.Status != "paused" {
		return nil, fmt.Errorf("sandbox %s is %s", id, st.Status)
	}
	spec, err := r.readSpec(id)
	if err != nil {
		return nil, err
	}
	// The server restarted: if the console keeper went with it, a new
	// one takes over what waits in the FIFO.
	if err := adoptConsole(filepath.Join(r.cfg.Bundles, id), r.keeperBin()); err != nil {
		return nil, fmt.Errorf("console of %s: %w", id, err)
	}
	return &sandbox{r: r, id: id, spec: spec}, nil
}

// readSpec recovers the parts of a spec that later runsc calls need from
// the annotations written into the bundle.
func (r *Runtime) readSpec(id string) (runtime.Spec, error) {
	data, err := os.ReadFile(filepath.Join(r.cfg.Bundles, id, "config.json"))
	if err != nil {
		return runtime.Spec{}, fmt.Errorf("bundle of %s: %w", id, err)
	}
	var s struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return runtime.Spec{}, fmt.Errorf("bundle of %s: %w", id, err)
	}
	mb, _ := strconv.Atoi(s.Annotations[annWritableMB])
	return runtime.Spec{ID: id, WritableMB: mb, NetNS: s.Annotations[annNetNS], WritableRoot: s.Annotations[annWritableRoot] == "true"}, nil
}

// List returns the IDs of every container under runsc's root.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	// What a crashed server's commands were doing is finished first, so
	// the list is what they leave (see strays.go).
	waitOrphanCommands(ctx, r.cfg.Root, orphanWait)
	out, err := r.runsc(ctx, "", nil, "list", "--quiet")
	if err != nil {
		return nil, err
	}
	ids := strings.Fields(string(out))
	// Containers runsc has no state for but whose processes run, or
	// whose lock a start cut short left (see strays.go), are listed too,
	// so they are adopted or removed.
	for _, id := range append(strayIDs(r.cfg.Root), unsavedIDs(r.cfg.Root)...) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Remove deletes a container by ID whether or not a handle exists, and its
// bundle: the reconciler's tool for leftovers.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	err := r.removeContainer(ctx, id)
	waitKeeper(filepath.Join(r.cfg.Bundles, id))
	os.RemoveAll(filepath.Join(r.cfg.Bundles, id))
	return err
}

// removeContainer deletes container id with runsc and removes what runsc
// did not know of or left behind: its processes, a state file cut short,
// its cgroups. The bundle stays.
func (r *Runtime) removeContainer(ctx context.Context, id string) error {
	state := r.stateFile(id)
	_, statErr := state.Stat()
	err := r.delete(ctx, id)
	killStrays(r.cfg.Root, id)
	switch {
	case err == nil:
		if statErr == nil {
			return nil // runsc removed the container's cgroups with its state
		}
	case strings.Contains(err.Error(), "does not exist"):
	case isTornState(err):
		// A state file runsc began and never finished (its command was
		// killed with the server): runsc cannot read it, so it cannot
		// delete it either, and the container's processes are gone now.
	default:
		return err
	}
	// A container whose state was lost, cut short or never saved (a start
	// killed between taking the container's lock and writing its state)
	// leaves what runsc removes with the state: the lock file, the
	// sandbox's control socket and the cgroups.
	return errors.Join(r.removeState(id), removeCgroups(cgroupRoot, id))
}

// delete is runsc delete --force: container id's processes are killed and
// runsc's record of it removed. It goes through the CLI in every mode (see
// control.go).
func (r *Runtime) delete(ctx context.Context, id string) error {
	_, err := r.runsc(ctx, id, nil, "delete", "--force", id)
	return err
}

// isTornState reports whether err is runsc failing to read a container's
// state file: empty or cut short, as it is while being rewritten, or for
// good when the command writing it was killed.
func isTornState(err error) bool {
	return strings.Contains(err.Error(), "reading container metadata file")
}

// removeState removes runsc's files of container id: its state and lock
// files (runsc's own Destroy) and its sandbox's control socket, which the
// sandbox removes only when it exits on its own.
func (r *Runtime) removeState(id string) error {
	state := r.stateFile(id)
	err := os.Remove(filepath.Join(r.cfg.Root, "runsc-"+id+".sock"))
	if os.IsNotExist(err) {
		err = nil
	}
	return errors.Join(state.Destroy(), err)
}

type sandbox struct {
	r    *Runtime
	id   string
	spec runtime.Spec
}

func (s *sandbox) ID() string { return s.id }

func (s *sandbox) Checkpoint(ctx context.Context, dir string, leaveRunning bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bundle := filepath.Join(s.r.cfg.Bundles, s.id)
	inc := !s.r.cfg.PrivateMemory && incremental(bundle)
	if err := s.r.checkpoint(ctx, s.id, &s.spec, dir, leaveRunning, inc); err != nil {
		return err
	}
	if inc {
		if err := linkParents(bundle, dir); err != nil {
			return err
		}
		if err := ownHot(dir); err != nil {
			return fmt.Errorf("hot pages of %s: %w", dir, err)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(s.r.cfg.Bundles, s.id, "config.json"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, specFile), cfg, 0o600)
	}
	if err != nil {
		return fmt.Errorf("save checkpoint spec: %w", err)
	}
	if !leaveRunning {
		// The sandbox has exited; drop runsc's record of it too.
		return s.r.Remove(context.Background(), s.id)
	}
	return nil
}

// checkpoint is runsc checkpoint of container id into dir, uncompressed;
// zero pages are left out of the image (smaller to write and to load).
// With incremental, memory the sandbox still maps from its images is saved
// as references to them.
func (r *Runtime) checkpoint(ctx context.Context, id string, spec *runtime.Spec, dir string, leaveRunning, incremental bool) error {
	if r.inProcess() {
		return r.checkpointIn(ctx, id, dir, leaveRunning, incremental)
	}
	args := []string{"checkpoint", "--image-path", dir, "--compression=none", "--exclude-committed-zero-pages"}
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	if incremental {
		args = append(args, "--cow-incremental")
	}
	_, err := r.runsc(ctx, id, spec, append(args, id)...)
	return err
}

// Console returns the newest console output, at most ConsoleLimit bytes.
func (s *sandbox) Console() ([]byte, error) {
	return readConsole(filepath.Join(s.r.cfg.Bundles, s.id))
}

func (s *sandbox) Pause(ctx context.Context) error {
	if s.r.inProcess() {
		return s.r.pauseIn(ctx, s.id)
	}
	_, err := s.r.runsc(ctx, s.id, nil, "pause", s.id)
	return err
}

func (s *sandbox) Resume(ctx context.Context) error {
	if s.r.inProcess() {
		return s.r.resumeIn(ctx, s.id)
	}
	_, err := s.r.runsc(ctx, s.id, nil, "resume", s.id)
	return err
}

// Promote gives a sandbox restored in the background (a warm pool's)
// the normal CPU priority.
func (s *sandbox) Promote() error { return s.r.promote(s.id) }

func (s *sandbox) Kill(ctx context.Context) error {
	return s.r.Remove(ctx, s.id)
}

func (s *sandbox) Exec(ctx context.Context, args ...string) ([]byte, error) {
	cmd := s.r.runscFor(s.id).Command(ctx, nil, append([]string{"exec", s.id}, args...)...)
	return cmd.CombinedOutput()
}

func (s *sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	var ev boot.Event
	if s.r.inProcess() {
		var err error
		if ev, err = s.r.eventIn(ctx, s.id); err != nil {
			return runtime.Stats{}, err
		}
	} else {
		out, err := s.r.runsc(ctx, s.id, nil, "events", "--stats", s.id)
		if err != nil {
			return runtime.Stats{}, err
		}
		if err := json.Unmarshal(out, &ev); err != nil {
			return runtime.Stats{}, fmt.Errorf("runsc events %s: %w", s.id, err)
		}
	}
	return runtime.Stats{
		CPUTime:     time.Duration(ev.Data.CPU.Usage.Total),
		MemoryBytes: ev.Data.Memory.Usage.Usage,
		Pids:        ev.Data.Pids.Current,
	}, nil
}

// Close releases what runsc keeps across sandboxes under its root: the
// gofers' shared empty network namespace is a bind mount there, which
// would otherwise outlive the server and keep the directory busy. Running
// sandboxes keep their namespaces; only the mount point goes.
func (r *Runtime) Close() error {
	path := filepath.Join(r.cfg.Root, "null-netns")
	for unix.Unmount(path, unix.MNT_DETACH) == nil {
	}
	return nil
}
