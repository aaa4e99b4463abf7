package cli

import (
	"io"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// fakeWaiter records the wait a serveWait last set.
type fakeWaiter struct{ busy, kernel time.Duration }

func (f *fakeWaiter) SetBusyPoll(d time.Duration) bool { f.busy = d; return true }
func (f *fakeWaiter) SetKernelWait(d time.Duration) (bool, error) {
	f.kernel = d
	return true, nil
}

// TestServeWaitFollowsSessions: a served device waits in the kernel exactly
// while its sessions are all ones a dedicated server would run that way
// (bandwidth at the path MTU, -e), and polls after each packet again as soon
// as a latency or large-segment receiving session starts, or the last
// kernel-wait session ends.
func TestServeWaitFollowsSessions(t *testing.T) {
	f := &fakeWaiter{busy: perf.BusyPollWindow} // runServe's default
	w := newServeWait(f, io.Discard)
	check := func(step string, kernel bool) {
		t.Helper()
		want := fakeWaiter{busy: perf.BusyPollWindow}
		if kernel {
			want = fakeWaiter{kernel: perf.KernelWaitWindow}
		}
		if *f != want {
			t.Errorf("%s: busy poll %v, kernel wait %v; want %v, %v", step, f.busy, f.kernel, want.busy, want.kernel)
		}
	}
	leaveAny := w.join(waitAny)
	check("a large-segment sender alone", false)
	bw1 := w.join(waitKernel)
	check("one write-bw at the path MTU", true)
	bw2 := w.join(waitKernel)
	check("two of them", true)
	lat := w.join(waitPoll)
	check("a read-lat beside them", false)
	bw1()
	bw1() // a second call is a no-op
	check("one bandwidth session ended, read-lat still on", false)
	lat()
	check("read-lat ended, one bandwidth session left", true)
	bw2()
	check("all ended", false)
	leaveAny()
	check("idle", false)
	var none *serveWait // a dedicated test has none
	none.join(waitKernel)()
}

// TestServedWaitKind: each test gets the wait its dedicated server picks
// (perftest.setup).
func TestServedWaitKind(t *testing.T) {
	for _, tc := range []struct {
		test   string
		seg    int
		events bool
		want   waitKind
	}{
		{"write-bw", 0, false, waitKernel},
		{"write-bw", 61440, false, waitPoll},
		{"read-bw", 61440, false, waitAny}, // serve sends the data
		{"read-bw", 0, false, waitKernel},
		{"send-bw", 0, false, waitKernel},
		{"read-lat", 0, false, waitPoll},
		{"write-lat", 0, true, waitKernel},
	} {
		k := servedKinds[tc.test]
		if k == nil {
			t.Fatalf("no perftest kind %q", tc.test)
		}
		pt := &perftest{o: &perftestOptions{Kind: k, Events: tc.events}, seg: tc.seg}
		if got := pt.servedWaitKind(); got != tc.want {
			t.Errorf("%s seg %d -e %v: wait %v, want %v", tc.test, tc.seg, tc.events, got, tc.want)
		}
	}
}
