package verbs

import (
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
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
	hooks.HoldBusyPollOf(h.conn, d)
}

func (h *engineHooks) SetKernelWait(d time.Duration) (bool, error) {
	return hooks.SetKernelWaitOf(h.conn, d)
}
