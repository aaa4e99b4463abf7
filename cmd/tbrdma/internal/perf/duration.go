package perf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// Timed is perftest's duration mode (-D, -f, --run_infinitely) for the
// bandwidth loops: instead of Iters messages, the loop runs for Duration
// and counts what completes inside the measurement window, which leaves
// out Margin at each end (the warm-up and the tail; perftest's
// START_STATE, SAMPLE_STATE, STOP_SAMPLE_STATE and END_STATE). The figures
// are those of the window; there is no peak (perftest prints 0.00). With
// Infinite (--run_infinitely) the loop never ends by itself: every
// Duration it prints a row of what completed since the previous one, until
// its context is done.
type Timed struct {
	Duration time.Duration
	Margin   time.Duration
	Infinite bool
	// Row prints one interval's row (Infinite only).
	Row func(BWReport) error
}

// window is a timed run's schedule: it starts at start, counts the
// completions seen from from up to (not including) to, and ends at end.
type window struct{ start, from, to, end time.Time }

func newWindow(start time.Time, d, margin time.Duration) window {
	return window{start: start, from: start.Add(margin), to: start.Add(d - margin), end: start.Add(d)}
}

// counts reports whether a completion seen at now is measured.
func (w window) counts(now time.Time) bool { return !now.Before(w.from) && now.Before(w.to) }

// over reports whether the run is over at now.
func (w window) over(now time.Time) bool { return !now.Before(w.end) }

// DurationBandwidth is the report of a timed run (print_report_bw in
// duration mode): n messages of size bytes completed within span. The
// peak is 0, as perftest's (it measures none in duration mode).
func DurationBandwidth(size int, n uint64, span time.Duration) BWReport {
	r := BWReport{Size: uint64(size), Iters: n}
	if s := span.Seconds(); s > 0 {
		r.Average = float64(size) * float64(n) / s / MiB
		r.MsgRate = float64(n) / s / 1e6
	}
	return r
}

// errRunOver is the cause of the context a timed loop waits with: the
// run's end has come.
var errRunOver = errors.New("the timed run is over")

// untilEnd returns ctx, cancelled with errRunOver at the end of w (by the
// loop's clock at the time of the call).
func (l *Loop) untilEnd(ctx context.Context, w window) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, w.end.Sub(l.Now()), errRunOver)
}

// runOver reports whether a wait on ctx (from untilEnd) failed only
// because the run is over.
func runOver(ctx context.Context, err error) bool {
	return err != nil && errors.Is(context.Cause(ctx), errRunOver)
}

// bwTimed is BW in duration mode: post on each QP in turn, TxDepth in
// flight on each and every CQMod-th signaled, until the run is over; count
// the messages whose completion is seen in the window (with Infinite: in
// the current interval). Then, unlike perftest's run_iter_bw, it waits for
// the signaled requests still in flight (drain).
func (l *Loop) bwTimed(ctx context.Context, rem []Dest, size int, op verbs.WROpcode) (BWReport, error) {
	qps := l.qps()
	scnt := make([]int, len(qps))
	ccnt := make([]int, len(qps))
	sig := make([]int, len(qps)) // per QP: the requests up to its last signaled one
	var counted, total uint64    // in the window (interval); since the start
	start := l.Now()
	win := newWindow(start, l.Timed.Duration, l.Timed.Margin)
	var wctx context.Context = ctx
	if !l.Timed.Infinite {
		var cancel context.CancelFunc
		wctx, cancel = l.untilEnd(ctx, win)
		defer cancel()
	}
	last := start // Infinite: the current interval's start
	for {
		for i, qp := range qps {
			for scnt[i]-ccnt[i] < l.TxDepth {
				s := scnt[i]
				wr := l.bwWR(op, i, s, rem[i], size) // inline, UD's address
				wr.Flags &^= verbs.SendSignaled      // no last request: signaled every CQMod only
				if (s+1)%l.CQMod == 0 {
					wr.Flags |= verbs.SendSignaled
					sig[i] = s + 1
				}
				if _, err := qp.PostSend(wr); err != nil {
					return BWReport{}, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", i, s, err)
				}
				scnt[i]++
			}
		}
		wcs, err := l.W.Wait(wctx)
		now := l.Now()
		switch {
		case l.Timed.Infinite && err != nil && ctx.Err() != nil:
			// Interrupted: the run's figures, start to now.
			l.drain(context.WithoutCancel(ctx), ccnt, sig, op)
			return DurationBandwidth(size, total, now.Sub(start)), nil
		case runOver(wctx, err):
			l.drain(ctx, ccnt, sig, op)
			return DurationBandwidth(size, counted, win.to.Sub(win.from)), nil
		case err != nil:
			return BWReport{}, err
		}
		for i := range wcs {
			n, err := l.retire(&wcs[i], ccnt, op)
			if err != nil {
				return BWReport{}, err
			}
			total += uint64(n)
			if l.Timed.Infinite || win.counts(now) {
				counted += uint64(n)
			}
		}
		if l.Timed.Infinite && now.Sub(last) >= l.Timed.Duration {
			if err := l.Timed.Row(DurationBandwidth(size, counted, now.Sub(last))); err != nil {
				return BWReport{}, err
			}
			counted, last = 0, now
		}
		if !l.Timed.Infinite && win.over(now) {
			l.drain(ctx, ccnt, sig, op)
			return DurationBandwidth(size, counted, win.to.Sub(win.from)), nil
		}
	}
}

// drainWait bounds how long a timed run waits, once it is over, for the
// completions of the requests it signaled (drain).
const drainWait = 5 * time.Second

// drain waits, once a timed run is over, until the peer has acknowledged
// every signaled request (and so the unsignaled ones before them), so that
// none is still in flight when the test's end closes the QPs: perftest's
// loop leaves them, and a responder that tears its QP down on the closing
// exchange drops them (rxe does not count them either). It gives up
// silently after drainWait (a peer that stopped receiving, e.g. a SEND
// server whose run ended first) or on a failed completion: the figures
// are those of the window, already taken.
func (l *Loop) drain(ctx context.Context, ccnt, sig []int, op verbs.WROpcode) {
	ctx, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	for q := 0; q < len(sig); {
		if ccnt[q] >= sig[q] {
			q++
			continue
		}
		wcs, err := l.W.Wait(ctx)
		if err != nil {
			return
		}
		for i := range wcs {
			if wcs[i].Status != verbs.WCSuccess {
				return
			}
			if _, err := l.retire(&wcs[i], ccnt, op); err != nil {
				return
			}
		}
	}
}

// retire accounts for a send completion of a timed run: it retires its
// QP's requests up to the one it signals (the unsignaled ones before it)
// and returns how many. The counts in the work request IDs are 32 bits
// and wrap in a long run; a QP has at most TxDepth requests in flight.
func (l *Loop) retire(wc *verbs.WC, ccnt []int, op verbs.WROpcode) (int, error) {
	if wc.Status != verbs.WCSuccess {
		return 0, l.failed("client", wc, op, fmt.Sprintf("qp %d ccnt=%d", wrQP(wc.WRID), ccnt[min(wrQP(wc.WRID), len(ccnt)-1)]))
	}
	q := wrQP(wc.WRID)
	if q >= len(ccnt) {
		return 0, fmt.Errorf("bandwidth loop: a completion for QP %d of %d", q, len(ccnt))
	}
	n := int(uint32(wrCount(wc.WRID)+1) - uint32(ccnt[q]))
	if n < 1 || n > l.TxDepth {
		return 0, fmt.Errorf("bandwidth loop: a completion for request %d of QP %d, which has %d to %d in flight", wrCount(wc.WRID), q, ccnt[q], ccnt[q]+l.TxDepth-1)
	}
	ccnt[q] += n
	return n, nil
}

// receiveTimed is ReceiveBW in duration mode (run_iter_bw_server): the
// clock starts at the first receive completion, as perftest's does; the
// receives are re-posted as they complete until the run is over, and
// those completed in the window are counted. With Infinite it prints a
// row every Duration until ctx is done.
func (l *Loop) receiveTimed(ctx context.Context, size int) (BWReport, error) {
	if err := l.pollSend(ctx, func() bool { return l.rs.done > 0 }); err != nil {
		return BWReport{}, err
	}
	win := newWindow(l.rs.first, l.Timed.Duration, l.Timed.Margin)
	l.rs.win = &win
	l.rs.inWin = 1 // the first receive opens the window when there is no margin
	if l.Timed.Margin > 0 {
		l.rs.inWin = 0
	}
	if l.Timed.Infinite {
		return l.receiveEndless(ctx, size)
	}
	wctx, cancel := l.untilEnd(ctx, win)
	defer cancel()
	err := l.pollSend(wctx, func() bool { return win.over(l.Now()) })
	if err != nil && !runOver(wctx, err) {
		return BWReport{}, err
	}
	return DurationBandwidth(size, uint64(l.rs.inWin), win.to.Sub(win.from)), nil
}

// receiveEndless is receiveTimed's --run_infinitely: every receive
// counts, a row per Duration, until ctx is done; then the whole run's
// figures.
func (l *Loop) receiveEndless(ctx context.Context, size int) (BWReport, error) {
	l.rs.win = nil
	last, base := l.rs.first, 0 // the interval's start, and l.rs.done then
	var rowErr error
	err := l.pollSend(ctx, func() bool {
		now := l.Now()
		if now.Sub(last) < l.Timed.Duration {
			return false
		}
		rowErr = l.Timed.Row(DurationBandwidth(size, uint64(l.rs.done-base), now.Sub(last)))
		last, base = now, l.rs.done
		return rowErr != nil
	})
	switch {
	case rowErr != nil:
		return BWReport{}, rowErr
	case err != nil && ctx.Err() != nil:
		return DurationBandwidth(size, uint64(l.rs.done), l.rs.latest.Sub(l.rs.first)), nil
	}
	return BWReport{}, err
}
