package verbs

import (
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport"
)

// The module's own packages reach a Context's QP1, CM counters and tuning
// knobs through internal/hooks: hooks.Of(ctx) returns the context as an
// engineHooks, which is not part of this package's API.
func init() {
	hooks.Register(func(c *Context) hooks.Engine { return (*engineHooks)(c) })
}

// engineHooks is a Context seen as a hooks.Engine (see the method docs
// there).
type engineHooks Context

func (h *engineHooks) ctx() *Context { return (*Context)(h) }

func (h *engineHooks) GSI() hooks.GSI { return h.ctx().gsiPort() }

func (h *engineHooks) CM() *hooks.CMCounters { return &h.ctr.cm }

func (h *engineHooks) SetBusyPoll(d time.Duration) bool {
	return hooks.SetBusyPollOf(h.conn, d)
}

func (h *engineHooks) Spinning(on bool) {
	d := 1
	if !on {
		d = -1
	}
	h.spinners.Add(int32(d))
	if h.busyHold != nil {
		h.busyHold.HoldBusyPoll(d)
	}
}

func (h *engineHooks) SetKernelWait(d time.Duration) (bool, error) {
	return hooks.SetKernelWaitOf(h.conn, d)
}

func (h *engineHooks) OnUnreachable(fn func(*transport.UnreachableError)) {
	if fn == nil {
		h.unreach.fn.Store(nil)
		return
	}
	h.unreach.fn.Store(&fn)
}

// unreachableSink is the default UDP endpoint's Options.OnUnreachable: it
// hands the message to the function set with OnUnreachable, if any. Nothing
// else acts on it; an RC QP toward that peer keeps its retry rules (see
// docs/architecture.md, "ICMP errors"). It exists before the Context, which
// holds it, because the endpoint is opened first.
type unreachableSink struct {
	fn atomic.Pointer[func(*transport.UnreachableError)]
}

func (s *unreachableSink) deliver(e *transport.UnreachableError) {
	if fn := s.fn.Load(); fn != nil {
		(*fn)(e)
	}
}
