package sim

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Print writes each result as a block of tables.
func Print(w io.Writer, results []*Result) {
	for _, r := range results {
		printOne(w, r)
	}
}

func lat(s OpSummary) string {
	if s.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f", s.P50MS, s.P99MS)
}

func printOne(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n== %d nodes: %d of %d sandboxes live (PostgreSQL max_connections %d) ==\n", r.Nodes, r.Reached, r.TargetSandboxes, r.MaxConnections)
	if r.Error != "" {
		fmt.Fprintf(w, "ENDED EARLY: %s\n", shorten(r.Error, 600))
	}
	fmt.Fprintf(w, "nodes started in %.1fs; fill: %.0fs, %.1f creates/s%s; whole run %.0fs\n", r.StartSeconds, r.FillSeconds, r.FillCreatesPerS, stopped(r.FillStoppedEarly), r.TotalSeconds)

	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	through := "through a node not holding it"
	if r.Nodes == 1 {
		through = "through the only node"
	}
	fmt.Fprintf(t, "operation (%s)\tp50 / p99 ms\tmax ms\tcount\terrors\t429/503 retried\t\n", through)
	row := func(name string, s OpSummary) {
		if s.Count == 0 && s.Errors == 0 && s.Refused == 0 {
			return
		}
		fmt.Fprintf(t, "%s\t%s\t%.1f\t%d\t%d\t%d\t\n", name, lat(s), s.MaxMS, s.Count, s.Errors, s.Refused)
	}
	for _, b := range r.FillBuckets {
		row("create while "+b.Range+" live", b.OpSummary)
	}
	if r.Fill.Errors > 0 {
		fmt.Fprintf(t, "fill creates that failed				%d	\n", r.Fill.Errors)
	}
	row("create, cost burst at 0", r.CostEmpty.Create.Latency)
	row(fmt.Sprintf("create, cost burst at %d", r.CostFull.Sandboxes), r.CostFull.Create.Latency)
	row(fmt.Sprintf("read, cost burst at %d", r.CostFull.Sandboxes), r.CostFull.Read.Latency)
	row(fmt.Sprintf("kill, cost burst at %d", r.CostFull.Sandboxes), r.CostFull.Kill.Latency)
	if v := r.Via; v != nil {
		row("one at a time: create via its node", v.CreateOwn)
		row("one at a time: create via another node", v.CreateOther)
		row("one at a time: read via its node", v.ReadOwn)
		row("one at a time: read via another node", v.ReadOther)
		row("one at a time: a page of 100 of the list", v.ListPage)
	}
	for _, op := range sortedOps(r.Ops) {
		row("mix: "+op, r.Ops[op])
	}
	row("list, all pages", r.ListAll)
	row("signed URL, peer asked first", r.SignedURL.First)
	row("signed URL, peer asked last", r.SignedURL.Last)
	if r.Drain != nil {
		row("drain: resume moved elsewhere", r.Drain.Latency)
	}
	if r.Loss != nil {
		row("read of a lost node's sandbox", r.Loss.Reads)
	}
	t.Flush()
	if r.OpsPerS > 0 {
		fmt.Fprintf(w, "mixed workload: %.1f operations/s over %.0fs\n", r.OpsPerS, r.MixSeconds)
	}

	fmt.Fprintln(w)
	t = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "PostgreSQL per operation (through %s, template of %s, placed on %d nodes: the statements of the nodes involved; all nodes' after the bar)\n", r.CostFull.Via, r.CostFull.Owner, r.CostFull.Involved-1)
	fmt.Fprintln(t, "operation\tstatements\twrites\trows written\trows read\ttransactions\t| all: statements\trows written\trows read\tWAL bytes\tPG CPU ms\tnodes' CPU ms\t")
	per := func(name string, p PerOp) {
		if p.Ops == 0 {
			return
		}
		fmt.Fprintf(t, "%s\t%.1f\t%.1f\t%.1f\t%.0f\t%.1f\t| %.1f\t%.1f\t%.0f\t%.0f\t%.2f\t%.2f\t\n", name, p.Statements, p.Writes, p.RowsWritten, p.RowsRead, p.Transactions,
			p.ClusterStatements, p.ClusterRowsWritten, p.ClusterRowsRead, p.WALBytes, p.PGCPUms, p.SimCPUms)
	}
	per("create at 0 sandboxes", r.CostEmpty.Create)
	per(fmt.Sprintf("create at %d", r.CostFull.Sandboxes), r.CostFull.Create)
	per("read at 0 (+ its create)", r.CostEmpty.Read)
	per(fmt.Sprintf("read at %d", r.CostFull.Sandboxes), r.CostFull.Read)
	per("kill at 0", r.CostEmpty.Kill)
	per(fmt.Sprintf("kill at %d", r.CostFull.Sandboxes), r.CostFull.Kill)
	t.Flush()

	fmt.Fprintln(w)
	t = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(t, "load\theartbeat writes/s\tstatements/s\trows read/s\trows written/s\tWAL KB/s\tPG CPU (cores)\tnodes' CPU (cores)\tother processes' CPU\tsessions\t")
	bg := func(name string, b Background) {
		if b.Seconds == 0 {
			return
		}
		fmt.Fprintf(t, "%s\t%.1f\t%.0f\t%.0f\t%.0f\t%.1f\t%.2f\t%.2f\t%.2f\t%d\t\n", name, b.HeartbeatWritesPerS, b.StatementsPerS, b.RowsReadPerS, b.RowsWrittenPerS, b.WALBytesPerS/1024, b.PGCPUCores, b.SimCPUCores, b.OtherCPUCores, b.Connections)
	}
	bg("idle, 0 sandboxes", r.IdleEmpty)
	bg(fmt.Sprintf("idle, %d sandboxes", r.Reached), r.IdleFull)
	bg("mixed workload", r.Mix)
	t.Flush()
	fmt.Fprintf(w, "sessions of the nodes in PostgreSQL: at most %d %s, %d at the end\n", r.Connections.Max, states(r.Connections.AtMax), r.Connections.End)
	if d := r.Drain; d != nil {
		fmt.Fprintf(w, "drain of %s: %d paused (%.1fs to reach disk, %d did not); resumed through other nodes in %.1fs: %d moved, %d stayed, %d failed\n",
			d.Node, d.Paused, d.WaitDiskS, d.NotOnDisk, d.MoveS, d.Moved, d.Stayed, d.Failed)
	}
	if l := r.Loss; l != nil {
		fmt.Fprintf(w, "loss of %s (%d sandboxes): unhealthy after %.1fs, its sandbox read lost after %.1fs; %d creates meanwhile, %d failed\n",
			l.Node, l.Sandboxes, l.UnhealthyAfterS, l.LostAfterS, l.Creates, l.CreateFails)
	}
	if l := r.Losses; l != nil {
		fmt.Fprintf(w, "loss of %d nodes at once (%s): all unhealthy after %.1fs; of %d sandboxes acknowledged and live, %d listed as left, %d on the lost nodes read lost, %d missing (checked in %.1fs)\n",
			len(l.Nodes), strings.Join(l.Nodes, ", "), l.AllUnhealthyAfterS, l.Sandboxes, l.Listed, l.ReadLost, l.Missing, l.CheckS)
		for _, e := range l.Examples {
			fmt.Fprintf(w, "    missing: %s\n", e)
		}
	}
	if len(r.SignedURL.Status) > 0 {
		fmt.Fprintf(w, "signed URL answers by status: %v\n", r.SignedURL.Status)
	}
	if len(r.CostFull.TopCreate) > 0 {
		fmt.Fprintf(w, "\nstatements per create at %d sandboxes (calls, rows):\n", r.CostFull.Sandboxes)
		for _, b := range r.CostFull.TopCreate {
			fmt.Fprintf(w, "  %6.2f %9.1f  %s\n", b.CallsPer, b.RowsPer, b.Statement)
		}
	}
	if len(r.IdleFull.Top) > 0 {
		fmt.Fprintf(w, "statements per second, idle at %d sandboxes (calls, rows):\n", r.Reached)
		for _, b := range r.IdleFull.Top {
			fmt.Fprintf(w, "  %6.2f %9.1f  %s\n", b.CallsPer, b.RowsPer, b.Statement)
		}
	}
	if len(r.CostFull.TopRead) > 0 {
		fmt.Fprintf(w, "statements per read at %d sandboxes (calls, rows):\n", r.CostFull.Sandboxes)
		for _, b := range r.CostFull.TopRead {
			fmt.Fprintf(w, "  %6.2f %9.1f  %s\n", b.CallsPer, b.RowsPer, b.Statement)
		}
	}
	errs := map[string][]string{}
	for op, s := range r.Ops {
		if len(s.Sample) > 0 {
			errs["mix "+op] = s.Sample
		}
	}
	if r.Drain != nil && len(r.Drain.Latency.Sample) > 0 {
		errs["drain move"] = r.Drain.Latency.Sample
	}
	if r.Loss != nil {
		if l := r.Loss.Creates; l > 0 && len(r.Loss.CreateErrors) > 0 {
			errs["create during the loss"] = r.Loss.CreateErrors
		}
	}
	if len(r.Fill.Sample) > 0 {
		errs["fill create"] = r.Fill.Sample
	}
	refusals := map[string][]string{}
	for op, s := range r.Ops {
		if len(s.RefusedSample) > 0 {
			refusals["mix "+op] = s.RefusedSample
		}
	}
	if len(r.Fill.RefusedSample) > 0 {
		refusals["fill create"] = r.Fill.RefusedSample
	}
	if len(refusals) > 0 {
		fmt.Fprintln(w, "\nrefused for now and retried (first of each operation):")
		for _, op := range sortedKeys(refusals) {
			fmt.Fprintf(w, "  %s: %s\n", op, refusals[op][0])
		}
	}
	if len(errs) > 0 {
		fmt.Fprintln(w, "\nerrors (first of each operation):")
		for _, op := range sortedKeys(errs) {
			fmt.Fprintf(w, "  %s: %s\n", op, errs[op][0])
		}
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(w, "\nnodes' warnings (count, message):")
		for _, l := range r.Warnings {
			fmt.Fprintf(w, "  %7d %s %s\n", l.Count, l.Level, l.Message)
		}
	}
	if len(r.PGErrors) > 0 {
		fmt.Fprintln(w, "\nPostgreSQL's log (count, line):")
		for _, k := range sortedByCount(r.PGErrors, 10) {
			fmt.Fprintf(w, "  %7d %s\n", r.PGErrors[k], shorten(k, 160))
		}
	}
}

// PrintSummary is one markdown table of the headline numbers of every
// size.
func PrintSummary(w io.Writer, results []*Result) {
	fmt.Fprintln(w, "\n| nodes | sandboxes | fill creates/s | create p50/p99 ms | read p50/p99 ms | list (100) p50/p99 ms | statements / create | rows written / create | rows read / create | heartbeat writes/s | PG CPU idle / mix (cores) | sessions max | lost after s | drain move s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		lost, drain := "-", "-"
		if r.Loss != nil {
			lost = fmt.Sprintf("%.1f / %.1f", r.Loss.UnhealthyAfterS, r.Loss.LostAfterS)
		}
		if r.Drain != nil {
			drain = fmt.Sprintf("%d in %.1f", r.Drain.Moved, r.Drain.MoveS)
		}
		c := r.CostFull.Create
		fmt.Fprintf(w, "| %d | %d/%d | %.1f | %s | %s | %s | %.1f | %.1f | %.0f | %.1f | %.2f / %.2f | %d | %s | %s |\n",
			r.Nodes, r.Reached, r.TargetSandboxes, r.FillCreatesPerS, lat(r.Ops["create"]), lat(r.Ops["read"]), lat(r.Ops["list (first page of 100)"]),
			c.Statements, c.RowsWritten, c.RowsRead, r.IdleFull.HeartbeatWritesPerS, r.IdleFull.PGCPUCores, r.Mix.PGCPUCores,
			r.Connections.Max, lost, drain)
	}
}

func states(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func sortedOps(m map[string]OpSummary) []string { return sortedKeys(m) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedByCount(m map[string]int, k int) []string {
	out := sortedKeys(m)
	sort.SliceStable(out, func(i, j int) bool { return m[out[i]] > m[out[j]] })
	if len(out) > k {
		out = out[:k]
	}
	return out
}
