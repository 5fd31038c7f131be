package bench

import (
	"context"
	"fmt"
	"time"
)

// RoundProgress is told after each round, warm-up included.
type RoundProgress func(done, total int)

func (p RoundProgress) tell(done, total int) {
	if p != nil {
		p(done, total)
	}
}

// rounds runs warm-up rounds (discarded) then measured ones; round(r)
// gets a negative r for warm-ups. m's window opens before the first
// measured round, so warm-up work is not billed to the operations.
func rounds(ctx context.Context, cfg OpConfig, p RoundProgress, m *meter, round func(ctx context.Context, r int) error) error {
	total := cfg.Warmup + cfg.Rounds
	for i := 0; i < total; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := i - cfg.Warmup
		if r == 0 {
			m.start()
		}
		if err := round(ctx, r); err != nil {
			if r < 0 {
				return fmt.Errorf("warm-up round %d: %w", i+1, err)
			}
			return fmt.Errorf("round %d of %d: %w", r+1, cfg.Rounds, err)
		}
		p.tell(i+1, total)
	}
	return nil
}

// RunSnapshot measures POST /sandboxes/{id}/snapshots: each round
// snapshots Concurrency running sandboxes at once, one request each
// (the server serialises snapshots of one sandbox, so that is the only
// way to make them concurrent).
func RunSnapshot(ctx context.Context, c *Client, cfg OpConfig, p RoundProgress) (*OpReport, error) {
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	f := newFleet(c)
	defer f.Close()
	sbs, err := f.createN(ctx, cfg.Template, cfg.Concurrency, cfg.Concurrency, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	row := &rowBuilder{row: OpRow{Op: "snapshot", Concurrency: cfg.Concurrency, Count: cfg.Concurrency}}
	m := c.newMeter()
	err = rounds(ctx, cfg, p, m, func(ctx context.Context, r int) error {
		snaps, err := f.snapshotAll(ctx, sbs)
		f.dropSnapshots(nonEmpty(snaps.ids))
		if err != nil {
			return err
		}
		if r >= 0 {
			row.add(snaps.wall, snaps.each)
			row.image = append(row.image, snaps.sizes...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.report("snapshot", cfg, row.done()), nil
}

// RunCreateFromSnapshot measures POST /sandboxes with templateID set to a
// snapshot: one snapshot of a running sandbox, then rounds of Concurrency
// creates from it at once, deleted after each round (not measured).
func RunCreateFromSnapshot(ctx context.Context, c *Client, cfg OpConfig, p RoundProgress) (*OpReport, error) {
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	f := newFleet(c)
	defer f.Close()
	src, err := f.create(ctx, cfg.Template, cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("creating the source sandbox: %w", err)
	}
	snap, _, err := f.snapshot(ctx, src.id())
	if err != nil {
		return nil, fmt.Errorf("snapshotting the source sandbox: %w", err)
	}
	row := &rowBuilder{row: OpRow{Op: "create-from-snapshot", Concurrency: cfg.Concurrency, Count: cfg.Concurrency}}
	m := c.newMeter()
	err = rounds(ctx, cfg, p, m, func(ctx context.Context, r int) error {
		ids := make([]string, cfg.Concurrency)
		wall, each, err := batch(ctx, cfg.Concurrency, cfg.Concurrency, func(ctx context.Context, i int) error {
			ref, err := f.create(ctx, snap, cfg.Timeout)
			if err == nil {
				ids[i] = ref.id()
			}
			return err
		})
		f.killAll(nonEmpty(ids))
		if err != nil {
			return err
		}
		if r >= 0 {
			row.add(wall, each)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.report("create-from-snapshot", cfg, row.done()), nil
}

// RunRollback measures POST /sandboxes/{id}/rollback. A sandbox may only
// roll back to a snapshot it took itself, so each round first snapshots
// every sandbox (phase one), then rolls every one back (phase two). Two
// rows come out: the rollback alone, and snapshot plus rollback, which is
// the flow the CubeSandbox report times. With Reset, see runReset.
func RunRollback(ctx context.Context, c *Client, cfg OpConfig, p RoundProgress) (*OpReport, error) {
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	f := newFleet(c)
	defer f.Close()
	sbs, err := f.createN(ctx, cfg.Template, cfg.Concurrency, cfg.Concurrency, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	if cfg.Reset {
		return runReset(ctx, c, f, sbs, cfg, p)
	}
	rb := &rowBuilder{row: OpRow{Op: "rollback", Concurrency: cfg.Concurrency, Count: cfg.Concurrency}}
	flow := &rowBuilder{row: OpRow{Op: "snapshot+rollback", Concurrency: cfg.Concurrency, Count: cfg.Concurrency}}
	m := c.newMeter()
	err = rounds(ctx, cfg, p, m, func(ctx context.Context, r int) error {
		snaps, err := f.snapshotAll(ctx, sbs)
		defer f.dropSnapshots(nonEmpty(snaps.ids))
		if err != nil {
			return err
		}
		rwall, reach, err := f.rollbackAll(ctx, sbs, snaps.ids)
		if err != nil {
			return err
		}
		if r >= 0 {
			rb.add(rwall, reach)
			sum := make([]float64, len(sbs))
			for i := range sum {
				sum[i] = snaps.each[i] + reach[i]
			}
			flow.add(snaps.wall+rwall, sum)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.report("rollback", cfg, rb.done(), flow.done()), nil
}

// runReset snapshots each sandbox once, then each round rolls every one
// back to its snapshot at once: one row, reset. Rolling back to the same
// snapshot again and again is how an RL environment starts each episode.
func runReset(ctx context.Context, c *Client, f *fleet, sbs []*sandboxRef, cfg OpConfig, p RoundProgress) (*OpReport, error) {
	snaps, err := f.snapshotAll(ctx, sbs)
	defer f.dropSnapshots(nonEmpty(snaps.ids))
	if err != nil {
		return nil, err
	}
	rb := &rowBuilder{row: OpRow{Op: "reset", Concurrency: cfg.Concurrency, Count: cfg.Concurrency}}
	m := c.newMeter()
	err = rounds(ctx, cfg, p, m, func(ctx context.Context, r int) error {
		wall, each, err := f.rollbackAll(ctx, sbs, snaps.ids)
		if err == nil && r >= 0 {
			rb.add(wall, each)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return m.report("rollback", cfg, rb.done()), nil
}

// RunClone measures POST /sandboxes/{id}/clone {count, concurrency} (or
// fork {count} on servers without clone) from one running sandbox; the
// wall time of a round is that one request. Children are deleted after
// each round (not measured).
func RunClone(ctx context.Context, c *Client, cfg OpConfig, p RoundProgress) (*OpReport, error) {
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	f := newFleet(c)
	defer f.Close()
	src, err := f.create(ctx, cfg.Template, cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("creating the source sandbox: %w", err)
	}
	if cfg.DirtyMB > 0 {
		if err := dirty(ctx, c, src, cfg.DirtyMB); err != nil {
			return nil, err
		}
	}
	row := &rowBuilder{row: OpRow{Op: "clone", Concurrency: cfg.Concurrency, Count: cfg.Count, DirtyMB: cfg.DirtyMB}}
	m := c.newMeter()
	err = rounds(ctx, cfg, p, m, func(ctx context.Context, r int) error {
		var ids []string
		wall, _, err := batch(ctx, 1, 1, func(ctx context.Context, _ int) error {
			var err error
			ids, err = c.Clone(ctx, src.id(), cfg.Count, cfg.Concurrency)
			return err
		})
		f.adopt(ids...)
		f.killAll(ids)
		if err != nil {
			return err
		}
		if r >= 0 {
			row.add(wall, []float64{wall})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.report("clone", cfg, row.done()), nil
}

// RunPauseResume pauses Concurrency sandboxes at once (POST .../pause),
// then resumes them at once (POST .../connect), each round; one row per
// half. With FromDisk the resume waits until the server has written every
// paused sandbox to disk (its pause image under DataDir), so it measures
// a restore from that image rather than a thaw. With FilesOnly the pause
// keeps no memory and the resume is a fresh boot with the sandbox's files.
func RunPauseResume(ctx context.Context, c *Client, cfg OpConfig, p RoundProgress) (*OpReport, error) {
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	f := newFleet(c)
	defer f.Close()
	sbs, err := f.createN(ctx, cfg.Template, cfg.Concurrency, cfg.Concurrency, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(sbs))
	for i, sb := range sbs {
		ids[i] = sb.id()
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 300
	}
	pauseOp, resumeOp := "pause", opResume
	if cfg.FromDisk {
		resumeOp = opResumeFromDisk
	}
	if cfg.FilesOnly {
		pauseOp, resumeOp = opPauseFiles, opResumeFiles
	}
	pause := &rowBuilder{row: OpRow{Op: pauseOp, Concurrency: cfg.Concurrency, Count: cfg.Concurrency}}
	resume := &rowBuilder{row: OpRow{Op: resumeOp, Concurrency: cfg.Concurrency, Count: cfg.Concurrency}}
	m := c.newMeter()
	err = rounds(ctx, cfg, p, m, func(ctx context.Context, r int) error {
		// Image mtimes come from the kernel's coarse clock; an older image
		// is a previous round's.
		paused := time.Now().Add(-50 * time.Millisecond)
		pwall, peach, err := batch(ctx, len(sbs), len(sbs), func(ctx context.Context, i int) error {
			return c.Pause(ctx, sbs[i].id(), !cfg.FilesOnly)
		})
		var werr error
		if err == nil && cfg.FromDisk {
			werr = waitPauseImages(ctx, cfg.DataDir, ids, paused)
		}
		// Resume whatever paused, even when some pauses failed, so the
		// next round and the cleanup find running sandboxes.
		rwall, reach, rerr := batch(ctx, len(sbs), len(sbs), func(ctx context.Context, i int) error {
			return c.Connect(ctx, sbs[i].id(), timeout)
		})
		if err != nil {
			return fmt.Errorf("pause: %w", err)
		}
		if werr != nil {
			return werr
		}
		if rerr != nil {
			return fmt.Errorf("resume: %w", rerr)
		}
		if r >= 0 {
			pause.add(pwall, peach)
			resume.add(rwall, reach)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.report("pause-resume", cfg, pause.done(), resume.done()), nil
}

// RunDirty measures snapshot time and create-from-snapshot time against
// DirtyMB of memory written in the sandbox. The buffer is allocated once
// through the code interpreter and every page of it is written again
// before each snapshot, so a snapshot that only saves pages changed since
// the last one still has DirtyMB to save.
func RunDirty(ctx context.Context, c *Client, cfg OpConfig, p RoundProgress) (*OpReport, error) {
	cfg.Concurrency = 1
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	f := newFleet(c)
	defer f.Close()
	src, err := f.create(ctx, cfg.Template, cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("creating the source sandbox: %w", err)
	}
	if err := dirty(ctx, c, src, cfg.DirtyMB); err != nil {
		return nil, err
	}
	snap := &rowBuilder{row: OpRow{Op: "snapshot", Concurrency: 1, Count: 1, DirtyMB: cfg.DirtyMB}}
	create := &rowBuilder{row: OpRow{Op: "create-from-snapshot", Concurrency: 1, Count: 1, DirtyMB: cfg.DirtyMB}}
	m := c.newMeter()
	err = rounds(ctx, cfg, p, m, func(ctx context.Context, r int) error {
		// The first round finds the buffer freshly written.
		if r > -cfg.Warmup {
			if err := touch(ctx, c, src); err != nil {
				return err
			}
		}
		var id string
		var size float64
		swall, _, err := batch(ctx, 1, 1, func(ctx context.Context, _ int) error {
			var err error
			id, size, err = f.snapshot(ctx, src.id())
			return err
		})
		if err != nil {
			return err
		}
		defer f.dropSnapshot(id)
		var child string
		cwall, _, err := batch(ctx, 1, 1, func(ctx context.Context, _ int) error {
			ref, err := f.create(ctx, id, cfg.Timeout)
			if err == nil {
				child = ref.id()
			}
			return err
		})
		if child != "" {
			f.kill(child)
		}
		if err != nil {
			return err
		}
		if r >= 0 {
			snap.add(swall, []float64{swall})
			if size > 0 {
				snap.image = append(snap.image, size)
			}
			create.add(cwall, []float64{cwall})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.report("dirty", cfg, snap.done(), create.done()), nil
}

// dirtyVar is the kernel variable holding the benchmark's buffer.
const dirtyVar = "_cube_bench_dirty"

// dirty allocates mb MiB in the sandbox's Python kernel, every page
// written with a non-zero byte (zero pages could be skipped by a
// snapshot, which would flatter it).
func dirty(ctx context.Context, c *Client, ref *sandboxRef, mb int) error {
	code := fmt.Sprintf("%s = bytearray(b'\\x01') * (%d << 20)\nprint(len(%s))", dirtyVar, mb, dirtyVar)
	out, err := c.Execute(ctx, ref.sb, code)
	if err != nil {
		return fmt.Errorf("writing %d MB of dirty memory through the code interpreter: %w", mb, err)
	}
	if want := fmt.Sprint(mb << 20); !containsLine(out, want) {
		return fmt.Errorf("writing %d MB of dirty memory: the kernel printed %q, want %s", mb, out, want)
	}
	return nil
}

// touch writes one byte in every page of the buffer again.
func touch(ctx context.Context, c *Client, ref *sandboxRef) error {
	code := fmt.Sprintf("_b = globals().get(%q)\nif _b:\n    for _i in range(0, len(_b), 4096): _b[_i] = (_b[_i] %% 255) + 1\nprint('ok')", dirtyVar)
	if _, err := c.Execute(ctx, ref.sb, code); err != nil {
		return fmt.Errorf("rewriting dirty memory: %w", err)
	}
	return nil
}

func containsLine(out, want string) bool {
	for _, l := range splitLines(out) {
		if l == want {
			return true
		}
	}
	return false
}

func nonEmpty(ids []string) []string {
	var out []string
	for _, id := range ids {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}
