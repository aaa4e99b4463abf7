package perf

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/verbs"
)

// WriteLat is perftest's run_iter_lat_write for one size: each side
// WRITEs size bytes into the peer's second half (rem's address), the last
// byte holding its iteration count (mod 256), and spins on the last byte
// of its own second half for the peer's count before writing again. The
// server writes first. The post times make the statistics (half the
// round trip). With Timed it runs for a time (writeLatTimed).
func (l *Loop) WriteLat(ctx context.Context, rem Dest, size int) (LatStats, error) {
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | l.inline(size), SGList: []verbs.SGE{l.MR.SGE(0, size)},
		RemoteAddr: rem.VAddr, RKey: verbs.RKey(rem.RKey)}
	if l.Timed != nil {
		return l.writeLatTimed(ctx, wr, size)
	}
	n := l.Iters
	posted := make([]time.Time, n)
	poll := l.Half + size - 1
	ctx, seen, stop := watchSilence(ctx, peerSilence)
	defer stop()
	for scnt, rcnt := 0, 0; scnt < n || rcnt < n; {
		if rcnt < n && !(scnt == 0 && l.Server) {
			rcnt++
			if err := l.waitByte(ctx, poll, byte(rcnt)); err != nil {
				return LatStats{}, silentPeer(ctx, l.ErrOut, l.Name, l.QP, err)
			}
			seen.Add(1)
		}
		if scnt < n {
			posted[scnt] = l.Now()
			scnt++
			l.Buf[size-1] = byte(scnt) // the previous WRITE has completed
			if _, err := l.QP.PostSend(wr); err != nil {
				return LatStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			wcs, err := l.W.Wait(ctx)
			if err != nil {
				return LatStats{}, err
			}
			if wc := &wcs[0]; wc.Status != verbs.WCSuccess {
				err := l.failed(l.side(), wc, "RDMA_WRITE", fmt.Sprintf("scnt=%d, rcnt=%d", scnt, rcnt))
				l.printCounters()
				return LatStats{}, err
			}
		}
	}
	return l.latency(size, posted, 2), nil
}

// waitByte spins until l.Buf[i] == v, as perftest polls its buffer. The
// byte is written by the engine's receive goroutine (the peer's RDMA
// WRITE): there is no completion to wait on. The function call in the loop
// makes every test a fresh load.
//
// It yields between tests (runtime.Gosched), which lets the receive
// goroutine run only while that goroutine busy-polls its socket too
// (the command turns that on without -e): a goroutine asleep in the
// runtime's network poller is woken by the scheduler only when nothing
// else is runnable, never while another goroutine keeps yielding. So the
// spin is bounded (BusySpin tests), and so is every spin with -e (a few):
// after it, the loop sleeps between tests and the poller runs.
func (l *Loop) waitByte(ctx context.Context, i int, v byte) error {
	limit := BusySpin
	if l.Events {
		limit = 8
	}
	if l.Buf[i] == v {
		return nil
	}
	held := !l.Events
	if held {
		hooks.Of(l.Dev).Spinning(true)
	}
	defer func() {
		if held {
			hooks.Of(l.Dev).Spinning(false)
		}
	}()
	for spins := 1; l.Buf[i] != v; spins++ {
		// Once it sleeps every test is 20 µs or more (a timed run's end
		// comes on time, not 1024 sleeps late).
		if (spins&1023 == 0 || spins >= limit) && ctx.Err() != nil {
			return ctx.Err()
		}
		if spins < limit {
			runtime.Gosched()
			continue
		}
		if held { // the peer is slow: sleep between tests, and let the receive loop sleep
			hooks.Of(l.Dev).Spinning(false)
			held = false
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}
