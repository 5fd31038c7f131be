package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// viaTarget is the cost the cluster's forwarding may add to a create made
// through a node that does not hold the sandbox's template.
const viaTarget = 5.0

// clusterSection shows scripts/bench-cluster.sh's results (the cluster
// subdirectory), when there are any: the via table with its target, and
// the first create that copied the template.
func (p *page) clusterSection() {
	dir := filepath.Join(p.o.Dir, "cluster")
	var rep ViaReport
	if err := readJSON(filepath.Join(dir, "via.json"), &rep); err != nil {
		return
	}
	p.f("## 10. A cluster: through another node\n\n")
	p.f("Two nodes on this host share a PostgreSQL database (`scripts/bench-cluster.sh`); node\n")
	p.f("`%s` holds the template. Each round creates a sandbox through that node (*direct*) and\n", rep.Node)
	p.f("through the other one (*via*), which forwards the request, alternating which goes first,\n")
	p.f("and reads each sandbox %d times (`GET /sandboxes/{id}`) through the same node: the read is\n", rep.Config.Gets)
	p.f("the hop alone. Times are milliseconds.\n\n")
	if cmds, err := os.ReadFile(filepath.Join(dir, "commands.txt")); err == nil {
		p.f("```sh\n%s\n```\n\n", strings.TrimSpace(string(cmds)))
	}
	p.f("| op | path | n | p50 | p95 | avg | min | max |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		p.f("| %s | %s | %d | %s | %s | %s | %s | %s |\n", r.Op, r.Path, r.Count, f1(r.P50), f1(r.P95), f1(r.Avg), f1(r.Min), f1(r.Max))
	}
	p.f("\n| target | measured | verdict |\n|---|---|---|\n")
	p.f("| create through a non-owning node adds ≤ %.0f ms (p50) | %+.1f | %s |\n", viaTarget, rep.AddedCreateP50, verdict(rep.AddedCreateP50, viaTarget, "ms"))
	p.f("| the hop alone (a read, p50) | %+.2f | |\n", rep.AddedGetP50)
	if b, err := os.ReadFile(filepath.Join(dir, "copy.txt")); err == nil {
		v := map[string]int{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, n, ok := strings.Cut(line, " "); ok {
				v[k], _ = strconv.Atoi(n)
			}
		}
		p.f("\nWith `%s` drained, a create through the other node runs there: the first copies the\n", rep.Node)
		p.f("template (%d MB: rootfs, checkpoint, agent) and took %d ms; the next, from the copy, %d ms.\n", v["copy_mb"], v["first"], v["second"])
	}
	p.f("\n")
}
