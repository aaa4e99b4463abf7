package perf

import (
	"context"
	"fmt"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// BW is perftest's run_iter_bw for WRITE, READ and SEND: keep up to
// TxDepth requests of size bytes in flight, a completion every CQMod of
// them, Iters in all, to rem's buffer (WRITE and READ). A request
// completes once the responder has acknowledged it (or, for READ, sent
// its data), so the figures count only what the peer confirmed.
func (l *Loop) BW(ctx context.Context, rem Dest, size int) (BWReport, error) {
	n := l.Iters
	op := verbs.WRRDMAWrite
	switch l.Verb {
	case VerbRead:
		op = verbs.WRRDMARead
	case VerbSend:
		op = verbs.WRSend
	}
	posted := make([]time.Time, n)
	completed := make([]time.Time, n)
	scnt, ccnt := 0, 0
	prog := l.progress(fmt.Sprintf("%s %d bytes", l.Name, size), uint64(n)*uint64(size))
	defer prog.Clear()
	for ccnt < n {
		for scnt < n && scnt-ccnt < l.TxDepth {
			wr := verbs.SendWR{WRID: uint64(scnt), Opcode: op, SGList: []verbs.SGE{l.MR.SGE(0, size)}}
			if op != verbs.WRSend {
				wr.RemoteAddr, wr.RKey = rem.VAddr, verbs.RKey(rem.RKey)
			}
			if (scnt+1)%l.CQMod == 0 || scnt == n-1 {
				wr.Flags = verbs.SendSignaled
			}
			posted[scnt] = l.Now()
			if _, err := l.QP.PostSend(wr); err != nil {
				return BWReport{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			scnt++
		}
		wcs, err := l.W.Wait(ctx)
		if err != nil {
			return BWReport{}, err
		}
		now := l.Now()
		for i := range wcs {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				prog.Clear()
				return BWReport{}, l.failed("client", wc, op, fmt.Sprintf("scnt=%d, ccnt=%d", scnt, ccnt))
			}
			for ; ccnt <= int(wc.WRID); ccnt++ {
				completed[ccnt] = now
			}
		}
		prog.Update(uint64(ccnt) * uint64(size))
	}
	return Bandwidth(size, posted, completed, l.CQMod), nil
}

// ReceiveBW is send-bw's server for one size (run_iter_bw_server): with
// the receives posted (PostRecvs), it completes Iters of them and times
// the first to the last.
func (l *Loop) ReceiveBW(ctx context.Context, size int) (BWReport, error) {
	if err := l.pollSend(ctx, func() bool { return l.rs.done == l.Iters }); err != nil {
		return BWReport{}, err
	}
	return ReceiveBandwidth(size, l.Iters, l.rs.first, l.rs.latest), nil
}
