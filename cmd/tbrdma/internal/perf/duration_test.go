package perf

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// stepClock is a loop's clock that moves step forward at every reading,
// so that a timed run ends after a fixed number of readings whatever the
// speed of the machine.
type stepClock struct {
	t    atomic.Int64
	step time.Duration
}

func (c *stepClock) Now() time.Time { return time.Unix(0, c.t.Add(int64(c.step))) }

func TestWindow(t *testing.T) {
	s := time.Unix(100, 0)
	w := newWindow(s, 5*time.Second, time.Second)
	for _, c := range []struct {
		at           time.Duration
		counts, over bool
	}{
		{0, false, false}, {999 * time.Millisecond, false, false}, {time.Second, true, false},
		{3999 * time.Millisecond, true, false}, {4 * time.Second, false, false},
		{4999 * time.Millisecond, false, false}, {5 * time.Second, false, true},
	} {
		now := s.Add(c.at)
		if w.counts(now) != c.counts || w.over(now) != c.over {
			t.Errorf("at %v: counts %v over %v, want %v %v", c.at, w.counts(now), w.over(now), c.counts, c.over)
		}
	}
	// No margin: the window is the whole run.
	if w := newWindow(s, 3*time.Second, 0); !w.counts(s) || w.counts(s.Add(3*time.Second)) {
		t.Errorf("no margin: window %+v", w)
	}
}

func TestDurationBandwidth(t *testing.T) {
	r := DurationBandwidth(65536, 3200, 2*time.Second)
	if r.Size != 65536 || r.Iters != 3200 || r.Peak != 0 || r.Average != 100 || r.MsgRate != 0.0016 {
		t.Errorf("report %+v", r)
	}
	if r := DurationBandwidth(2, 0, 0); r.Average != 0 || r.MsgRate != 0 {
		t.Errorf("empty run: %+v", r)
	}
}

// TestRetireWraps: a completion retires the unsignaled requests before
// it, also where the 32-bit count in the work request ID wraps; one for a
// request that is not in flight is an error, not a loop of 2^32.
func TestRetireWraps(t *testing.T) {
	l := &Loop{TxDepth: 8}
	ccnt := []int{1<<32 - 2}
	wc := verbs.WC{WRID: wrID(0, 1<<32+1), Status: verbs.WCSuccess}
	n, err := l.retire(&wc, ccnt, verbs.WRRDMAWrite)
	if err != nil || n != 4 || ccnt[0] != 1<<32+2 {
		t.Fatalf("retire: %d, %v; ccnt %d", n, err, ccnt[0])
	}
	wc.WRID = wrID(0, 1<<32+100)
	if _, err := l.retire(&wc, ccnt, verbs.WRRDMAWrite); err == nil || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("a request not in flight: %v", err)
	}
	wc.WRID = wrID(3, 0)
	if _, err := l.retire(&wc, ccnt, verbs.WRRDMAWrite); err == nil {
		t.Error("a completion for a QP the test does not have: no error")
	}
}

// TestLoopBWTimed runs write-bw and read-bw's client for a time (-D) with
// a margin: it ends by itself, with messages counted in the window, in
// whole signaled batches, and no peak.
func TestLoopBWTimed(t *testing.T) {
	for _, verb := range []Verb{VerbWrite, VerbRead} {
		server, client := testPair(t, verb, 4096, 16)
		client.CQMod = 4
		clock := &stepClock{step: time.Millisecond}
		client.Now = clock.Now
		client.Timed = &Timed{Duration: 2 * time.Second, Margin: 500 * time.Millisecond}
		rep, err := client.BW(context.Background(), []Dest{server.dest(false)}, 1000)
		if err != nil {
			t.Fatalf("%v: %v\n%s", verb, err, &client.errOut)
		}
		if rep.Size != 1000 || rep.Iters == 0 || rep.Iters%4 != 0 || rep.Peak != 0 || rep.Average <= 0 {
			t.Errorf("%v: report %+v", verb, rep)
		}
		if want := DurationBandwidth(1000, rep.Iters, time.Second); rep != want {
			t.Errorf("%v: report %+v, want the window's figures %+v", verb, rep, want)
		}
	}
}

// TestLoopSendBWTimed runs send-bw for a time on both sides: the receiver
// re-posts its receives for as long as the run lasts (far more messages
// than -n), and both end by themselves with a row.
func TestLoopSendBWTimed(t *testing.T) {
	const size = 500
	server, client := testPair(t, VerbSend, 4096, 8)
	for _, s := range []*testSide{server, client} {
		s.Iters = 5 // ignored in a timed run
		s.Timed = &Timed{Duration: time.Second}
	}
	// The receiver reads its clock more often per message than the
	// sender: a slower clock keeps its run the longer one, as the later
	// start makes it in real runs (else the sender's last SENDs meet a
	// receiver that stopped re-posting, and wait for drainWait).
	server.Now = (&stepClock{step: 100 * time.Microsecond}).Now
	client.Now = (&stepClock{step: time.Millisecond}).Now
	if err := server.PostRecvs(size); err != nil {
		t.Fatal(err)
	}
	var got, sent BWReport
	both(t, server, client, func(s *testSide) error {
		var err error
		if s == server {
			got, err = s.ReceiveBW(context.Background(), size)
		} else {
			sent, err = s.BW(context.Background(), []Dest{{}}, size)
		}
		return err
	})
	if got.Size != size || got.Iters <= 5 || sent.Iters <= 5 {
		t.Errorf("receiver's report %+v, sender's %+v: want more than -n messages", got, sent)
	}
}

// TestLoopBWInfinite runs --run_infinitely: a row per interval until the
// context is done, then the whole run's figures, which cover every row.
func TestLoopBWInfinite(t *testing.T) {
	server, client := testPair(t, VerbWrite, 4096, 16)
	client.Now = (&stepClock{step: time.Millisecond}).Now
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rows []BWReport
	client.Timed = &Timed{Duration: 100 * time.Millisecond, Infinite: true, Row: func(r BWReport) error {
		rows = append(rows, r)
		if len(rows) == 3 {
			cancel()
		}
		return nil
	}}
	rep, err := client.BW(ctx, []Dest{server.dest(false)}, 100)
	if err != nil {
		t.Fatalf("%v\n%s", err, &client.errOut)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	var sum uint64
	for i, r := range rows {
		if r.Iters == 0 || r.Average <= 0 || r.Peak != 0 {
			t.Errorf("row %d: %+v", i, r)
		}
		sum += r.Iters
	}
	if rep.Iters < sum {
		t.Errorf("the run's report has %d iterations, the rows %d", rep.Iters, sum)
	}
}

// TestPrintBWGbits: --report_gbits rows in perftest's layout, with six
// decimals below 0.1 Gb/s (its REPORT_FMT_EXT).
func TestPrintBWGbits(t *testing.T) {
	var b strings.Builder
	r := BWReport{Size: 65536, Iters: 3000, Average: 1000, MsgRate: 0.016}.Gbits()
	PrintBWGbits(&b, r)
	PrintBWGbits(&b, BWReport{Size: 2, Iters: 5, Average: 0.05, MsgRate: 0.000116})
	want := " 65536      3000             0.00               8.39   \t\t   0.016000\n" +
		" 2          5           0.000000            0.050000            0.000116\n"
	if b.String() != want {
		t.Errorf("rows\n got %q\nwant %q", b.String(), want)
	}
	if back := r.MiBs(); back.Average < 999.999 || back.Average > 1000.001 {
		t.Errorf("MiBs(Gbits(1000 MiB/s)) = %v", back.Average)
	}
}
