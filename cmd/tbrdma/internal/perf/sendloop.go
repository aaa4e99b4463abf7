package perf

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// recvState is a SEND test's receive queues for one message size: iters
// receives in all on each QP, at most rx-depth posted at a time on each
// (ctx_set_recv_wqes and the re-posting of run_iter_lat_send /
// run_iter_bw_server).
type recvState struct {
	size          int
	posted, done  int       // over all QPs
	total         int       // Iters on each QP, all QPs together
	qposted       []int     // per QP
	first, latest time.Time // first and latest receive completion seen
	// win, in a timed run once it has started, is its schedule; inWin
	// counts the receives completed in its window.
	win   *window
	inWin int
}

// PostRecvs starts a SEND test's receives for messages of size bytes:
// min(RxDepth, Iters) of them on each QP, into the buffer's second half.
// SendLat and ReceiveBW re-post them as they complete, up to Iters in all
// on each QP.
func (l *Loop) PostRecvs(size int) error {
	qps := l.qps()
	l.rs = recvState{size: size, total: l.Iters * len(qps), qposted: make([]int, len(qps))}
	for i := range qps {
		for range min(l.RxDepth, l.recvLimit()) {
			if err := l.postRecv(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// recvLimit is how many receives each QP posts: Iters, or in a timed run
// (Timed) as many as the run takes.
func (l *Loop) recvLimit() int {
	if l.Timed != nil {
		return math.MaxInt
	}
	return l.Iters
}

// postRecv posts the next receive on QP i.
func (l *Loop) postRecv(i int) error {
	// Every receive lands in the second half of the buffer (QP i's slice
	// of it); the first half is what this side sends.
	wr := verbs.RecvWR{WRID: wrID(i, l.rs.qposted[i]), SGList: []verbs.SGE{l.MR.SGE(l.Half+i*l.Stride, l.grh()+l.rs.size)}}
	if _, err := l.qps()[i].PostRecv(wr); err != nil {
		return fmt.Errorf("couldn't post receive: %d of %d: %w", l.rs.posted+1, l.rs.total, err)
	}
	l.rs.qposted[i]++
	l.rs.posted++
	return nil
}

// pollSend waits for completions until done reports true, counting send
// completions in l.sent and receives in l.rs (re-posting receives while
// fewer than iters were posted). A failed completion ends the test.
func (l *Loop) pollSend(ctx context.Context, done func() bool) error {
	for !done() {
		wcs, err := l.W.Wait(ctx)
		if err != nil {
			return err
		}
		now := l.Now()
		for i := range wcs {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				return l.failed(l.side(), wc, wc.Opcode, fmt.Sprintf("scnt=%d, rcnt=%d", l.sent, l.rs.done))
			}
			if wc.Opcode != verbs.WCRecv {
				l.sent++
				continue
			}
			if err := l.received(wc, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// received counts a successful receive completion wc, seen at now, in
// l.rs and re-posts a receive on its QP while fewer than Iters were posted
// there.
func (l *Loop) received(wc *verbs.WC, now time.Time) error {
	if int(wc.ByteLen)-l.grh() != l.rs.size {
		fmt.Fprintf(l.ErrOut, "tbrdma: received a %d-byte message, want %d\n", int(wc.ByteLen)-l.grh(), l.rs.size)
		return ErrReported
	}
	if l.rs.done == 0 {
		l.rs.first = now
	}
	l.rs.done++
	l.rs.latest = now
	if l.rs.win != nil && l.rs.win.counts(now) {
		l.rs.inWin++
	}
	if q := wrQP(wc.WRID); q < len(l.rs.qposted) && l.rs.qposted[q] < l.recvLimit() {
		return l.postRecv(q)
	}
	return nil
}

// SendLat is perftest's run_iter_lat_send for one size, once PostRecvs
// has posted its receives: the client sends first; then each side waits
// for the peer's message before sending its next one. The post times make
// the statistics (half the round trip). With Timed it runs for a time
// (sendLatTimed).
func (l *Loop) SendLat(ctx context.Context, size int) (LatStats, error) {
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | l.inline(size), SGList: []verbs.SGE{l.MR.SGE(0, size)}}
	l.addressUD(&wr, 0)
	if !l.Server {
		// The client only: a server through tbrdma serve cannot (its
		// device is its sessions' in common), and a dedicated server
		// waits as serve does (issue 18).
		defer l.W.ReceiveInline()()
	}
	if l.Timed != nil {
		return l.sendLatTimed(ctx, wr, size)
	}
	n := l.Iters
	client := !l.Server
	posted := make([]time.Time, n)
	l.sent = 0
	ctx, seen, stop := watchSilence(ctx, peerSilence)
	defer stop()
	for scnt, rcnt := 0, 0; scnt < n || rcnt < n; {
		if rcnt < n && !(scnt == 0 && client) {
			rcnt++
			if err := l.pollSend(ctx, func() bool { return l.rs.done >= rcnt }); err != nil {
				return LatStats{}, silentPeer(ctx, l.ErrOut, l.Name, l.QP, err)
			}
			seen.Add(1)
		}
		if scnt < n {
			// One SEND in flight (tx depth 1): the previous one's ACK has
			// nearly always arrived before the peer's answer.
			if err := l.pollSend(ctx, func() bool { return l.sent == scnt }); err != nil {
				return LatStats{}, silentPeer(ctx, l.ErrOut, l.Name, l.QP, err)
			}
			seen.Add(1)
			posted[scnt] = l.Now()
			if _, err := l.QP.PostSend(wr); err != nil {
				return LatStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			scnt++
		}
	}
	if err := l.pollSend(ctx, func() bool { return l.sent == n }); err != nil {
		return LatStats{}, err
	}
	return l.latency(size, posted, 2), nil
}
