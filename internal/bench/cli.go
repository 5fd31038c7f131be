package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// Environment variables the original tool reads.
const (
	EnvAPIURL   = "E2B_API_URL"
	EnvAPIKey   = "E2B_API_KEY"
	EnvTemplate = "CUBE_TEMPLATE_ID"
)

// common holds the flags every command shares.
type common struct {
	apiURL, apiKey, template, output, dataDir string
	timeout                                   int
	quiet                                     bool
	stdout, stderr                            io.Writer
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

func (o *common) client(concurrency int) (*Client, error) {
	url := o.apiURL
	if url == "" {
		url = firstEnv(EnvAPIURL, "CUBE_API_URL")
	}
	if url == "" {
		url = "http://127.0.0.1:3000"
	}
	o.apiURL = url
	return NewClient(url, o.apiKeyFor(), concurrency)
}

// apiKeyFor is the API key: --api-key, else the environment's, else a
// local server's from its data directory.
func (o *common) apiKeyFor() string {
	key := o.apiKey
	if key == "" {
		key = firstEnv(EnvAPIKey, "CUBE_API_KEY")
	}
	if key == "" && o.dataDir != "" {
		if b, err := os.ReadFile(filepath.Join(o.dataDir, "api-key")); err == nil {
			key = strings.TrimSpace(string(b))
		}
	}
	return key
}

func (o *common) templateID() string {
	if o.template != "" {
		return o.template
	}
	return firstEnv(EnvTemplate)
}

// bar is the live progress line on stderr; nil when quiet.
func (o *common) bar(total int, desc string) *progressbar.ProgressBar {
	if o.quiet || total <= 0 {
		return nil
	}
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(o.stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
	)
}

func (o *common) roundProgress(total int, desc string) (RoundProgress, func()) {
	b := o.bar(total, desc)
	if b == nil {
		return nil, func() {}
	}
	return func(done, _ int) { b.Set(done) }, func() { b.Finish() }
}

func (o *common) writeJSON(v any) error {
	if o.output == "" {
		return nil
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if dir := filepath.Dir(o.output); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(o.output, append(data, '\n'), 0o644)
}

func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// NewCommand builds the cube-bench command tree. stdout gets tables,
// stderr the progress line and diagnostics.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &common{stdout: stdout, stderr: stderr}
	var cfg CreateConfig
	root := &cobra.Command{
		Use:   "cube-bench",
		Short: "Load and latency benchmark of an E2B-compatible sandbox API",
		Long: `cube-bench creates (and deletes) sandboxes concurrently through the E2B REST
API and reports success rate, throughput and latency percentiles. Its
subcommands measure snapshots, rollback, clone, pause/resume, memory density
and the raw gVisor (runsc) baseline.

Environment: E2B_API_URL, E2B_API_KEY, CUBE_TEMPLATE_ID.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Template = o.templateID()
			cfg.Timeout = o.timeout
			if err := cfg.Validate(); err != nil {
				return err
			}
			c, err := o.client(cfg.Concurrency)
			if err != nil {
				return err
			}
			cfg.APIURL = o.apiURL
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			b := o.bar(cfg.Total, cfg.Mode)
			var progress Progress
			if b != nil {
				progress = func(done, failed int) {
					b.Describe(fmt.Sprintf("%s (failed %d)", cfg.Mode, failed))
					b.Set(done)
				}
			}
			rep, err := RunCreate(ctx, c, cfg, progress)
			if b != nil {
				b.Finish()
			}
			if err != nil {
				return err
			}
			WriteCreateText(o.stdout, rep)
			if err := o.writeJSON(rep); err != nil {
				return err
			}
			if rep.Summary.Successful == 0 {
				return errors.New("no iteration succeeded")
			}
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&o.apiURL, "api-url", "", "API base URL (default $E2B_API_URL, else http://127.0.0.1:3000)")
	pf.StringVar(&o.apiKey, "api-key", "", "API key (default $E2B_API_KEY, else <data-dir>/api-key)")
	pf.StringVarP(&o.template, "template", "t", "", "template ID or alias (default $CUBE_TEMPLATE_ID)")
	pf.StringVarP(&o.output, "output", "o", "", "also write the results as JSON to this file")
	pf.StringVar(&o.dataDir, "data-dir", "/var/lib/cube", "server data directory (API key, rootfs and pause image lookups on a local server)")
	pf.IntVar(&o.timeout, "timeout", 300, "lifetime of each created sandbox in seconds")
	pf.BoolVarP(&o.quiet, "quiet", "q", false, "no progress line")

	f := root.Flags()
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", 5, "parallel in-flight requests")
	f.IntVarP(&cfg.Total, "total", "n", 20, "measured iterations")
	f.IntVarP(&cfg.Warmup, "warmup", "w", 0, "warm-up iterations before measuring (not counted)")
	f.StringVarP(&cfg.Mode, "mode", "m", ModeCreateDelete, "create-delete or create-only")

	root.AddCommand(
		opCommand(o, "snapshot", "Snapshot running sandboxes, c at once (POST /sandboxes/{id}/snapshots)", opSnapshot),
		opCommand(o, "dirty", "Snapshot and create-from-snapshot time against D MB of dirty memory", opDirty),
		opCommand(o, "create-from-snapshot", "Create sandboxes from a snapshot, c at once", opCreateFromSnapshot),
		opCommand(o, "rollback", "Roll c sandboxes back to their own snapshots at once", opRollback),
		opCommand(o, "clone", "Clone one running sandbox n times, c at once on the server", opClone),
		opCommand(o, "pause-resume", "Pause c sandboxes at once, then resume them at once", opPauseResume),
		densityCommand(o),
		viaCommand(o),
		teamsCommand(o),
		baselineCommand(o),
		chartCommand(o),
		reportCommand(o),
	)
	return root
}

type opKind int

const (
	opSnapshot opKind = iota
	opDirty
	opCreateFromSnapshot
	opRollback
	opClone
	opPauseResume
)

func opCommand(o *common, name, short string, kind opKind) *cobra.Command {
	var cfg OpConfig
	var noHeader bool
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Template = o.templateID()
			cfg.Timeout = o.timeout
			if cfg.FromDisk {
				cfg.DataDir = o.dataDir
			}
			conc := cfg.Concurrency
			if kind == opClone {
				conc = 2
			}
			c, err := o.client(conc)
			if err != nil {
				return err
			}
			cfg.APIURL = o.apiURL
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			p, finish := o.roundProgress(cfg.Warmup+cfg.Rounds, name)
			var rep *OpReport
			switch kind {
			case opSnapshot:
				rep, err = RunSnapshot(ctx, c, cfg, p)
			case opDirty:
				rep, err = RunDirty(ctx, c, cfg, p)
			case opCreateFromSnapshot:
				rep, err = RunCreateFromSnapshot(ctx, c, cfg, p)
			case opRollback:
				rep, err = RunRollback(ctx, c, cfg, p)
			case opClone:
				rep, err = RunClone(ctx, c, cfg, p)
			case opPauseResume:
				rep, err = RunPauseResume(ctx, c, cfg, p)
			}
			finish()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			WriteOpTable(o.stdout, rep.Rows, !noHeader)
			WriteTelemetry(o.stdout, rep.Telemetry)
			return o.writeJSON(rep)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&noHeader, "no-header", false, "omit the column header (to append to a previous table)")
	f.IntVarP(&cfg.Warmup, "warmup", "w", 1, "warm-up rounds (discarded)")
	switch kind {
	case opClone:
		f.IntVarP(&cfg.Count, "count", "n", 1, "clones per round")
		f.IntVarP(&cfg.Concurrency, "concurrency", "c", 1, "clones started at once by the server")
		f.IntVar(&cfg.Rounds, "rounds", 5, "measured rounds")
		f.IntVarP(&cfg.DirtyMB, "dirty", "d", 0, "MB of memory to write in the source sandbox first")
	case opDirty:
		f.IntVarP(&cfg.DirtyMB, "dirty", "d", 0, "MB of dirty memory to write in the sandbox")
		f.IntVarP(&cfg.Rounds, "rounds", "n", 3, "measured rounds")
	default:
		f.IntVarP(&cfg.Concurrency, "concurrency", "c", 1, "operations in flight at once (one sandbox each)")
		f.IntVarP(&cfg.Rounds, "rounds", "n", 5, "measured rounds")
	}
	if kind == opRollback {
		f.BoolVar(&cfg.Reset, "reset", false, "snapshot each sandbox once and roll it back to that snapshot every round (an RL environment's reset), one row: reset")
	}
	if kind == opPauseResume {
		f.BoolVar(&cfg.FromDisk, "from-disk", false, "resume only once the server has written the paused sandboxes to disk (<data-dir>/sandboxes/<id>/pause/checkpoint.img, after its --pause-write-delay): a restore instead of a thaw; run it on the server's host")
		f.BoolVar(&cfg.FilesOnly, "files-only", false, "pause without memory (E2B's keepMemory false): the pause saves the sandboxes' files and frees them, the resume boots them afresh with those files")
	}
	return cmd
}

func viaCommand(o *common) *cobra.Command {
	var cfg ViaConfig
	cmd := &cobra.Command{
		Use:   "via",
		Short: "In a cluster: create and read sandboxes through their own node and through another, side by side",
		Long: `via creates a sandbox of --template through --api-url (the node that holds
the template) and through --via (another node of the same cluster, which
forwards to it), alternating which goes first each round, reads each one
--gets times through the same node, and deletes it. It reports both paths'
latencies and what the hop between nodes adds at the median.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Template = o.templateID()
			cfg.Timeout = o.timeout
			direct, err := o.client(1)
			if err != nil {
				return err
			}
			cfg.APIURL = o.apiURL
			via, err := NewClient(cfg.Via, o.apiKeyFor(), 1)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			p, finish := o.roundProgress(cfg.Warmup+cfg.Rounds, "via")
			rep, err := RunVia(ctx, direct, via, cfg, p)
			finish()
			if err != nil {
				return fmt.Errorf("via: %w", err)
			}
			WriteViaTable(o.stdout, rep)
			return o.writeJSON(rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Via, "via", "", "URL of another node of the cluster (required)")
	f.IntVarP(&cfg.Rounds, "rounds", "n", 20, "measured rounds (one create through each node per round)")
	f.IntVarP(&cfg.Warmup, "warmup", "w", 2, "warm-up rounds (discarded)")
	f.IntVar(&cfg.Gets, "gets", 10, "GET /sandboxes/{id} per sandbox")
	return cmd
}

func densityCommand(o *common) *cobra.Command {
	var cfg DensityConfig
	var batches string
	cmd := &cobra.Command{
		Use:   "density",
		Short: "Start idle sandboxes in batches and report host memory per sandbox",
		Long: `density records host memory (/proc/meminfo) with no benchmark sandboxes, starts
the batches of idle sandboxes (create-only), records memory after each, and
reports (used now - used before) / sandboxes, where used = MemTotal -
MemAvailable as free(1) shows it. It also sums the PSS of the server's runsc
processes (those whose --root is under --data-dir).
Every sandbox it started is deleted at the end. Run it on the server's host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Batches, err = parseInts(batches); err != nil {
				return fmt.Errorf("--batches: %w", err)
			}
			cfg.Template = o.templateID()
			cfg.Timeout = o.timeout
			if o.dataDir != "" {
				cfg.RunscMatch = filepath.Join(o.dataDir, "runsc")
			}
			most := 1
			for _, b := range cfg.Batches {
				most = max(most, b)
			}
			c, err := o.client(most)
			if err != nil {
				return err
			}
			cfg.APIURL = o.apiURL
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			p, finish := o.roundProgress(len(cfg.Batches), "density")
			rep, err := RunDensity(ctx, c, cfg, p)
			finish()
			if err != nil {
				return fmt.Errorf("density: %w", err)
			}
			WriteDensityText(o.stdout, rep)
			return o.writeJSON(rep)
		},
	}
	cmd.Flags().StringVarP(&batches, "batches", "b", "1,4,5,10", "sizes of the successive batches")
	cmd.Flags().DurationVar(&cfg.Settle, "settle", 3*time.Second, "wait after each batch before reading memory")
	return cmd
}

func baselineCommand(o *common) *cobra.Command {
	var cfg BaselineConfig
	cmd := &cobra.Command{
		Use:   "baseline",
		Short: "The same operations with the raw runsc CLI on the template's rootfs",
		Long: `baseline runs containers with one runsc process per operation, on the rootfs
of the template (-t, looked up through the API and the data directory) or
--rootfs: runsc run until a python3 workload prints "ready", checkpoint
(--leave-running --compression=none), restore into a new container, pause,
resume, delete. It needs root, uses its own runsc --root in a temporary
directory, and removes every container, directory and mount it made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if cfg.Rootfs == "" {
				t := o.templateID()
				if t == "" {
					return errors.New("baseline: pass --rootfs DIR or -t TEMPLATE")
				}
				c, err := o.client(1)
				if err != nil {
					return err
				}
				if cfg.Rootfs, err = TemplateRootfs(ctx, c, o.dataDir, t); err != nil {
					return fmt.Errorf("baseline: %w", err)
				}
			}
			p, finish := o.roundProgress(cfg.Total, "runsc baseline")
			rep, err := RunBaseline(ctx, cfg, p)
			finish()
			if err != nil {
				return fmt.Errorf("baseline: %w", err)
			}
			WriteBaselineText(o.stdout, rep)
			return o.writeJSON(rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Runsc, "runsc", "bin/runsc", "runsc binary")
	f.StringVar(&cfg.Rootfs, "rootfs", "", "rootfs directory (default: the template's)")
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", 1, "containers in flight at once")
	f.IntVarP(&cfg.Total, "total", "n", 10, "measured iterations")
	f.IntVarP(&cfg.Warmup, "warmup", "w", 1, "warm-up iterations (not counted)")
	f.IntVarP(&cfg.DirtyMB, "dirty", "d", 0, "MB the workload writes before it is ready")
	f.IntVar(&cfg.Idle, "idle", 0, "also start this many idle containers and report host memory per container")
	f.StringVar(&cfg.Python, "python", "python3", "Python interpreter inside the rootfs")
	f.StringVar(&cfg.WorkDir, "work-dir", "", "directory for runsc's --root, bundles and images (default: a new temporary one, removed afterwards)")
	return cmd
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func chartCommand(o *common) *cobra.Command {
	var ch Chart
	var series []string
	var spec string
	cmd := &cobra.Command{
		Use:   "chart",
		Short: "Draw a line chart as PNG (from --series or a JSON --spec)",
		Example: `  cube-bench chart -o create.png --title "Create latency" --x-label concurrency \
    --y-label ms --series "cube:1=45,10=160,20=330" --series "published:1=67,10=171,20=365"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output == "" {
				return errors.New("chart: -o FILE.png is required")
			}
			if spec != "" {
				if err := readJSON(spec, &ch); err != nil {
					return fmt.Errorf("chart: %w", err)
				}
			}
			for _, s := range series {
				sr, err := ParseSeries(s)
				if err != nil {
					return fmt.Errorf("chart: %w", err)
				}
				ch.Series = append(ch.Series, sr)
			}
			f, err := os.Create(o.output)
			if err != nil {
				return err
			}
			if err := ch.WritePNG(f); err != nil {
				f.Close()
				os.Remove(o.output)
				return fmt.Errorf("chart: %w", err)
			}
			return f.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&ch.Title, "title", "", "chart title")
	f.StringVar(&ch.XLabel, "x-label", "", "x axis label")
	f.StringVar(&ch.YLabel, "y-label", "", "y axis label")
	f.IntVar(&ch.Width, "width", 900, "width in pixels")
	f.IntVar(&ch.Height, "height", 520, "height in pixels")
	f.StringArrayVar(&series, "series", nil, "a line as NAME:X=Y,X=Y,… (repeatable)")
	f.StringVar(&spec, "spec", "", "JSON chart spec {title, x_label, y_label, series:[{name,x,y}]}")
	return cmd
}

func reportCommand(o *common) *cobra.Command {
	var opts ReportOptions
	var runsc, out string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Write docs/BENCHMARKS.md (and its charts) from a results directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Machine = DescribeMachine(runsc)
			opts.Now = time.Now()
			if opts.ChartPath == "" {
				rel, err := filepath.Rel(filepath.Dir(out), opts.Dir)
				if err != nil {
					rel = opts.Dir
				}
				opts.ChartPath = rel
			}
			tmp := out + ".tmp"
			f, err := os.Create(tmp)
			if err != nil {
				return err
			}
			if err := WriteReport(f, opts); err != nil {
				f.Close()
				os.Remove(tmp)
				return fmt.Errorf("report: %w", err)
			}
			if err := f.Close(); err != nil {
				return err
			}
			return os.Rename(tmp, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Dir, "dir", "docs/bench", "results directory (JSON, commands.txt, notes.md); charts are written here")
	f.StringVar(&out, "out", "docs/BENCHMARKS.md", "Markdown file to write")
	f.StringVar(&opts.ChartPath, "chart-path", "", "path of --dir as the Markdown links it (default: relative to --out)")
	f.StringVar(&opts.Commit, "commit", "", "commit the benchmarked binaries were built from")
	f.StringVar(&runsc, "runsc", "bin/runsc", "runsc binary (for its version)")
	return cmd
}
