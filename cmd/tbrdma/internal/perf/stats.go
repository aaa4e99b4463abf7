package perf

import (
	"math"
	"slices"
	"sort"
	"time"
)

// LatStats are the columns of perftest's latency table, in microseconds
// (or, with perftest's -C, in CPU cycles: LatencyIn).
type LatStats struct {
	Size, Iters                   int
	Min, Max, Typical, Avg, Stdev float64
	P99, P999                     float64
	// Samples are the iters-1 deltas in the order measured (-U prints
	// them); Sorted are the ones the figures keep, in ascending order
	// (-H prints them). Same unit as the figures.
	Samples, Sorted []float64
	// Timed marks a duration mode report (DurationLatency): Iters and Avg
	// are the window's, TPS its transactions per second, and the other
	// figures are 0.
	Timed bool
	TPS   float64
}

// latTail is perftest's LAT_MEASURE_TAIL: the largest samples dropped.
const latTail = 2

// Latency computes perftest's latency report from the post times of
// consecutive iterations (print_report_lat): the iters-1 deltas between
// posts are sorted, the two largest dropped, and each divided by rttFactor
// (2 for SEND and WRITE ping-pong, 1 for READ and atomics). Max is the
// largest kept sample, Typical the median. Stdev keeps perftest's quirk of
// truncating each deviation to whole microseconds before squaring, so the
// figures compare with a stock peer's. ok is false with fewer than four
// samples.
func Latency(size int, posted []time.Time, rttFactor int) (s LatStats, ok bool) {
	return LatencyIn(size, posted, rttFactor, 1)
}

// LatencyIn is Latency in units of perUs per microsecond: 1 for
// microseconds, the CPU's MHz for cycles (perftest's -C, whose figures,
// the truncated deviations too, are computed in cycles).
func LatencyIn(size int, posted []time.Time, rttFactor int, perUs float64) (s LatStats, ok bool) {
	if len(posted) < 4 {
		return LatStats{}, false
	}
	raw := make([]float64, len(posted)-1)
	for i := range raw {
		raw[i] = float64(posted[i+1].Sub(posted[i]).Nanoseconds()) / 1e3 * perUs / float64(rttFactor)
	}
	d := slices.Clone(raw)
	slices.Sort(d)
	n := len(d) - latTail
	var sum float64
	for _, x := range d[:n] {
		sum += x
	}
	avg := sum / float64(n)
	var sq float64
	for _, x := range d[:n] {
		dev := math.Trunc(avg - x)
		sq += dev * dev
	}
	med := d[n/2]
	if n%2 == 0 {
		med = (d[n/2] + d[n/2-1]) / 2
	}
	i99 := int(math.Ceil(float64(n) * 0.99))
	i999 := int(math.Ceil(float64(n) * 0.999))
	return LatStats{
		Size: size, Iters: len(posted),
		Min: d[0], Max: d[n], Typical: med, Avg: avg, Stdev: math.Sqrt(sq / float64(n)),
		P99: d[i99], P999: d[i999], Samples: raw, Sorted: d[:n],
	}, true
}

// MiB is perftest's default bandwidth unit: 2^20 bytes per second.
const MiB = 1 << 20

// Bandwidth computes perftest's bandwidth report (print_report_bw) from the
// post time of every message and the time its completion was seen. The
// average covers first post to last completion; the peak is the best
// per-message time over windows [post i, completion j] with i and j on
// cqMod boundaries. Figures are in MiB/s and Mpps.
func Bandwidth(size int, posted, completed []time.Time, cqMod int) BWReport {
	n := len(posted)
	r := BWReport{Size: uint64(size), Iters: uint64(n)}
	if n == 0 || len(completed) != n {
		return r
	}
	total := completed[n-1].Sub(posted[0]).Seconds()
	if total <= 0 {
		return r
	}
	r.Average = float64(size) * float64(n) / total / MiB
	r.MsgRate = float64(n) / total / 1e6
	if cqMod < 1 {
		cqMod = 1
	}
	if best := peakTime(posted, completed, cqMod); best > 0 {
		r.Peak = float64(size) / best / MiB
	}
	return r
}

// peakTime returns the best time per message, in seconds, over the
// windows [post i, completion j] with i and j on cqMod boundaries (i a
// multiple of cqMod, j+1 one), as perftest's peak; 0 when there is none.
//
// perftest tries every pair, which is quadratic in the completions seen:
// 23 s of silence after a 100000-message test at 64 KiB (-Q 1), an hour
// after a million. The same minimum in O(k log k) for k windows: the time
// per message of window [i, j] is the slope from point (i, posted[i]) to
// point (j+1, completed[j]), and every point of the first kind lies to
// the left of the second, so the least slope from a completion point goes
// to a vertex of the upper convex hull of the post points before it; the
// slope along that hull falls and then rises, so a binary search finds it.
// A clock that did not advance (a window of zero time) is skipped as
// perftest skips it; then the pairs are tried one by one, when there are
// few enough.
func peakTime(posted, completed []time.Time, cqMod int) float64 {
	n := len(posted)
	if n == 0 || len(completed) != n || cqMod < 1 {
		return 0
	}
	type pt struct{ x, y float64 }
	at := func(t time.Time) float64 { return float64(t.Sub(posted[0]).Nanoseconds()) }
	slope := func(a, b pt) float64 { return (b.y - a.y) / (b.x - a.x) }
	var hull []pt
	best := math.Inf(1)
	for i := 0; i+cqMod-1 < n; i += cqMod {
		a := pt{float64(i), at(posted[i])}
		for len(hull) >= 2 {
			o, m := hull[len(hull)-2], hull[len(hull)-1]
			if (m.x-o.x)*(a.y-o.y)-(m.y-o.y)*(a.x-o.x) < 0 {
				break // a right turn: m stays on the upper hull
			}
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, a)
		j := i + cqMod - 1
		b := pt{float64(j + 1), at(completed[j])}
		// the first vertex from which the slope to b no longer falls
		k := sort.Search(len(hull)-1, func(k int) bool { return slope(hull[k], b) <= slope(hull[k+1], b) })
		best = min(best, slope(hull[k], b))
	}
	if best <= 0 {
		return peakTimePairs(posted, completed, cqMod)
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return best / 1e9
}

// maxPeakPairs bounds peakTimePairs' work (a fraction of a second).
const maxPeakPairs = 1 << 24

// peakTimePairs is peakTime by trying every pair of boundaries, as
// perftest does, skipping windows of zero or negative time; 0 when there
// are more than maxPeakPairs pairs or no window took time.
func peakTimePairs(posted, completed []time.Time, cqMod int) float64 {
	n := len(posted)
	if k := n / cqMod; k*k/2 > maxPeakPairs {
		return 0
	}
	best := math.Inf(1)
	for i := 0; i < n; i += cqMod {
		for j := i + cqMod - 1; j < n; j += cqMod {
			if t := completed[j].Sub(posted[i]).Seconds() / float64(j-i+1); t > 0 && t < best {
				best = t
			}
		}
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return best
}

// ReceiveBandwidth is the report of a SEND bandwidth test's receiver
// (run_iter_bw_server): iters messages of size bytes between the first
// receive completion seen (first) and the last (last). There is no peak
// (perftest prints 0.00 for it on the receiving side).
func ReceiveBandwidth(size, iters int, first, last time.Time) BWReport {
	r := BWReport{Size: uint64(size), Iters: uint64(iters)}
	if total := last.Sub(first).Seconds(); total > 0 {
		r.Average = float64(size) * float64(iters) / total / MiB
		r.MsgRate = float64(iters) / total / 1e6
	}
	return r
}
