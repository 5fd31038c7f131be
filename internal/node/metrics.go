package node

import (
	"context"
	"fmt"
	"time"

	"cube/internal/cube"
)

// SandboxMetrics returns a current resource sample of a running sandbox.
func (n *Node) SandboxMetrics(ctx context.Context, sandboxID string, start, end time.Time) ([]cube.Metric, error) {
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	var box *container
	sb := n.sandboxes[sandboxID]
	if sb != nil {
		box = sb.box
	}
	n.mu.Unlock()
	if box == nil {
		return []cube.Metric{}, nil
	}
	st, err := box.sb.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("read sandbox stats: %w", err)
	}
	now := time.Now()
	n.mu.Lock()
	pct := 0.0
	if !sb.cpuAt.IsZero() {
		if dt := now.Sub(sb.cpuAt); dt > 0 {
			pct = 100 * float64(st.CPUTime-sb.cpuTime) / float64(dt)
		}
	} else if up := now.Sub(rec.StartedAt); up > 0 {
		pct = 100 * float64(st.CPUTime) / float64(up)
	}
	sb.cpuAt, sb.cpuTime = now, st.CPUTime
	n.mu.Unlock()
	cpus := max(rec.CPUCount, 1)
	m := cube.Metric{
		Time: now.UTC(), CPUCount: cpus, CPUUsedPct: min(pct/float64(cpus), 100),
		MemUsed: int64(st.MemoryBytes), MemTotal: int64(rec.MemoryMB) << 20,
		DiskTotal: int64(rec.DiskSizeMB) << 20,
	}
	// The writable layer lives in the sandbox's memory; envd sees its use.
	if d, err := n.agentAt(box.slot.HostAddr).Metrics(ctx, rec.EnvdToken); err == nil {
		m.DiskUsed, m.DiskTotal, m.MemCache = int64(d.DiskUsed), int64(d.DiskTotal), int64(d.MemCache)
	}
	if (!start.IsZero() && now.Before(start)) || (!end.IsZero() && now.After(end.Add(time.Second))) {
		return []cube.Metric{}, nil
	}
	return []cube.Metric{m}, nil
}
