package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"cube/internal/cube"
	"cube/internal/envdclient"
	"cube/internal/id"
	"cube/internal/node"
	"cube/internal/oci"
	"cube/internal/store"
)

// StepRunner is a Snapshotter that also runs build steps; *node.Node is
// one. Without it, builds by steps are Unsupported.
type StepRunner interface {
	WithBuildBox(ctx context.Context, box node.BuildBox, fn func(ctx context.Context, addr netip.Addr) error) error
	RetireBuild(old *store.Template)
}

// stepError is a build step that failed: which step, and why.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }

func (e *stepError) Unwrap() error { return e.err }

// stepState is the filesystem and the settings a build has reached.
type stepState struct {
	key     string
	lower   []string // layer fs directories, top first, the base last
	layers  []string // keys of the layers in lower, bottom first
	env     []string // KEY=VALUE, the image's and the ENV steps'
	user    string
	workdir string
	// cached holds while every step so far came from the cache.
	cached bool
}

// stepUser is who the steps run as when no USER step said: E2B's
// templates build and run as `user`.
const stepUser = "user"

// ensureUserScript gives an image E2B's user `user` with a home directory,
// with whatever tool the image has for it.
const ensureUserScript = `set -e
if grep -q '^user:' /etc/passwd; then exit 0; fi
if command -v useradd >/dev/null 2>&1; then
	useradd --create-home --home-dir /home/user --shell /bin/sh user
elif command -v adduser >/dev/null 2>&1; then
	adduser -D -h /home/user -s /bin/sh user
else
	uid=1000
	while cut -d: -f3 /etc/passwd | grep -qx "$uid"; do uid=$((uid + 1)); done
	echo "user:x:$uid:$uid::/home/user:/bin/sh" >>/etc/passwd
	echo "user:x:$uid:" >>/etc/group
	mkdir -p /home/user
	chown "$uid:$uid" /home/user
fi
echo "added the user 'user'"
`

// copyScript applies a COPY step inside the build sandbox. The files are
// in /.cube-copy/files.tar, put there before the sandbox started; the
// arguments come as environment variables, never as script text.
const copyScript = `set -e
stage=/.cube-copy
mkdir -p "$stage/x"
tar -xf "$stage/files.tar" -C "$stage/x"
owner=$CUBE_COPY_USER
if [ -n "$owner" ]; then owner="$owner:$(id -gn "$owner")"; fi
# mkdirown is mkdir -p that gives the directories it makes to the owner.
mkdirown() {
	d=$1 top=
	while [ ! -e "$d" ]; do top=$d; d=$(dirname "$d"); done
	mkdir -p "$1"
	if [ -n "$top" ] && [ -n "$owner" ]; then chown -R "$owner" "$top"; fi
}
IFS='
'
found=0
for s in "$stage"/x/$CUBE_COPY_SRC; do
	[ -e "$s" ] || [ -L "$s" ] || continue
	found=1
	dest=$CUBE_COPY_DEST
	if [ -d "$s" ] && [ ! -L "$s" ]; then
		mkdirown "$dest"
		for e in "$s"/* "$s"/.[!.]* "$s"/..?*; do
			[ -e "$e" ] || [ -L "$e" ] || continue
			rm -rf "$dest/${e##*/}"
			cp -a "$e" "$dest/"
			if [ -n "$owner" ]; then chown -R -h "$owner" "$dest/${e##*/}"; fi
			if [ -n "$CUBE_COPY_MODE" ]; then chmod -R "$CUBE_COPY_MODE" "$dest/${e##*/}"; fi
		done
		continue
	fi
	case "$dest" in
	*/) mkdirown "$dest"; dest="$dest${s##*/}" ;;
	*) if [ -d "$dest" ]; then dest="$dest/${s##*/}"; else mkdirown "$(dirname "$dest")"; fi ;;
	esac
	rm -rf "$dest"
	cp -a "$s" "$dest"
	if [ -n "$owner" ]; then chown -h "$owner" "$dest"; fi
	if [ -n "$CUBE_COPY_MODE" ]; then chmod "$CUBE_COPY_MODE" "$dest"; fi
done
rm -rf "$stage"
if [ "$found" = 0 ]; then echo "no file matches $CUBE_COPY_SRC in the uploaded files" >&2; exit 1; fi
`

// runSteps brings st through every step of spec, from the cache where it
// can, and returns the state after the last.
func (b *Builder) runSteps(ctx context.Context, sb *stepBuild, st *stepState) error {
	runner := b.cfg.Snapshotter.(StepRunner)
	force := sb.spec.Force

	// Every template has the user `user`: a step of Cube's own before the
	// user's, cached like them.
	ensure := cube.BuildStep{Type: "CUBE-ENSURE-USER", Args: []string{"v1"}}
	if err := b.fsStep(ctx, runner, sb, st, "base", ensure, force, "ensure the user 'user' exists", func(ctx context.Context, addr netip.Addr, out io.Writer) error {
		return runIn(ctx, addr, "root", "/", nil, ensureUserScript, out)
	}); err != nil {
		return err
	}

	for i, step := range sb.spec.Steps {
		name := strconv.Itoa(i + 1)
		if ctx.Err() != nil {
			// Cancelled, or out of time: no step starts.
			return &stepError{name, context.Cause(ctx)}
		}
		force = force || step.Force
		label := fmt.Sprintf("[%d/%d] %s", i+1, len(sb.spec.Steps), describe(step))
		cachedLabel := label
		if st.cached && !force {
			cachedLabel = "CACHED " + label
		}
		switch step.Type {
		case cube.StepEnv:
			for j := 0; j+1 < len(step.Args); j += 2 {
				st.env = mergeEnv(st.env, map[string]string{step.Args[j]: step.Args[j+1]})
			}
			st.key = chainKey(st.key, step)
			sb.log.infof(name, cachedLabel)
		case cube.StepUser:
			st.user = step.Args[0]
			st.key = chainKey(st.key, step)
			sb.log.infof(name, cachedLabel)
		case cube.StepWorkdir:
			dir := step.Args[0]
			if !strings.HasPrefix(dir, "/") {
				dir = filepath.Join(st.workdir, dir)
			}
			user := st.user
			if err := b.fsStep(ctx, runner, sb, st, name, step, force, label, func(ctx context.Context, addr netip.Addr, out io.Writer) error {
				script := `if [ ! -d "$CUBE_DIR" ]; then mkdir -p "$CUBE_DIR" && chown "$CUBE_USER:$(id -gn "$CUBE_USER")" "$CUBE_DIR"; fi`
				return runIn(ctx, addr, "root", "/", map[string]string{"CUBE_DIR": dir, "CUBE_USER": user}, script, out)
			}); err != nil {
				return err
			}
			st.workdir = dir
		case cube.StepRun:
			user := st.user
			if len(step.Args) > 1 && step.Args[1] != "" {
				user = step.Args[1]
			}
			cmd, env, cwd := step.Args[0], envMap(st.env), st.workdir
			if err := b.fsStep(ctx, runner, sb, st, name, step, force, label, func(ctx context.Context, addr netip.Addr, out io.Writer) error {
				return runIn(ctx, addr, user, cwd, env, cmd, out)
			}); err != nil {
				return err
			}
		case cube.StepCopy:
			user := st.user
			if len(step.Args) > 2 && step.Args[2] != "" {
				user = step.Args[2]
			}
			mode := ""
			if len(step.Args) > 3 {
				mode = step.Args[3]
			}
			dest := step.Args[1]
			if !strings.HasPrefix(dest, "/") {
				dest = filepath.Join(st.workdir, dest) + map[bool]string{true: "/"}[strings.HasSuffix(dest, "/")]
			}
			env := map[string]string{"CUBE_COPY_SRC": strings.TrimPrefix(filepath.Clean("/"+step.Args[0]), "/"),
				"CUBE_COPY_DEST": dest, "CUBE_COPY_USER": user, "CUBE_COPY_MODE": mode}
			files := b.filesPath(sb.job.TemplateID, step.FilesHash)
			sb.prepare = func(upper string) error { return stageFiles(upper, files) }
			if err := b.fsStep(ctx, runner, sb, st, name, step, force, label, func(ctx context.Context, addr netip.Addr, out io.Writer) error {
				return runIn(ctx, addr, "root", "/", env, copyScript, out)
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// describe is a step as its log line names it.
func describe(s cube.BuildStep) string {
	switch {
	case s.Type == cube.StepRun && len(s.Args) > 1 && s.Args[1] != "":
		return "RUN " + s.Args[0] + " (as " + s.Args[1] + ")"
	case s.Type == cube.StepCopy && len(s.Args) > 1:
		return "COPY " + s.Args[0] + " " + s.Args[1]
	case s.Type == cube.StepEnv:
		var kv []string
		for i := 0; i+1 < len(s.Args); i += 2 {
			kv = append(kv, s.Args[i]+"="+s.Args[i+1])
		}
		return "ENV " + strings.Join(kv, " ")
	}
	return s.Type + " " + strings.Join(s.Args, " ")
}

// fsStep runs one step that changes the filesystem, or takes its layer
// from the cache: in a build sandbox on an overlay of st's layers whose
// upper directory becomes the new layer.
func (b *Builder) fsStep(ctx context.Context, runner StepRunner, sb *stepBuild, st *stepState, name string, step cube.BuildStep,
	force bool, label string, run func(ctx context.Context, addr netip.Addr, out io.Writer) error) error {
	prepare := sb.prepare
	sb.prepare = nil
	key := chainKey(st.key, step)
	if force {
		// A forced step gets a layer of its own, and so does every step
		// after it: the cached ones stay as they are for other builds.
		key = chainKey(key, cube.BuildStep{Type: "CUBE-FORCED", Args: []string{sb.job.ID}})
	}
	if b.holdLayer(key) && !force && st.cached {
		sb.held = append(sb.held, key)
		sb.log.infof(name, "CACHED "+label)
		st.push(b, key)
		return nil
	}
	sb.held = append(sb.held, key)
	st.cached = false
	sb.log.infof(name, label)
	start := time.Now()
	tmp := b.layerDir(key) + ".tmp-" + id.New("", 6)
	defer os.RemoveAll(tmp)
	upper := filepath.Join(tmp, "fs")
	if err := os.MkdirAll(upper, 0o755); err != nil {
		return err
	}
	if prepare != nil {
		if err := prepare(upper); err != nil {
			return &stepError{name, err}
		}
	}
	ov, err := mountOverlay(tmp, upper, st.lower)
	if err != nil {
		return &stepError{name, err}
	}
	defer ov.unmount()

	// The layer may not grow past its caps; a watcher ends the step when
	// it does, rather than let it fill the disk or use up its inodes.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchLayer(sctx, cancel, upper, b.layerLimits())

	out := &lineWriter{log: sb.log, step: name, level: "info"}
	err = runner.WithBuildBox(sctx, node.BuildBox{Rootfs: ov.root, Env: st.env, CPUCount: sb.cpu, MemoryMB: sb.mem}, func(ctx context.Context, addr netip.Addr) error {
		if err := Probe(DefaultProbePort, DefaultProbePath, b.cfg.ProbeTimeout)(ctx, addr); err != nil {
			return fmt.Errorf("the build sandbox's agent did not start: %w", err)
		}
		return run(ctx, addr, out)
	})
	out.flush()
	if cause := context.Cause(sctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if err != nil {
		return &stepError{name, err}
	}
	if err := ov.unmount(); err != nil {
		return &stepError{name, err}
	}
	os.RemoveAll(filepath.Join(upper, ".cube-copy"))
	bytes, _, err := measureLayer(upper, b.layerLimits())
	if err != nil {
		return &stepError{name, err}
	}
	if err := b.finishLayer(tmp, key, label, bytes); err != nil {
		return &stepError{name, fmt.Errorf("keep the layer: %w", err)}
	}
	sb.log.infof(name, fmt.Sprintf("done in %s, layer %s", time.Since(start).Round(time.Millisecond), oci.HumanBytes(bytes)))
	st.push(b, key)
	return nil
}

// push puts layer key on top of st.
func (st *stepState) push(b *Builder, key string) {
	st.key = key
	st.lower = append([]string{filepath.Join(b.layerDir(key), "fs")}, st.lower...)
	st.layers = append(st.layers, key)
}

// envMap turns KEY=VALUE pairs into a map.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// runIn runs script by /bin/sh in the sandbox whose envd answers at addr,
// as user, writing its output to out. A non-zero exit is an
// *envdclient.ExitError.
func runIn(ctx context.Context, addr netip.Addr, user, cwd string, env map[string]string, script string, out io.Writer) error {
	err := envdclient.At(envdclient.NoKeepAlive, addr).Run(ctx, user, cwd, env, script, out)
	var ee *envdclient.ExitError
	if err != nil && !errors.As(err, &ee) {
		return startFailure(user, err)
	}
	return err
}

// startFailure says what to fix when a step's process cannot start.
func startFailure(user string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "/bin/sh") && (strings.Contains(msg, "no such file") || strings.Contains(msg, "not found")):
		return fmt.Errorf("the image has no /bin/sh: build steps and the SDK's commands run through a shell, so base the template on an image that has one (%v)", err)
	case strings.Contains(strings.ToLower(msg), "user"):
		return fmt.Errorf("cannot run as user %q: %v (create the user in an earlier step, run as root)", user, err)
	}
	return err
}
