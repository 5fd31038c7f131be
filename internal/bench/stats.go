package bench

import (
	"math"
	"sort"
)

// Stats summarises a set of latencies in milliseconds. The field names are
// the JSON keys of the original tool's report, so its consumers keep working.
type Stats struct {
	Count int     `json:"count"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Avg   float64 `json:"avg"`
	Std   float64 `json:"std"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
}

// Summarize computes Stats over xs (which it does not modify). The standard
// deviation is the population one and percentiles interpolate linearly
// between closest ranks, as numpy's defaults do, so numbers can be checked
// against a one-line Python computation.
func Summarize(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	avg := sum / float64(len(s))
	var sq float64
	for _, x := range s {
		sq += (x - avg) * (x - avg)
	}
	return Stats{
		Count: len(s),
		Min:   s[0],
		Max:   s[len(s)-1],
		Avg:   avg,
		Std:   math.Sqrt(sq / float64(len(s))),
		P50:   percentileSorted(s, 50),
		P90:   percentileSorted(s, 90),
		P95:   percentileSorted(s, 95),
		P99:   percentileSorted(s, 99),
	}
}

// Percentile returns the p-th percentile (0..100) of xs.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	if len(s) == 1 {
		return s[0]
	}
	p = math.Max(0, math.Min(100, p))
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	frac := rank - float64(lo)
	return s[lo] + (s[hi]-s[lo])*frac
}

// Median is the 50th percentile.
func Median(xs []float64) float64 { return Percentile(xs, 50) }
