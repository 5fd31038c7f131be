package cluster

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cube/internal/cube"
)

// The cluster's totals on every node's /metrics: read from the node
// records (each node's last heartbeat) when scraped, so one scrape of any
// node shows the whole service beside that node's own series. The
// records are this node's copy, read by changes (records.go) at most once
// a second however often it is scraped.
var (
	clusterNodes = prometheus.NewDesc("cube_cluster_nodes",
		"Nodes of the cluster by status (unhealthy: no heartbeat within the timeout).", []string{"status"}, nil)
	clusterSandboxes = prometheus.NewDesc("cube_cluster_sandboxes",
		"Running sandboxes on all nodes, as of their last heartbeats.", nil, nil)
	clusterSlots = prometheus.NewDesc("cube_cluster_slots",
		"Network slots of all nodes that heartbeat: total, and used.", []string{"kind"}, nil)
	clusterMemory = prometheus.NewDesc("cube_cluster_memory_bytes",
		"Host memory of all nodes that heartbeat: total, and used.", []string{"kind"}, nil)
	clusterReadable = prometheus.NewDesc("cube_cluster_state_readable",
		"1 when the node records could be read for this scrape, 0 when the state database did not answer.", nil, nil)
)

// Collector returns the collector of the cluster's totals.
func (r *Registry) Collector() prometheus.Collector { return totals{r} }

type totals struct{ r *Registry }

// totalsAge is how old the records the totals are counted from may be.
const totalsAge = time.Second

func (t totals) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterNodes, clusterSandboxes, clusterSlots, clusterMemory, clusterReadable} {
		ch <- d
	}
}

func (t totals) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	recs, err := t.r.nodes(ctx, totalsAge)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(clusterReadable, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(clusterReadable, prometheus.GaugeValue, 1)
	byStatus := map[cube.NodeStatus]int{cube.NodeReady: 0, cube.NodeDraining: 0, cube.NodeStandby: 0, cube.NodeUnhealthy: 0}
	var sandboxes, slots, slotsUsed int
	var mem, memUsed uint64
	for _, rec := range recs {
		v := t.r.view(rec)
		byStatus[v.Status]++
		if v.Status == cube.NodeUnhealthy {
			continue
		}
		sandboxes += rec.Usage.Sandboxes
		slots += rec.Usage.SlotsTotal
		slotsUsed += rec.Usage.SlotsUsed
		mem += rec.Usage.MemoryTotalBytes
		memUsed += rec.Usage.MemoryUsedBytes
	}
	for s, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(clusterNodes, prometheus.GaugeValue, float64(n), string(s))
	}
	ch <- prometheus.MustNewConstMetric(clusterSandboxes, prometheus.GaugeValue, float64(sandboxes))
	ch <- prometheus.MustNewConstMetric(clusterSlots, prometheus.GaugeValue, float64(slots), "total")
	ch <- prometheus.MustNewConstMetric(clusterSlots, prometheus.GaugeValue, float64(slotsUsed), "used")
	ch <- prometheus.MustNewConstMetric(clusterMemory, prometheus.GaugeValue, float64(mem), "total")
	ch <- prometheus.MustNewConstMetric(clusterMemory, prometheus.GaugeValue, float64(memUsed), "used")
}
