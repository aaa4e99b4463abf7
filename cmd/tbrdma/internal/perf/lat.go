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
//
// With Timed it runs for a time instead, each request posted once the
// previous one completed, and counts those that complete in the window.
func (l *Loop) Lat(ctx context.Context, rem Dest, size int) (LatStats, error) {
	var posted []time.Time
	var win window
	var counted uint64
	if l.Timed == nil {
		posted = make([]time.Time, l.Iters)
	} else {
		win = newWindow(l.Now(), l.Timed.Duration, l.Timed.Margin)
	}
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
	defer l.W.ReceiveInline()()
	var first, cur uint64 // the remote value seen by the first atomic; the one expected now
	bad, i := 0, 0
	for ; l.Timed != nil || i < l.Iters; i++ {
		if cas && i > 0 {
			wr.CompareAdd, wr.Swap = cur, cur+1
		}
		if now := l.Now(); l.Timed == nil {
			posted[i] = now
		} else if win.over(now) {
			break
		}
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
		if l.Timed != nil && win.counts(l.Now()) {
			counted++
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
			fmt.Fprintf(l.ErrOut, "tbrdma: %d of %d %s results were not the expected values\n", bad, i-1, l.AtomicType)
			return LatStats{}, ErrReported
		}
		fmt.Fprintf(l.ErrOut, "tbrdma: %d %s results checked: the remote value went from %d to %d as expected\n",
			i, l.AtomicType, first, cur)
	}
	if l.Timed != nil {
		return DurationLatency(size, counted, win.to.Sub(win.from), 1), nil
	}
	return l.latency(size, posted, 1), nil
}

// CheckAtomicTarget is atomic-lat's server side once the client is done:
// perftest's client adds 1 per FETCH_AND_ADD, or swaps 0 for 0, on the
// first 8 bytes of this side's buffer, which start at 0. It says on ErrOut
// what the Iters atomics left there and returns ErrReported when a
// FETCH_AND_ADD count is wrong. With Timed (the client ran for a time)
// there is no count to expect: it says what is there.
func (l *Loop) CheckAtomicTarget() error {
	// The engine wrote it with atomic operations; read it as one too.
	v := atomic.LoadUint64((*uint64)(unsafe.Pointer(&l.Buf[0])))
	if l.Timed != nil {
		fmt.Fprintf(l.ErrOut, "tbrdma: the peer's timed run of %s left %d in the target\n", l.AtomicType, v)
		return nil
	}
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
