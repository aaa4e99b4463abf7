package perf

import (
	"context"
	"runtime"

	"github.com/tbrdma/tbrdma/verbs"
)

// DefaultSpin is how many empty polls a Waiter makes, yielding the
// processor between them, before it sleeps on the completion channel.
const DefaultSpin = 20

// Waiter waits for completions on a CQ: it busy-polls for a while (like the
// stock tools' default poll mode) and then sleeps on the CQ's completion
// channel, so a slow peer does not cost a whole CPU.
type Waiter struct {
	CQ *verbs.CQ
	Ch *verbs.CompChannel
	// Spin is the number of empty polls before sleeping; 0 means sleep at
	// once (the stock tools' -e event mode).
	Spin int
	wc   [16]verbs.WC
}

// Wait returns at least one completion (valid until the next call), or
// the error that stopped it: a CQ error or ctx's.
func (w *Waiter) Wait(ctx context.Context) ([]verbs.WC, error) {
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
