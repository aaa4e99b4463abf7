package perf

import (
	"context"
	"time"

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
// (the internal/hooks engine's SetBusyPoll): with the receive loop asleep in the
// runtime's poller, a goroutine that keeps yielding delays its wake-up.
const BusySpin = 50000

// BusyPollWindow is how long a busy-polling context's receive loop keeps
// polling the socket after a packet (the internal/hooks engine's SetBusyPoll).
const BusyPollWindow = 2 * time.Millisecond

// KernelWaitWindow is how long after a packet the receive loop of a
// context that sleeps on completion events (-e) keeps waiting for the next
// one in its own blocking system call rather than in the Go runtime's
// poller (the internal/hooks engine's SetKernelWait): longer than any gap inside a test,
// short enough that an idle process goes back to the poller at once.
const KernelWaitWindow = 50 * time.Millisecond

// Waiter waits for completions on a CQ: it busy-polls for a while (like the
// stock tools' default poll mode) and then sleeps until a completion
// arrives (verbs.CQ.WaitSpin), so a slow peer does not cost a whole CPU.
type Waiter struct {
	CQ *verbs.CQ
	// Ch is the CQ's completion channel, kept for its owner to close
	// after the CQ (closing the CQ ends a Wait in progress).
	Ch *verbs.CompChannel
	// Spin is the number of empty polls before sleeping; 0 means sleep at
	// once (the stock tools' -e event mode).
	Spin int
	// Ctx, when set, is told while the Waiter spins (verbs.SpinPolicy.HoldEngine),
	// so that its busy-polling receive loop does not sleep meanwhile. It
	// must be the CQ's context.
	Ctx *verbs.Context
	// Inline allows ReceiveInline: Ctx carries this test alone (not
	// serve's device, which its other sessions read too).
	Inline bool
	// reading: the Waiter's spins read the socket themselves
	// (ReceiveInline, verbs.SpinPolicy.Inline).
	reading bool
	wc      [16]verbs.WC
}

// ReceiveInline makes the Waiter's busy polls (Spin > 0, Ctx set) read
// Ctx's socket and handle what came themselves, until the returned func is
// called: the completion a latency loop waits for then needs no hand-over
// from the receive loop's goroutine to the poller's and back (-0.4 µs of a
// 13.6 µs read-lat round trip, docs/performance.md, session 13). While it
// is on, packets are received only while the Waiter waits, so it is for a
// loop that does little besides posting and waiting; a Wait that sleeps
// hands the socket back to the receive loop meanwhile. It does nothing
// unless Inline is set, and where the context cannot
// (verbs.Context.SetInlineReceive).
func (w *Waiter) ReceiveInline() (stop func()) {
	if !w.Inline || w.Spin == 0 || w.Ctx == nil || !w.Ctx.SetInlineReceive(true) {
		return func() {}
	}
	w.reading = true
	return func() {
		w.reading = false
		w.Ctx.SetInlineReceive(false)
	}
}

// Wait returns at least one completion (valid until the next call), or
// the error that stopped it: a CQ error or ctx's.
func (w *Waiter) Wait(ctx context.Context) ([]verbs.WC, error) {
	n, err := w.CQ.WaitSpin(ctx, w.wc[:], verbs.SpinPolicy{Polls: w.Spin, HoldEngine: w.Ctx != nil, Inline: w.reading})
	if err != nil {
		return nil, err
	}
	return w.wc[:n], nil
}
