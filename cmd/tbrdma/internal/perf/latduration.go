package perf

import (
	"context"
	"fmt"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// This file holds the latency loops' duration mode (-D, -f), as
// perftest's run_iter_lat_write, run_iter_lat_send and run_iter_lat in
// duration mode: the ping-pong (or the READ or atomic after its
// completion) runs for Timed.Duration and counts the transactions that
// complete inside the window, which leaves Timed.Margin out at each end.
// The report is print_report_lat_duration's: the transactions counted,
// the average latency (the window over the count, halved for the
// ping-pongs) and the transactions per second. There are no samples, so
// no minimum, maximum, typical value or percentiles.

// DurationLatency is the report of a timed latency run: n transactions
// of size bytes completed within span, rttFactor 2 for the ping-pongs
// (WRITE, SEND), 1 for READ and atomics. An empty window gives zeros
// (perftest divides by zero).
func DurationLatency(size int, n uint64, span time.Duration, rttFactor int) LatStats {
	s := LatStats{Size: size, Iters: int(n), Timed: true}
	if n > 0 && span > 0 {
		us := float64(span) / float64(time.Microsecond)
		s.Avg = us / float64(rttFactor) / float64(n)
		s.TPS = float64(n) / span.Seconds()
	}
	return s
}

// writeLatTimed is WriteLat in duration mode: the clock starts with the
// loop on each side; each side stops when its run is over, also while it
// waits for the peer's WRITE. A failed completion after the run's end (the
// peer ended first and closed its QP) ends the run quietly. A peer that
// stops answering mid-run ends it with watchSilence's error, as WriteLat.
func (l *Loop) writeLatTimed(ctx context.Context, wr verbs.SendWR, size int) (LatStats, error) {
	poll := l.Half + size - 1
	ctx, seen, stop := watchSilence(ctx, peerSilence)
	defer stop()
	win := newWindow(l.Now(), l.Timed.Duration, l.Timed.Margin)
	wctx, cancel := l.untilEnd(ctx, win)
	defer cancel()
	var n uint64
	var posted time.Time
	var rtt time.Duration // the longest round trip seen
	l.due = nil
	for scnt, rcnt := 0, 0; ; {
		if !(scnt == 0 && l.Server) {
			rcnt++
			err := l.waitByte(wctx, poll, byte(rcnt))
			if runOver(wctx, err) {
				if scnt > 0 {
					l.due = &answerDue{off: poll, want: byte(rcnt), rtt: rtt}
				}
				break
			}
			if err != nil {
				return LatStats{}, silentPeer(ctx, l.ErrOut, l.Name, l.QP, err)
			}
			seen.Add(1)
		}
		at := l.Now() // one clock read per round trip for both uses
		if scnt > 0 {
			rtt = max(rtt, at.Sub(posted))
		}
		if win.over(at) {
			break
		}
		scnt++
		l.Buf[size-1] = byte(scnt) // the previous WRITE has completed
		posted = at
		if _, err := l.QP.PostSend(wr); err != nil {
			return LatStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		wcs, err := l.W.Wait(ctx)
		if err != nil {
			return LatStats{}, err
		}
		now := l.Now()
		if wc := &wcs[0]; wc.Status != verbs.WCSuccess {
			if win.over(now) {
				break
			}
			return LatStats{}, l.failed(l.side(), wc, "RDMA_WRITE", fmt.Sprintf("scnt=%d, rcnt=%d", scnt, rcnt))
		}
		if win.counts(now) {
			n++
		}
	}
	return DurationLatency(size, n, win.to.Sub(win.from), 2), nil
}

// answerDue is the peer's answer to a timed write-lat's last WRITE, still
// due when the run ended: the byte of the buffer it sets and its value,
// and the longest round trip of the run.
type answerDue struct {
	off  int
	want byte
	rtt  time.Duration
}

// Bounds of AwaitAnswer's wait: answerWaitRTTs round trips of the run's
// longest, at least answerWaitMin, at most answerWaitMax.
const (
	answerWaitRTTs = 8
	answerWaitMin  = 20 * time.Millisecond
	answerWaitMax  = 2 * time.Second
)

// AwaitAnswer is the end of a timed write-lat whose peer is not known to
// be done (with -R no TCP connection says so): if the run ended while the
// peer's answer to the last WRITE was due, it waits for that answer to
// land, so that the engine acknowledges it before the QP closes, for at
// most answerWaitRTTs of the run's longest round trip (a peer whose own
// run ended first sends none). perftest's server waits for its WRITE's
// completion without looking at its clock: unacknowledged, it would retry
// until its retries run out. It reports whether the answer came.
func (l *Loop) AwaitAnswer(ctx context.Context) bool {
	d := l.due
	if d == nil {
		return false
	}
	l.due = nil
	wait := min(max(answerWaitRTTs*d.rtt, answerWaitMin), answerWaitMax)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return l.waitByte(ctx, d.off, d.want) == nil
}

// sendLatTimed is SendLat in duration mode: as perftest's, each side's
// clock starts at its first receive, and the receives completed in the
// window are counted; each side stops when its run is over, also while
// it waits for the peer's message (a peer silent mid-run fails it, as
// SendLat). Then it waits a while (drainWait) for
// its last SEND's acknowledgement, whatever its outcome: a peer that
// ended first may have closed its QP.
func (l *Loop) sendLatTimed(ctx context.Context, wr verbs.SendWR, size int) (LatStats, error) {
	client := !l.Server
	l.sent = 0
	l.rs.win = nil
	ctx, seen, stop := watchSilence(ctx, peerSilence)
	defer stop()
	var win window
	wctx, cancel := context.WithCancel(ctx) // until the first receive starts the clock
	defer func() { cancel() }()
	started := false
	scnt := 0
	for rcnt := 0; ; {
		if !(scnt == 0 && client) {
			rcnt++
			err := l.pollSend(wctx, func() bool { return l.rs.done >= rcnt })
			if runOver(wctx, err) {
				break
			}
			if err != nil {
				return LatStats{}, silentPeer(ctx, l.ErrOut, l.Name, l.QP, err)
			}
			seen.Add(1)
			if !started {
				started = true
				win = newWindow(l.rs.first, l.Timed.Duration, l.Timed.Margin)
				l.rs.win = &win
				l.rs.inWin = 0
				if l.Timed.Margin == 0 {
					l.rs.inWin = 1 // the first receive opens the window
				}
				cancel()
				wctx, cancel = l.untilEnd(ctx, win)
			}
		}
		if started && win.over(l.Now()) {
			break
		}
		err := l.pollSend(wctx, func() bool { return l.sent == scnt }) // one SEND in flight
		if runOver(wctx, err) {
			break
		}
		if err != nil {
			return LatStats{}, silentPeer(ctx, l.ErrOut, l.Name, l.QP, err)
		}
		seen.Add(1)
		if _, err := l.QP.PostSend(wr); err != nil {
			return LatStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		scnt++
	}
	l.drainSends(ctx, scnt)
	return DurationLatency(size, uint64(l.rs.inWin), win.to.Sub(win.from), 2), nil
}

// drainSends waits up to drainWait for the completion of the SEND still
// in flight once a timed send-lat is over, whatever its status; receives
// that complete meanwhile are not counted (the run is over). A failed
// completion ends the wait: the QP is in error, its requests flushed.
func (l *Loop) drainSends(ctx context.Context, scnt int) {
	l.rs.win = nil
	ctx, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	for l.sent < scnt {
		wcs, err := l.W.Wait(ctx)
		if err != nil {
			return
		}
		for i := range wcs {
			switch {
			case wcs[i].Status != verbs.WCSuccess:
				return
			case wcs[i].Opcode != verbs.WCRecv:
				l.sent++
			}
		}
	}
}
