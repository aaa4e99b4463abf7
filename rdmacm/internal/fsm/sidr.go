package fsm

import (
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
)

// SIDR is the active side of one service ID resolution (rdma_cm's UD
// "connect", roce-wire.md §7.8): a SIDR_REQ resent every Interval up to
// MaxRetries times until a SIDR_REP with the same request ID arrives. The
// passive side keeps no timer (the SIDR_REP is sent once), so it needs no
// machine.
type SIDR struct {
	RequestID cmwire.CommID
	TID       uint64
	timing    Timing
	mad       []byte
	left      int
	deadline  time.Time
	done      bool
}

// SIDRTiming is what rdma_cm uses for a SIDR_REQ (cma_resolve_ib_udp):
// timeout_ms = 1 << (CM response timeout − 8), i.e. 4096 ms for 20, and
// max CM retries. Unlike the REQ's, the interval has no packet lifetime
// term.
func SIDRTiming(cmResponse cmwire.Timeout, maxRetries uint8) Timing {
	return Timing{Interval: time.Duration(1<<max(int(cmResponse)-8, 0)) * time.Millisecond, MaxRetries: int(maxRetries)}
}

// NewSIDR returns a resolution that has not sent anything yet.
func NewSIDR(requestID cmwire.CommID, tid uint64, t Timing) *SIDR {
	return &SIDR{RequestID: requestID, TID: tid, timing: t}
}

// Deadline returns when Tick must next run; zero means no timer.
func (s *SIDR) Deadline() time.Time { return s.deadline }

// Done reports whether the resolution ended (reply, give-up or Cancel).
func (s *SIDR) Done() bool { return s.done }

// Timing returns the timers in use.
func (s *SIDR) Timing() Timing { return s.timing }

// Send sends req (a complete SIDR_REQ MAD) and starts its timer.
func (s *SIDR) Send(now time.Time, req []byte) Result {
	var r Result
	if s.mad != nil || s.done {
		return r
	}
	s.mad, s.left = req, s.timing.MaxRetries
	s.deadline = now.Add(s.timing.Interval)
	r.send(req)
	return r
}

// Handle processes a SIDR_REP matched by the caller to this request ID:
// the first one ends the resolution with EvSIDRReply; later ones are
// ignored.
func (s *SIDR) Handle(now time.Time, msg cmwire.Message) Result {
	var r Result
	if s.done || s.mad == nil || msg.Attr() != cmwire.AttrSIDRREP || msg.SIDRREP().RequestID() != s.RequestID {
		return r
	}
	s.Cancel()
	r.Event, r.Msg = EvSIDRReply, msg
	return r
}

// Tick resends the SIDR_REQ or, when the retries are used up, ends the
// resolution with EvUnreachable.
func (s *SIDR) Tick(now time.Time) Result {
	var r Result
	if s.done || s.deadline.IsZero() || now.Before(s.deadline) {
		return r
	}
	if s.left > 0 {
		s.left--
		s.deadline = s.deadline.Add(s.timing.Interval)
		if s.deadline.Before(now) {
			s.deadline = now.Add(s.timing.Interval)
		}
		r.send(s.mad)
		return r
	}
	s.Cancel()
	r.Event = EvUnreachable
	return r
}

// Cancel stops the timer (the ID was destroyed: nothing is sent, as
// cm_destroy_id in SIDR_REQ_SENT).
func (s *SIDR) Cancel() {
	s.done, s.deadline, s.mad = true, time.Time{}, nil
}
