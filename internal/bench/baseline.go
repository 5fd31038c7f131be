package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/runtime"
	"cube/internal/runtime/gvisor"
)

// BaselineConfig configures the raw-runsc baseline: the operations the
// service performs, done with one runsc CLI process each, on the same
// rootfs, so every table can show what gVisor costs without the service.
type BaselineConfig struct {
	Runsc  string `json:"runsc"`
	Rootfs string `json:"rootfs"`
	// Concurrency workers run Total iterations after Warmup sequential
	// ones; an iteration is run → checkpoint → restore → pause → resume
	// → delete, each timed.
	Concurrency int `json:"concurrency"`
	Total       int `json:"total"`
	Warmup      int `json:"warmup"`
	// DirtyMB is allocated (and written) by the workload before it says
	// it is ready, so checkpoints and restores carry it.
	DirtyMB int `json:"dirty_mb"`
	// WorkDir holds runsc's --root, bundles and images; it is created and
	// removed by the run. Empty means a temporary directory.
	WorkDir string `json:"-"`
	// Python is the interpreter inside the rootfs.
	Python string `json:"python"`
	// Idle, when positive, also starts that many idle containers at once
	// and measures host memory per container, as the density command does.
	Idle int `json:"idle,omitempty"`
}

// Baseline operations, in the order an iteration runs them.
var BaselineOps = []string{"run", "checkpoint", "restore", "pause", "resume", "delete"}

// BaselineReport is the JSON document of a baseline run.
type BaselineReport struct {
	Config BaselineConfig       `json:"config"`
	Ops    map[string]Stats     `json:"ops"`
	Raw    map[string][]float64 `json:"raw"`
	// ImageMB is the average checkpoint image size.
	ImageMB    float64  `json:"image_mb"`
	Failed     int      `json:"failed"`
	Errors     []string `json:"errors,omitempty"`
	TotalTimeS float64  `json:"total_time_s"`
	// Density is the idle-container memory measurement (with Idle > 0).
	Density *DensityPoint `json:"density,omitempty"`
	// CPU is each operation's CPU time (ms) of the runsc CLI process and
	// the children it waited for, from wait4's rusage. The sandbox a run
	// or restore leaves behind is not one of those, so the work a
	// checkpoint or restore does inside the sandbox is not counted:
	// this is the command line's own cost. Absent in older files.
	CPU    map[string]Stats     `json:"cpu_ms,omitempty"`
	RawCPU map[string][]float64 `json:"raw_cpu_ms,omitempty"`
}

func (c BaselineConfig) validate() error {
	switch {
	case c.Rootfs == "":
		return errors.New("no rootfs: pass --rootfs DIR or -t TEMPLATE")
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency (-c) must be at least 1, got %d", c.Concurrency)
	case c.Total < 1:
		return fmt.Errorf("total (-n) must be at least 1, got %d", c.Total)
	case c.Warmup < 0 || c.DirtyMB < 0 || c.Idle < 0:
		return errors.New("warm-up and dirty memory cannot be negative")
	}
	if st, err := os.Stat(c.Rootfs); err != nil || !st.IsDir() {
		return fmt.Errorf("rootfs %s is not a directory", c.Rootfs)
	}
	if st, err := os.Stat(c.Runsc); err != nil || st.Mode()&0o111 == 0 {
		return fmt.Errorf("runsc not found or not executable at %s (build it with `make bin/runsc`)", c.Runsc)
	}
	if os.Geteuid() != 0 {
		return errors.New("the runsc baseline needs root")
	}
	return nil
}

// RunBaseline runs the baseline and removes everything it made:
// containers, bundles, images, and the mounts runsc leaves under its root.
func RunBaseline(ctx context.Context, cfg BaselineConfig, p RoundProgress) (rep *BaselineReport, err error) {
	if cfg.Python == "" {
		cfg.Python = "python3"
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	work := cfg.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "cube-bench-runsc-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	r := &runscDriver{cfg: cfg, rs: gvisor.Runsc{Path: cfg.Runsc, Root: filepath.Join(work, "root")}, work: work}
	if err := os.MkdirAll(r.rs.Root, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if cerr := r.cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	for i := 0; i < cfg.Warmup; i++ {
		if _, _, _, err := r.iteration(ctx, fmt.Sprintf("w%d", i)); err != nil {
			return nil, fmt.Errorf("warm-up %d: %w", i+1, err)
		}
	}
	rep = &BaselineReport{Config: cfg, Ops: map[string]Stats{}, Raw: map[string][]float64{},
		CPU: map[string]Stats{}, RawCPU: map[string][]float64{}}
	var mu sync.Mutex
	var images []float64
	done := 0
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				t, cpu, img, err := r.iteration(ctx, fmt.Sprintf("m%d", i))
				mu.Lock()
				done++
				if err != nil {
					rep.Failed++
					if len(rep.Errors) < 5 {
						rep.Errors = append(rep.Errors, err.Error())
					}
				} else {
					for op, v := range t {
						rep.Raw[op] = append(rep.Raw[op], v)
					}
					for op, v := range cpu {
						rep.RawCPU[op] = append(rep.RawCPU[op], v)
					}
					images = append(images, img)
				}
				d := done
				mu.Unlock()
				p.tell(d, cfg.Total)
			}
		}()
	}
dispatch:
	for i := 0; i < cfg.Total; i++ {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	rep.TotalTimeS = time.Since(start).Seconds()
	for op, xs := range rep.Raw {
		rep.Ops[op] = Summarize(xs)
	}
	for op, xs := range rep.RawCPU {
		rep.CPU[op] = Summarize(xs)
	}
	if len(images) > 0 {
		var s float64
		for _, x := range images {
			s += x
		}
		rep.ImageMB = s / float64(len(images))
	}
	if len(rep.Raw) == 0 {
		return rep, fmt.Errorf("every baseline iteration failed: %s", strings.Join(rep.Errors, "; "))
	}
	if cfg.Idle > 0 && ctx.Err() == nil {
		d, err := r.density(ctx, cfg.Idle)
		if err != nil {
			return rep, fmt.Errorf("idle containers: %w", err)
		}
		rep.Density = d
	}
	return rep, nil
}

// density starts n idle containers (as fast as runsc allows, a few at a
// time), then reads host memory and deletes them.
func (r *runscDriver) density(ctx context.Context, n int) (*DensityPoint, error) {
	base, err := measurePoint(0, r.rs.Root)
	if err != nil {
		return nil, err
	}
	ids := make([]string, n)
	defer func() {
		for _, id := range ids {
			if id != "" {
				r.runsc(context.Background(), nil, "delete", "--force", id)
				os.RemoveAll(filepath.Join(r.work, "bundles", id))
			}
		}
	}()
	_, _, err = batch(ctx, n, 4, func(ctx context.Context, i int) error {
		id := fmt.Sprintf("cb-idle-%s-%d", strconv.FormatInt(time.Now().UnixNano()%1e9, 36), i)
		ids[i] = id
		_, _, err := r.run(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	time.Sleep(3 * time.Second)
	pt, err := measurePoint(n, r.rs.Root)
	if err != nil {
		return nil, err
	}
	pt.PerSandboxMB = (pt.UsedMB - base.UsedMB) / float64(n)
	pt.PerSandboxClassicMB = (pt.UsedClassicMB - base.UsedClassicMB) / float64(n)
	pt.PerSandboxPSSMB = (pt.RunscPSSMB - base.RunscPSSMB) / float64(n)
	return &pt, nil
}

// WriteBaselineText prints the baseline table.
func WriteBaselineText(w io.Writer, rep *BaselineReport) {
	c := rep.Config
	fmt.Fprintf(w, "raw runsc baseline  rootfs=%s  concurrency=%d  total=%d  dirty_mb=%d  image=%.1f MB  failed=%d\n",
		c.Rootfs, c.Concurrency, c.Total, c.DirtyMB, rep.ImageMB, rep.Failed)
	var rows []struct {
		name string
		s    Stats
	}
	for _, op := range BaselineOps {
		if s, ok := rep.Ops[op]; ok {
			rows = append(rows, struct {
				name string
				s    Stats
			}{op, s})
		}
	}
	writeStatsTable(w, rows...)
	writeBaselineCPU(w, rep)
	if d := rep.Density; d != nil {
		fmt.Fprintf(w, "idle containers: %d  host memory per container %.1f MB (MemAvailable)  runsc PSS per container %.1f MB\n",
			d.Sandboxes, d.PerSandboxMB, d.PerSandboxPSSMB)
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(w, "error: "+e)
	}
}

// writeBaselineCPU prints the runsc CLI's CPU per operation, when measured.
func writeBaselineCPU(w io.Writer, rep *BaselineReport) {
	var parts []string
	for _, op := range BaselineOps {
		if s, ok := rep.CPU[op]; ok && s.Count > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", op, s.Avg))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "runsc CLI CPU per op (ms, avg; the sandbox's own work not included): %s\n", strings.Join(parts, "  "))
	}
}

// runscDriver runs the baseline's containers through the server's own
// runsc command line (gvisor.Runsc), one runsc process per operation.
type runscDriver struct {
	cfg  BaselineConfig
	rs   gvisor.Runsc
	work string
	mu   sync.Mutex
	made []string // container IDs ever started
}

// runsc runs one runsc command; spec is the container's for the commands
// that start or save one (their global flags depend on it), else nil.
func (r *runscDriver) runsc(ctx context.Context, spec *runtime.Spec, args ...string) error {
	_, err := r.rs.Run(ctx, spec, args...)
	return err
}

// runscCPU runs one runsc command like runsc, and returns the CPU time
// (ms) the command and the children it waited for used.
func (r *runscDriver) runscCPU(ctx context.Context, spec *runtime.Spec, args ...string) (float64, error) {
	cmd := r.rs.Command(ctx, spec, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("runsc %s: %w: %s", args[0], err, gvisor.Reason(stderr.String()))
	}
	return cmdCPU(cmd), nil
}

// cmdCPU is a finished command's user+system time in ms, from wait4.
func cmdCPU(cmd *exec.Cmd) float64 {
	if cmd.ProcessState == nil {
		return 0
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return ms(time.Duration(ru.Utime.Nano() + ru.Stime.Nano()))
}

// spec is container id's: the workload on the rootfs, with no network and
// none of the service's agent.
func (r *runscDriver) spec(id string) runtime.Spec {
	return runtime.Spec{ID: id, Rootfs: r.cfg.Rootfs, Args: r.workload(),
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}}
}

// workload is the sandbox's program: optionally write DirtyMB, say
// ready, then idle.
func (r *runscDriver) workload() []string {
	code := fmt.Sprintf("import sys, time\nb = bytearray(b'\\x01') * (%d << 20)\nsys.stdout.write('ready\\n')\nsys.stdout.flush()\nwhile True: time.sleep(3600)\n", r.cfg.DirtyMB)
	return []string{r.cfg.Python, "-c", code}
}

func (r *runscDriver) bundle(id string) (string, error) {
	dir := filepath.Join(r.work, "bundles", id)
	return dir, gvisor.WriteBareBundle(dir, r.spec(id))
}

func (r *runscDriver) remember(id string) {
	r.mu.Lock()
	r.made = append(r.made, id)
	r.mu.Unlock()
}

// iteration runs one container through every operation and returns each
// operation's time and CPU time in ms and the checkpoint image size in MB.
func (r *runscDriver) iteration(ctx context.Context, tag string) (t, cpu map[string]float64, size float64, err error) {
	t, cpu = map[string]float64{}, map[string]float64{}
	// runsc resolves container IDs by prefix, so neither ID may be a
	// prefix of the other.
	base := "cb-" + tag + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	id, id2 := base+"-a", base+"-b"
	defer func() {
		for _, c := range []string{id, id2} {
			r.runsc(context.Background(), nil, "delete", "--force", c)
			os.RemoveAll(filepath.Join(r.work, "bundles", c))
		}
		os.RemoveAll(filepath.Join(r.work, "images", id))
	}()

	if t["run"], cpu["run"], err = r.run(ctx, id); err != nil {
		return nil, nil, 0, err
	}

	img := filepath.Join(r.work, "images", id)
	if err := os.MkdirAll(img, 0o700); err != nil {
		return nil, nil, 0, err
	}
	spec, spec2 := r.spec(id), r.spec(id2)
	if t["checkpoint"], err = r.timedCPU(cpu, "checkpoint", func() (float64, error) {
		return r.runscCPU(ctx, &spec, "checkpoint", "--image-path", img, "--compression=none", "--leave-running", id)
	}); err != nil {
		return nil, nil, 0, err
	}
	size = float64(dirBytes(img)) / (1 << 20)

	b2, err := r.bundle(id2)
	if err != nil {
		return nil, nil, 0, err
	}
	r.remember(id2)
	if t["restore"], err = r.timedCPU(cpu, "restore", func() (float64, error) {
		return r.detached(ctx, &spec2, "restore", "--detach", "--image-path", img, "--bundle", b2, id2)
	}); err != nil {
		return nil, nil, 0, err
	}
	if t["pause"], err = r.timedCPU(cpu, "pause", func() (float64, error) { return r.runscCPU(ctx, nil, "pause", id2) }); err != nil {
		return nil, nil, 0, err
	}
	if t["resume"], err = r.timedCPU(cpu, "resume", func() (float64, error) { return r.runscCPU(ctx, nil, "resume", id2) }); err != nil {
		return nil, nil, 0, err
	}
	if t["delete"], err = r.timedCPU(cpu, "delete", func() (float64, error) { return r.runscCPU(ctx, nil, "delete", "--force", id) }); err != nil {
		return nil, nil, 0, err
	}
	return t, cpu, size, nil
}

// timedCPU times f, and records the CPU time it returns as cpu[op].
func (r *runscDriver) timedCPU(cpu map[string]float64, op string, f func() (float64, error)) (float64, error) {
	var c float64
	d, err := timed(func() error {
		var err error
		c, err = f()
		return err
	})
	cpu[op] = c
	return d, err
}

// run starts the container and returns the time until its workload
// printed "ready" and the CPU time of the runsc run process.
func (r *runscDriver) run(ctx context.Context, id string) (float64, float64, error) {
	b, err := r.bundle(id)
	if err != nil {
		return 0, 0, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer pr.Close()
	logf, err := os.Create(filepath.Join(b, "runsc.log"))
	if err != nil {
		pw.Close()
		return 0, 0, err
	}
	defer logf.Close()
	r.remember(id)
	spec := r.spec(id)
	start := time.Now()
	// Both streams are files: the sandbox inherits them, and a pipe that
	// exec copies from would never reach EOF while it lives.
	cmd := r.rs.Command(ctx, &spec, "run", "--detach", "--bundle", b, id)
	cmd.Stdout = pw
	cmd.Stderr = logf
	err = cmd.Run()
	pw.Close()
	if err != nil {
		msg, _ := os.ReadFile(logf.Name())
		return 0, 0, fmt.Errorf("runsc run: %w: %s", err, gvisor.Reason(string(msg)))
	}
	pr.SetReadDeadline(time.Now().Add(2 * time.Minute))
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return 0, 0, fmt.Errorf("workload in %s did not answer: %q %v", id, line, err)
	}
	return ms(time.Since(start)), cmdCPU(cmd), nil
}

// detached runs a runsc command that leaves a sandbox behind, with its
// output in a file for the same reason as in run.
func (r *runscDriver) detached(ctx context.Context, spec *runtime.Spec, args ...string) (float64, error) {
	f, err := os.CreateTemp(r.work, "runsc-*.log")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := r.rs.Command(ctx, spec, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(f.Name())
		return 0, fmt.Errorf("runsc %s: %w: %s", args[0], err, gvisor.Reason(string(msg)))
	}
	return cmdCPU(cmd), nil
}

func timed(f func() error) (float64, error) {
	t := time.Now()
	err := f()
	return ms(time.Since(t)), err
}

func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// cleanup deletes every container the run started, unmounts what runsc
// left mounted under the work directory (its null network namespace
// among them) and removes the directory.
func (r *runscDriver) cleanup() error {
	r.mu.Lock()
	ids := append([]string(nil), r.made...)
	r.mu.Unlock()
	for _, id := range ids {
		r.runsc(context.Background(), nil, "delete", "--force", id)
	}
	mounts, err := mountsUnder(r.work)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if err := os.RemoveAll(r.work); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountsUnder(string(data), dir), nil
}

func parseMountsUnder(mountinfo, dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
