package stream

import (
	"context"

	"github.com/tbrdma/tbrdma/verbs"
)

// waitCQ blocks until cq (whose completion channel is ch) has at least
// one completion, or ctx ends, and returns the completions polled into
// wc: arm, poll, wait for the event, acknowledge it, poll again. It has
// the shape of verbs.CQ.Wait, which can replace it.
func waitCQ(ctx context.Context, cq *verbs.CQ, ch *verbs.CompChannel, wc []verbs.WC) (int, error) {
	for {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if err := cq.ReqNotify(false); err != nil {
			return 0, err
		}
		// A completion that came before the arm raises no event.
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		got, err := ch.GetEvent(ctx)
		if err != nil {
			return 0, err
		}
		got.AckEvents(1)
	}
}
