package rdmacm_test

// The connect/disconnect half of the soak in docs/reliability.md:
//
//	go test ./rdmacm -count=1 -run '^TestConnectCyclesFlat$' -v -soak.out=../docs/reliability.md
//
// runs 1 000 cycles and rewrites the table between
// <!-- soak-cycles-begin --> and <!-- soak-cycles-end --> in the file.

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/internal/docsection"
	"github.com/tbrdma/tbrdma/internal/procstat"
	"github.com/tbrdma/tbrdma/rdmacm"
)

var (
	soakCycles = flag.Int("soak.cycles", 1000, "connect/disconnect cycles of TestConnectCyclesFlat")
	soakOut    = flag.String("soak.out", "", "after TestConnectCyclesFlat passes, rewrite its table in this Markdown file (docs/reliability.md) between <!-- soak-cycles-begin --> and <!-- soak-cycles-end -->")
)

type cycleSample struct {
	cycle      int
	elapsed    time.Duration
	goroutines int
	fds        int
	heap       uint64 // live heap after GC
	rss        uint64
	timewait   int
}

// Tolerances: a finished cycle leaves no goroutine and no fd behind, so
// those must be back at the cycle-100 value at every 100th cycle (give or
// take a timer callback still returning: 2 goroutines). The heap holds
// the timewait records of the last 2.048 s of cycles, then they expire;
// cycle 100's figure is taken before they all exist.
// After the listener closes, the timewait records are gone and the heap
// must be back within 256 KiB of cycle 100's: a leak of 300 bytes per
// cycle (900 cycles) would exceed it.
const (
	cycleGoroutineTol = 2
	cycleHeapTol      = 2 << 20
	cycleFinalHeapTol = 256 << 10
)

// TestConnectCyclesFlat: 1 000 Dial / Accept / SEND / Close cycles over
// loopback UDP (as TestConnectCyclesUDP), sampling goroutines, open file
// descriptors, the live heap and RSS every 100 cycles. From cycle 100 on,
// fds must not change at all and goroutines and heap stay within the
// tolerances; after closing the contexts, goroutines and fds are back to
// where they were before the test.
func TestConnectCyclesFlat(t *testing.T) {
	n := *soakCycles
	if testing.Short() {
		n = min(n, 300)
	}
	if n < 200 {
		t.Fatalf("-soak.cycles=%d: at least 200 are needed to judge flatness", n)
	}
	runtime.GC()
	g0, f0 := runtime.NumGoroutine(), procstat.OpenFDs()
	p := newPair(t, true)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var samples []cycleSample
	start := time.Now()
	cycles(t, p, 7602, n, func(i int) {
		st := serverClean(t, p, i, 0)
		if (i+1)%100 != 0 {
			return
		}
		s := cycleSample{cycle: i + 1, elapsed: time.Since(start), goroutines: runtime.NumGoroutine(), fds: procstat.OpenFDs(),
			heap: heap(), rss: procstat.RSS(), timewait: st.Timewait}
		samples = append(samples, s)
		fmt.Fprintf(os.Stderr, "cycle %5d: %.1f s, %d goroutines, %d open fds, live heap %.2f MiB, RSS %.1f MiB, %d server connections in timewait\n",
			s.cycle, s.elapsed.Seconds(), s.goroutines, s.fds, float64(s.heap)/(1<<20), float64(s.rss)/(1<<20), s.timewait)
	})
	elapsed := time.Since(start)
	// The listener is closed: the server's dispatcher, and with it the
	// timewait records, go when no ID uses the context any more.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := rdmacm.StateOf(p.b); !ok {
			break
		}
		if time.Now().After(deadline) { // a hang guard
			st, _ := rdmacm.StateOf(p.b)
			t.Fatalf("the server dispatcher is still there 10 s after the listener closed: %+v", st)
		}
	}
	final := cycleSample{cycle: n, elapsed: time.Since(start), goroutines: runtime.NumGoroutine(), fds: procstat.OpenFDs(), heap: heap(), rss: procstat.RSS()}
	fmt.Fprintf(os.Stderr, "listener closed: %d goroutines, %d open fds, live heap %.2f MiB, RSS %.1f MiB\n",
		final.goroutines, final.fds, float64(final.heap)/(1<<20), float64(final.rss)/(1<<20))
	base := samples[0]
	if final.heap > base.heap+cycleFinalHeapTol {
		t.Errorf("live heap %d bytes after the last cycle and the listener's close, %d at cycle %d with %d connections in timewait: a leak of %d bytes per cycle",
			final.heap, base.heap, base.cycle, base.timewait, (final.heap-base.heap)/uint64(n-base.cycle))
	}
	for _, s := range samples[1:] {
		if s.goroutines > base.goroutines+cycleGoroutineTol {
			t.Errorf("cycle %d: %d goroutines, %d at cycle %d", s.cycle, s.goroutines, base.goroutines, base.cycle)
		}
		if base.fds >= 0 && s.fds != base.fds {
			t.Errorf("cycle %d: %d open file descriptors, %d at cycle %d", s.cycle, s.fds, base.fds, base.cycle)
		}
		if s.heap > base.heap+cycleHeapTol {
			t.Errorf("cycle %d: live heap %d bytes, %d at cycle %d", s.cycle, s.heap, base.heap, base.cycle)
		}
	}
	p.close()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > g0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // a hang guard: goroutines end asynchronously after Close
			t.Errorf("%d goroutines after closing both contexts, %d before the test", runtime.NumGoroutine(), g0)
			break
		}
	}
	gEnd, fEnd := runtime.NumGoroutine(), procstat.OpenFDs()
	if fEnd > f0 {
		t.Errorf("%d open file descriptors after closing both contexts, %d before the test", fEnd, f0)
	}
	if *soakOut == "" || t.Failed() {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s: %d cycles in %.2f s, Go %s, %d CPUs.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		n, elapsed.Seconds(), runtime.Version(), runtime.NumCPU())
	b.WriteString("| cycle | time | goroutines | open fds | live heap (after GC) | RSS | server connections in timewait |\n|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "| %d | %.2f s | %d | %d | %.2f MiB | %.1f MiB | %d |\n", s.cycle, s.elapsed.Seconds(), s.goroutines, s.fds,
			float64(s.heap)/(1<<20), float64(s.rss)/(1<<20), s.timewait)
	}
	fmt.Fprintf(&b, "| listener closed | %.2f s | %d | %d | %.2f MiB | %.1f MiB | — |\n", final.elapsed.Seconds(), final.goroutines, final.fds,
		float64(final.heap)/(1<<20), float64(final.rss)/(1<<20))
	fmt.Fprintf(&b, "\nAfter closing both contexts: %d goroutines (%d before the test), %d open fds (%d before).\n", gEnd, g0, fEnd, f0)
	path := *soakOut
	if err := docsection.Replace(path, "<!-- soak-cycles-begin -->", "<!-- soak-cycles-end -->", b.String()); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote the connect/disconnect cycles table in %s", path)
}
