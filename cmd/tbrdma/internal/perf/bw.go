package perf

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// BW is perftest's run_iter_bw for WRITE, READ and SEND: keep up to
// TxDepth requests of size bytes in flight on each QP, a completion every
// CQMod of them, Iters per QP, to the buffer of the QP's peer, rem[i] for
// QP i (WRITE and READ). With several QPs (perftest's -q) it posts on each
// in turn, as perftest does, and the report covers all of them: Iters times
// the QPs messages from the first post to the last completion. A request
// completes once the responder has acknowledged it (or, for READ, sent its
// data), so the figures count only what the peer confirmed.
//
// With Bidir (-b) on send-bw it is perftest's run_iter_bi: the peer sends
// too, so the loop also completes the receives PostRecvs posted (and
// re-posts them), and returns once both its sends and the peer's messages
// are all done; the server posts its first SEND only once the client's
// first message has arrived, as perftest's does. The figures are this
// side's sends, as perftest's.
func (l *Loop) BW(ctx context.Context, rem []Dest, size int) (BWReport, error) {
	qps := l.qps()
	if len(rem) < len(qps) {
		return BWReport{}, fmt.Errorf("bandwidth loop: %d QPs, %d peer descriptions", len(qps), len(rem))
	}
	n := l.Iters
	total := n * len(qps)
	op := verbs.WRRDMAWrite
	switch l.Verb {
	case VerbRead:
		op = verbs.WRRDMARead
	case VerbSend:
		op = verbs.WRSend
	}
	if l.Timed != nil {
		return l.bwTimed(ctx, rem, size, op)
	}
	// posted and completed are in the order of the posts and of the
	// completions over all QPs, as perftest's tposted and tcompleted.
	posted := make([]time.Time, total)
	completed := make([]time.Time, total)
	scnt := make([]int, len(qps)) // per QP
	ccnt := make([]int, len(qps))
	totS, totC := 0, 0
	prog := l.progress(fmt.Sprintf("%s %d bytes", l.Name, size), uint64(total)*uint64(size))
	defer prog.Clear()
	list := max(l.PostList, 1) // -l: requests per PostSend call
	wrs := make([]verbs.SendWR, list)
	recv := l.Bidir && l.Verb == VerbSend
	var seen *atomic.Uint64
	if recv {
		// A peer without -b sends nothing back: give up on a silent one
		// rather than wait for ever (bidirSilent).
		var stop func()
		ctx, seen, stop = watchSilence(ctx, peerSilence)
		defer stop()
	}
	for totC < total || recv && l.rs.done < l.rs.total {
		for i, qp := range qps {
			// As perftest: post a whole list while the send queue has
			// room for it (the command keeps -l at most -t, and -n a
			// multiple of it). With -b, send-bw's server sends once the
			// client's first message has come.
			for scnt[i] < n && scnt[i]-ccnt[i]+list <= l.TxDepth && !(recv && l.Server && l.rs.done == 0) {
				s := scnt[i]
				k := min(list, n-s)
				for j := range k {
					wrs[j] = l.bwWR(op, i, s+j, rem[i], size)
				}
				now := l.Now()
				for j := range k {
					posted[totS+j] = now
				}
				if _, err := qp.PostSend(wrs[:k]...); err != nil {
					return BWReport{}, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", i, s, err)
				}
				scnt[i] += k
				totS += k
			}
		}
		wcs, err := l.W.Wait(ctx)
		if err != nil {
			prog.Clear()
			return BWReport{}, l.bidirSilent(ctx, err, totC, total)
		}
		if seen != nil {
			seen.Add(1)
		}
		now := l.Now()
		for i := range wcs {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				prog.Clear()
				return BWReport{}, l.failed(l.bwSide(), wc, op, fmt.Sprintf("scnt=%d, ccnt=%d", totS, totC))
			}
			if wc.Opcode == verbs.WCRecv {
				if err := l.received(wc, now); err != nil {
					return BWReport{}, err
				}
				continue
			}
			q, c := wrQP(wc.WRID), wrCount(wc.WRID)
			if q >= len(qps) {
				return BWReport{}, fmt.Errorf("bandwidth loop: a completion for QP %d of %d", q, len(qps))
			}
			// A signaled completion retires its QP's unsignaled
			// requests before it.
			for ; ccnt[q] <= c; ccnt[q]++ {
				completed[totC] = now
				totC++
			}
		}
		prog.Update(uint64(totC) * uint64(size))
	}
	return Bandwidth(size, posted, completed, l.CQMod), nil
}

// bwWR is BW's request number s of QP i: signaled every CQMod and at the
// last, inline when Inline allows.
func (l *Loop) bwWR(op verbs.WROpcode, i, s int, rem Dest, size int) verbs.SendWR {
	wr := verbs.SendWR{WRID: wrID(i, s), Opcode: op, SGList: []verbs.SGE{l.MR.SGE(i*l.Stride, size)}, Flags: l.inline(size)}
	if op != verbs.WRSend {
		wr.RemoteAddr, wr.RKey = rem.VAddr, verbs.RKey(rem.RKey)
	}
	if (s+1)%l.CQMod == 0 || s == l.Iters-1 {
		wr.Flags |= verbs.SendSignaled
	}
	l.addressUD(&wr, i)
	return wr
}

// bidirSilent is what BW returns when a wait failed with err: under -b's
// silence watch, a line that says how far each direction got and what to
// check, and ErrReported; otherwise err.
func (l *Loop) bidirSilent(ctx context.Context, err error, sent, total int) error {
	if context.Cause(ctx) != errPeerSilent {
		return err
	}
	fmt.Fprintf(l.ErrOut, "tbrdma: %s -b: nothing from %s for %v (this side: %d of %d SENDs acknowledged, %d of %d messages received): a peer without -b (bidirectional) sends nothing back; start both ends with -b, or neither (or the peer was stopped, or the link went down)\n",
		l.Name, PeerLabel("peer", l.QP), peerSilence, sent, total, l.rs.done, l.rs.total)
	return ErrReported
}

// bwSide is where BW's failed completions happen, in perftest's words:
// the client, or with -b either side.
func (l *Loop) bwSide() string {
	if l.Bidir {
		return l.side()
	}
	return "client"
}

// ReceiveBW is send-bw's server for one size (run_iter_bw_server): with
// the receives posted (PostRecvs), it completes Iters of them on each QP
// and times the first to the last.
//
// With AliveCheck set (UC, UD) a lost message is never resent: once no
// message has come for a whole period the server stops, as perftest's
// check_alive does, with its lines (the counts) and no report.
func (l *Loop) ReceiveBW(ctx context.Context, size int) (BWReport, error) {
	if l.Timed != nil {
		return l.receiveTimed(ctx, size)
	}
	wait, stop := ctx, func() {}
	var seen *atomic.Uint64
	if l.AliveCheck > 0 {
		wait, seen, stop = watchSilence(ctx, l.AliveCheck)
	}
	defer stop()
	err := l.pollSend(wait, func() bool {
		if seen != nil {
			seen.Store(uint64(l.rs.done))
		}
		return l.rs.done == l.rs.total
	})
	if err != nil && context.Cause(wait) == errPeerSilent && ctx.Err() == nil {
		fmt.Fprintf(l.ErrOut, " Did not get Message for %v, exiting..\n Total Received=%d, Total Iters Required=%d\n", l.AliveCheck, l.rs.done, l.rs.total)
		fmt.Fprintf(l.ErrOut, "tbrdma: %s: %d of %d messages received, then none for %v: over -c UC or UD a lost message is not resent (perftest's server gives up so too); run again, with fewer iterations (-n) or a smaller -t if it recurs\n",
			l.Name, l.rs.done, l.rs.total, l.AliveCheck)
		return BWReport{}, ErrReported
	}
	if err != nil {
		return BWReport{}, err
	}
	return ReceiveBandwidth(size, l.rs.total, l.rs.first, l.rs.latest), nil
}
