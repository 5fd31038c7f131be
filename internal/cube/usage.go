package cube

import (
	"context"
	"time"
)

// UsageTotals is what a team used over an interval: the time its
// sandboxes ran, plain and weighted by their size, how often they
// started, and what it holds now.
type UsageTotals struct {
	Start, End time.Time
	// SandboxSeconds is the running time of the team's sandboxes within
	// the interval, added up; VCPUSeconds and MemoryMiBSeconds weight it
	// by each sandbox's vCPUs and memory.
	SandboxSeconds   float64
	VCPUSeconds      float64
	MemoryMiBSeconds float64
	// SandboxesStarted counts the times a sandbox started running within
	// the interval: creates, fork children and resumes (a resume starts a
	// sandbox anew, as in E2B).
	SandboxesStarted int64
	// RunningNow is the team's running sandboxes at the time of asking.
	RunningNow int
	// SnapshotBytes and VolumeBytes are what the team's snapshots and
	// volumes hold at the time of asking.
	SnapshotBytes int64
	VolumeBytes   int64
}

// TeamMetric is one step of a team's series (E2B's TeamMetric).
type TeamMetric struct {
	// Timestamp is the start of the step.
	Timestamp time.Time
	// ConcurrentSandboxes is the most sandboxes that ran at once in the
	// step.
	ConcurrentSandboxes int
	// SandboxStartRate is the sandboxes started in the step per second.
	SandboxStartRate float64
}

// MaxTeamMetric is the largest value of one of a team's metrics over an
// interval, and when it was first reached (E2B's MaxTeamMetric).
type MaxTeamMetric struct {
	Timestamp time.Time
	Value     float64
}

// The metrics MaxTeamMetric is asked for, as E2B names them.
const (
	MetricConcurrentSandboxes = "concurrent_sandboxes"
	MetricSandboxStartRate    = "sandbox_start_rate"
)

// StartRateStep is the step over which the highest start rate is
// measured: E2B's export period.
const StartRateStep = 5 * time.Second

// Usage is implemented by backends that keep what each team's sandboxes
// used; a cluster's answer covers every node. Intervals are closed, and
// an end in the future stops at the time of asking.
type Usage interface {
	TeamUsage(ctx context.Context, team string, start, end time.Time) (UsageTotals, error)
	// TeamMetrics is the team's series over the interval, one entry per
	// step, steps aligned to multiples of step since the Unix epoch.
	TeamMetrics(ctx context.Context, team string, start, end time.Time, step time.Duration) ([]TeamMetric, error)
	// MaxTeamMetric is the largest value of metric (MetricConcurrentSandboxes
	// or MetricSandboxStartRate, over steps of StartRateStep) over the
	// interval; another metric → Invalid.
	MaxTeamMetric(ctx context.Context, team string, start, end time.Time, metric string) (MaxTeamMetric, error)
}
