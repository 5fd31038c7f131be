package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"cube/internal/api/wire"
)

// OpConfig configures the snapshot-family benchmarks. Each one runs
// Warmup discarded rounds and then Rounds measured ones; a round is a
// batch of operations started together, and its wall time is from the
// first request sent to the last answer received.
type OpConfig struct {
	APIURL   string `json:"api_url"`
	Template string `json:"template"`
	// Concurrency is the number of operations in flight in one round (the
	// report's -c); for clone it is the server-side clone concurrency.
	Concurrency int `json:"concurrency"`
	// Rounds is the report's -n (clone: --rounds).
	Rounds int `json:"rounds"`
	// Count is the number of clones per round (clone's -n).
	Count int `json:"count,omitempty"`
	// DirtyMB is the memory written in the sandbox before a snapshot.
	DirtyMB int `json:"dirty_mb"`
	Warmup  int `json:"warmup"`
	// Timeout is the lifetime of the sandboxes the benchmark creates.
	Timeout int `json:"timeout_s"`
	// FromDisk (pause-resume) resumes each sandbox only once the server
	// has written its pause image under DataDir, so the resume restores it
	// from disk instead of thawing it in memory.
	FromDisk bool   `json:"from_disk,omitempty"`
	DataDir  string `json:"data_dir,omitempty"`
	// FilesOnly (pause-resume) pauses without memory (E2B's keepMemory
	// false): the pause saves the sandbox's files and frees it, and the
	// resume boots it afresh with them.
	FilesOnly bool `json:"files_only,omitempty"`
	// Reset (rollback) snapshots each sandbox once, before the rounds, and
	// rolls it back to that same snapshot every round: the reset of an RL
	// environment to its start state, episode after episode.
	Reset bool `json:"reset,omitempty"`
}

func (c OpConfig) validate(needCount bool) error {
	switch {
	case c.Template == "":
		return fmt.Errorf("no template: pass -t TEMPLATE or set CUBE_TEMPLATE_ID")
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency (-c) must be at least 1, got %d", c.Concurrency)
	case c.Rounds < 1:
		return fmt.Errorf("rounds must be at least 1, got %d", c.Rounds)
	case needCount && c.Count < 1:
		return fmt.Errorf("clone count (-n) must be at least 1, got %d", c.Count)
	case c.DirtyMB < 0:
		return fmt.Errorf("dirty memory (-d) cannot be negative, got %d", c.DirtyMB)
	case c.Warmup < 0:
		return fmt.Errorf("warm-up rounds cannot be negative, got %d", c.Warmup)
	case c.FromDisk && c.DataDir == "":
		return fmt.Errorf("--from-disk needs the server's data directory (--data-dir)")
	case c.FromDisk && c.FilesOnly:
		return fmt.Errorf("--from-disk and --files-only exclude each other: a pause without memory is on disk when it answers")
	}
	return nil
}

// OpRow is one line of a snapshot-family table.
type OpRow struct {
	Op string `json:"op"`
	// Concurrency and Count: operations in flight and operations per round.
	Concurrency int `json:"concurrency"`
	Count       int `json:"count"`
	Rounds      int `json:"rounds"`
	DirtyMB     int `json:"dirty_mb,omitempty"`
	// Wall summarises the per-round wall times; PerAvg is Wall.Avg / Count,
	// the report's amortised cost of one operation.
	Wall   Stats     `json:"wall"`
	PerAvg float64   `json:"per_avg"`
	Walls  []float64 `json:"walls"`
	// Each summarises the individual request latencies across rounds.
	Each Stats `json:"each"`
	// ImageMB is the average snapshot size the server reported, if any.
	ImageMB float64 `json:"image_mb,omitempty"`
}

// OpReport is the JSON document of a snapshot-family run.
type OpReport struct {
	Command string   `json:"command"`
	Config  OpConfig `json:"config"`
	Rows    []OpRow  `json:"rows"`
	Telemetry
}

// measuredOps is the number of operations the CPU of a run is spread
// over: the first row's operations per round times its measured rounds.
// Where a round pairs two operations (snapshot+rollback, pause+resume,
// snapshot and create in dirty), one operation is the pair, and the
// deletes a round makes to clean up are part of it.
func (r *OpReport) measuredOps() int {
	if len(r.Rows) == 0 {
		return 0
	}
	return r.Rows[0].Rounds * r.Rows[0].Count
}

// report ends a measurement of command: its rows, with what m saw over
// the measured operations.
func (m *meter) report(command string, cfg OpConfig, rows ...OpRow) *OpReport {
	rep := &OpReport{Command: command, Config: cfg, Rows: rows}
	rep.Telemetry = m.stop(rep.measuredOps())
	return rep
}

// WriteOpTable prints rows under the report's columns (wall_avg wall_min
// wall_p95 wall_max per_avg), after what identifies the row: c operations
// in flight, batch operations per round (per_avg = wall_avg / batch),
// rounds measured. Successive runs with --no-header append to one table.
func WriteOpTable(w io.Writer, rows []OpRow, header bool) {
	if header {
		fmt.Fprintf(w, "%-20s %4s %5s %6s %8s %9s %9s %9s %9s %9s\n", "op", "c", "batch", "rounds", "dirty_mb", "wall_avg", "wall_min", "wall_p95", "wall_max", "per_avg")
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-20s %4d %5d %6d %8d %9.1f %9.1f %9.1f %9.1f %9.1f\n", r.Op, r.Concurrency, r.Count, r.Rounds, r.DirtyMB,
			r.Wall.Avg, r.Wall.Min, r.Wall.P95, r.Wall.Max, r.PerAvg)
	}
}

// rowBuilder accumulates measured rounds of one operation.
type rowBuilder struct {
	row   OpRow
	each  []float64
	image []float64
}

func (b *rowBuilder) add(wall float64, each []float64) {
	b.row.Walls = append(b.row.Walls, wall)
	b.each = append(b.each, each...)
}

func (b *rowBuilder) done() OpRow {
	r := b.row
	r.Rounds = len(r.Walls)
	r.Wall = Summarize(r.Walls)
	if r.Count > 0 {
		r.PerAvg = r.Wall.Avg / float64(r.Count)
	}
	r.Each = Summarize(b.each)
	if len(b.image) > 0 {
		var s float64
		for _, x := range b.image {
			s += x
		}
		r.ImageMB = s / float64(len(b.image))
	}
	return r
}

// batch runs f(0..n-1), at most conc at a time, and returns the wall time
// of the whole batch, each call's latency and the first error.
func batch(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) (float64, []float64, error) {
	if conc < 1 {
		conc = 1
	}
	each := make([]float64, n)
	errs := make([]error, n)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			t := time.Now()
			errs[i] = f(ctx, i)
			each[i] = ms(time.Since(t))
		}(i)
	}
	wg.Wait()
	return ms(time.Since(start)), each, errors.Join(errs...)
}

// fleet is the set of sandboxes and snapshots a benchmark made; Close
// deletes whatever is still there, even after an interrupt.
type fleet struct {
	c         *Client
	mu        sync.Mutex
	sandboxes map[string]bool
	snapshots map[string]bool
	log       *slog.Logger
}

func newFleet(c *Client) *fleet {
	return &fleet{c: c, sandboxes: map[string]bool{}, snapshots: map[string]bool{}, log: slog.Default()}
}

func (f *fleet) create(ctx context.Context, template string, timeout int) (*sandboxRef, error) {
	sb, err := f.c.CreateSandbox(ctx, template, timeout)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sandboxes[sb.SandboxID] = true
	f.mu.Unlock()
	return &sandboxRef{sb: sb}, nil
}

func (f *fleet) adopt(ids ...string) {
	f.mu.Lock()
	for _, id := range ids {
		f.sandboxes[id] = true
	}
	f.mu.Unlock()
}

func (f *fleet) snapshot(ctx context.Context, id string) (string, float64, error) {
	s, err := f.c.Snapshot(ctx, id)
	if err != nil {
		return "", 0, err
	}
	f.mu.Lock()
	f.snapshots[s.SnapshotID] = true
	f.mu.Unlock()
	return s.SnapshotID, float64(s.SizeBytes) / (1 << 20), nil
}

// snapshots is one snapshot of each sandbox of a batch, taken at once.
type snapshots struct {
	ids   []string  // "" where a snapshot failed
	sizes []float64 // MB
	wall  float64   // the batch's
	each  []float64 // each request's
}

// snapshotAll snapshots every sandbox of sbs at once, one request each
// (the server serialises snapshots of one sandbox). The snapshots taken
// are returned with the error, for the caller to drop.
func (f *fleet) snapshotAll(ctx context.Context, sbs []*sandboxRef) (snapshots, error) {
	s := snapshots{ids: make([]string, len(sbs)), sizes: make([]float64, len(sbs))}
	var err error
	s.wall, s.each, err = batch(ctx, len(sbs), len(sbs), func(ctx context.Context, i int) error {
		var err error
		s.ids[i], s.sizes[i], err = f.snapshot(ctx, sbs[i].id())
		return err
	})
	return s, err
}

// rollbackAll rolls every sandbox of sbs back to its snapshot in snaps, at
// once: the batch's wall time and each request's.
func (f *fleet) rollbackAll(ctx context.Context, sbs []*sandboxRef, snaps []string) (float64, []float64, error) {
	return batch(ctx, len(sbs), len(sbs), func(ctx context.Context, i int) error {
		return f.c.Rollback(ctx, sbs[i].id(), snaps[i])
	})
}

func (f *fleet) kill(id string) {
	if err := f.c.DeleteSandbox(context.Background(), id); err != nil && !isNotFound(err) {
		f.log.Warn("delete sandbox", "sandbox", id, "err", err)
	}
	f.mu.Lock()
	delete(f.sandboxes, id)
	f.mu.Unlock()
}

func (f *fleet) dropSnapshot(id string) {
	if err := f.c.DeleteTemplate(context.Background(), id); err != nil && !isNotFound(err) {
		f.log.Warn("delete snapshot", "snapshot", id, "err", err)
	}
	f.mu.Lock()
	delete(f.snapshots, id)
	f.mu.Unlock()
}

// killAll deletes ids concurrently (cleanup is not measured).
func (f *fleet) killAll(ids []string) {
	batch(context.Background(), len(ids), 8, func(_ context.Context, i int) error { f.kill(ids[i]); return nil })
}

func (f *fleet) dropSnapshots(ids []string) {
	batch(context.Background(), len(ids), 8, func(_ context.Context, i int) error { f.dropSnapshot(ids[i]); return nil })
}

func (f *fleet) Close() {
	f.mu.Lock()
	var sbs, snaps []string
	for id := range f.sandboxes {
		sbs = append(sbs, id)
	}
	for id := range f.snapshots {
		snaps = append(snaps, id)
	}
	f.mu.Unlock()
	f.killAll(sbs)
	f.dropSnapshots(snaps)
}

// createN starts n sandboxes of the template, conc at a time (not measured).
func (f *fleet) createN(ctx context.Context, template string, n, conc, timeout int) ([]*sandboxRef, error) {
	out := make([]*sandboxRef, n)
	_, _, err := batch(ctx, n, conc, func(ctx context.Context, i int) error {
		r, err := f.create(ctx, template, timeout)
		out[i] = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating the benchmark's sandboxes: %w", err)
	}
	return out, nil
}

// sandboxRef is a sandbox the benchmark holds, with the token its code
// interpreter wants.
type sandboxRef struct {
	sb *wire.Sandbox
}

func (r *sandboxRef) id() string { return r.sb.SandboxID }
