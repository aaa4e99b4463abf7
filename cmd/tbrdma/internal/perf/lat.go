package perf

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tbrdma/tbrdma/verbs"
)

// Lat is perftest's run_iter_lat for READ and atomics: post one request
// of size bytes to rem's buffer, wait for its completion, Iters times;
// the post times make the statistics.
//
// Atomics are also checked: FETCH_AND_ADD adds 1 each time, so the values
// fetched must count up by one; CMP_AND_SWAP swaps in the value one above
// the one it expects, so every swap after the first must succeed. (perftest
// itself adds 1 and swaps 0 for 0 without checking anything.) The outcome
// is a line on ErrOut.
func (l *Loop) Lat(ctx context.Context, rem Dest, size int) (LatStats, error) {
	posted := make([]time.Time, l.Iters)
	wr := verbs.SendWR{WRID: 1, Flags: verbs.SendSignaled, SGList: []verbs.SGE{l.MR.SGE(0, size)},
		RemoteAddr: rem.VAddr, RKey: verbs.RKey(rem.RKey)}
	cas := l.AtomicType == "CMP_AND_SWAP"
	switch {
	case l.Verb == VerbRead:
		wr.Opcode = verbs.WRRDMARead
	case cas:
		wr.Opcode = verbs.WRAtomicCmpAndSwp
	default:
		wr.Opcode = verbs.WRAtomicFetchAndAdd
		wr.CompareAdd = 1
	}
	var first, cur uint64 // the remote value seen by the first atomic; the one expected now
	bad := 0
	for i := range l.Iters {
		if cas && i > 0 {
			wr.CompareAdd, wr.Swap = cur, cur+1
		}
		posted[i] = l.Now()
		if _, err := l.QP.PostSend(wr); err != nil {
			return LatStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", i, err)
		}
		wcs, err := l.W.Wait(ctx)
		if err != nil {
			return LatStats{}, err
		}
		if wc := &wcs[0]; wc.Status != verbs.WCSuccess {
			return LatStats{}, l.failed("client", wc, wr.Opcode, fmt.Sprintf("scnt=%d, ccnt=%d", i+1, i))
		}
		if l.Verb != VerbAtomic {
			continue
		}
		got := binary.NativeEndian.Uint64(l.Buf[:8])
		switch {
		case i == 0:
			first, cur = got, got
		case got != cur:
			bad++
			cur = got
		}
		if !cas || i > 0 {
			cur++ // FETCH_AND_ADD added 1; CMP_AND_SWAP swapped in cur+1
		}
	}
	if l.Verb == VerbAtomic {
		if bad > 0 {
			fmt.Fprintf(l.ErrOut, "tbrdma: %d of %d %s results were not the expected values\n", bad, l.Iters-1, l.AtomicType)
			return LatStats{}, ErrReported
		}
		fmt.Fprintf(l.ErrOut, "tbrdma: %d %s results checked: the remote value went from %d to %d as expected\n",
			l.Iters, l.AtomicType, first, cur)
	}
	return l.latency(size, posted, 1), nil
}

// CheckAtomicTarget is atomic-lat's server side once the client is done:
// perftest's client adds 1 per FETCH_AND_ADD, or swaps 0 for 0, on the
// first 8 bytes of this side's buffer, which start at 0. It says on ErrOut
// what the Iters atomics left there and returns ErrReported when a
// FETCH_AND_ADD count is wrong.
func (l *Loop) CheckAtomicTarget() error {
	// The engine wrote it with atomic operations; read it as one too.
	v := atomic.LoadUint64((*uint64)(unsafe.Pointer(&l.Buf[0])))
	want := uint64(l.Iters)
	switch {
	case l.AtomicType == "CMP_AND_SWAP":
		// Nothing to expect: perftest swaps 0 for 0, tbrdma counts up.
		fmt.Fprintf(l.ErrOut, "tbrdma: the peer's %d %s left %d in the target\n", l.Iters, l.AtomicType, v)
	case v != want:
		fmt.Fprintf(l.ErrOut, "tbrdma: the peer's %d %s left %d in the target, want %d\n", l.Iters, l.AtomicType, v, want)
		return ErrReported
	default:
		fmt.Fprintf(l.ErrOut, "tbrdma: the peer's %d %s left %d in the target, as expected\n", l.Iters, l.AtomicType, v)
	}
	return nil
}
