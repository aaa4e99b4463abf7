package perf

import (
	"context"
	"runtime"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/verbs"
)

// DefaultSpin is how many empty polls a Waiter makes, yielding the
// processor between them, before it sleeps on the completion channel.
const DefaultSpin = 20

// BusySpin is the Waiter's spin count in busy-poll mode (the latency
// tests without -e): tens of milliseconds of polling at ~0.1-1 µs per
// round, far longer than a round trip, so that a test in progress never
// sleeps, and yet bounded, so that a stalled peer does not cost a core for
// ever. Busy polling pays only together with the engine's own
// (verbs.Context.SetBusyPoll): with the receive loop asleep in the
// runtime's poller, a goroutine that keeps yielding delays its wake-up.
const BusySpin = 50000

// BusyPollWindow is how long a busy-polling context's receive loop keeps
// polling the socket after a packet (verbs.Context.SetBusyPoll).
const BusyPollWindow = 2 * time.Millisecond

// KernelWaitWindow is how long after a packet the receive loop of a
// context that sleeps on completion events (-e) keeps waiting for the next
// one in its own blocking system call rather than in the Go runtime's
// poller (verbs.Context.SetKernelWait): longer than any gap inside a test,
// short enough that an idle process goes back to the poller at once.
const KernelWaitWindow = 50 * time.Millisecond

// Waiter waits for completions on a CQ: it busy-polls for a while (like the
// stock tools' default poll mode) and then sleeps on the CQ's completion
// channel, so a slow peer does not cost a whole CPU.
type Waiter struct {
	CQ *verbs.CQ
	Ch *verbs.CompChannel
	// Spin is the number of empty polls before sleeping; 0 means sleep at
	// once (the stock tools' -e event mode).
	Spin int
	// Ctx, when set, is told while the Waiter spins (verbs.Context.Spinning),
	// so that its busy-polling receive loop does not sleep meanwhile.
	Ctx *verbs.Context
	wc  [16]verbs.WC
}

// Wait returns at least one completion (valid until the next call), or
// the error that stopped it: a CQ error or ctx's.
func (w *Waiter) Wait(ctx context.Context) ([]verbs.WC, error) {
	if w.Ctx != nil && w.Spin > 0 {
		hooks.Of(w.Ctx).Spinning(true)
		held := true
		defer func() {
			if held {
				hooks.Of(w.Ctx).Spinning(false)
			}
		}()
		return w.wait(ctx, &held)
	}
	return w.wait(ctx, nil)
}

func (w *Waiter) wait(ctx context.Context, held *bool) ([]verbs.WC, error) {
	for spins := 0; ; spins++ {
		n, err := w.CQ.Poll(w.wc[:])
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return w.wc[:n], nil
		}
		if spins < w.Spin {
			if spins&255 == 255 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			runtime.Gosched()
			continue
		}
		if held != nil && *held { // about to sleep: let the receive loop sleep too
			hooks.Of(w.Ctx).Spinning(false)
			*held = false
		}
		if err := w.CQ.ReqNotify(false); err != nil {
			return nil, err
		}
		if n, err = w.CQ.Poll(w.wc[:]); err != nil {
			return nil, err
		} else if n > 0 {
			return w.wc[:n], nil
		}
		if _, err := w.Ch.GetEvent(ctx); err != nil {
			return nil, err
		}
		w.CQ.AckEvents(1)
		spins = w.Spin // poll once more, then sleep again if still empty
	}
}
