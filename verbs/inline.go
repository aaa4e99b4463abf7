package verbs

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// Inline receive: a caller that spins on its completions can do the
// receive loop's work itself, in its own goroutine or thread, instead of
// waiting for the loop to be scheduled. It is what tbrdma's C library uses
// for a C program that busy-polls ibv_poll_cq: that thread is not a
// goroutine, so the cooperative busy polling of hooks.Engine.Spinning (a
// spinner that yields to the receive loop on the same processor) cannot
// work for it, and two threads spinning on one core hand it over only at
// the kernel's scheduler tick.
//
// While inline receive is on, the receive loop does not read: it is
// kicked out of a blocked read by a read deadline in the past and waits.
// ReceiveInline reads what is queued without waiting and handles it, under
// the same lock the loop holds while it reads and handles a batch, so
// packets are always handled by one reader at a time and in order.
type inlineState struct {
	rx sync.Mutex // held by whoever reads and handles a batch

	mu     sync.Mutex // orders SetInlineReceive calls
	n      int        // callers that asked for inline receive, under mu
	on     atomic.Bool
	resume chan struct{} // the loop may read again

	r    hooks.InlineReader  // nil: the transport cannot
	msgs []transport.Message // under rx
	pkt  wire.Packet         // under rx
}

func (s *inlineState) init(conn transport.Conn, batch int) {
	s.resume = make(chan struct{}, 1)
	if r, ok := hooks.InlineReaderOf(conn); ok {
		s.r = r
		s.msgs = make([]transport.Message, batch)
	}
}

// loopMayRead waits while inline receive is on, then takes rx for the
// loop's next batch. It returns false once done is closed.
func (s *inlineState) loopMayRead(done <-chan struct{}) bool {
	for {
		if s.on.Load() {
			select {
			case <-s.resume:
			case <-done:
				return false
			}
			continue
		}
		s.rx.Lock()
		if !s.on.Load() {
			return true
		}
		s.rx.Unlock()
	}
}

// kicked reports whether a read error is the deadline that ended the
// loop's read for inline receive.
func (s *inlineState) kicked(err error) bool {
	return s.r != nil && errors.Is(err, os.ErrDeadlineExceeded)
}

// SetInlineReceive turns inline receive on (true) or off (false) for the
// caller; calls must pair, and it is on while any caller has it on. While
// it is on, packets are handled only by ReceiveInline calls: the caller
// must keep calling it (a spinning poll loop) and turn it off before it
// stops, or the context receives nothing. It reports false, and changes
// nothing, when the transport cannot (only the UDP endpoint on Linux can;
// not the in-memory link or a wrapped endpoint).
func (c *Context) SetInlineReceive(on bool) bool {
	s := &c.in
	if s.r == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.n++
		if s.n == 1 {
			s.on.Store(true)
			s.r.SetReadDeadline(time.Unix(1, 0)) // kick the loop out of its read
		}
		return true
	}
	if s.n == 0 {
		return true
	}
	s.n--
	c.flush() // what a spin left queued (CQ.WaitSpin with SpinPolicy.Inline)
	if s.n == 0 {
		s.on.Store(false)
		s.r.SetReadDeadline(time.Time{})
		select {
		case s.resume <- struct{}{}:
		default:
		}
	}
	return true
}

// pauseInline turns the caller's inline receive off while a WaitSpin with
// SpinPolicy.Inline sleeps (SetInlineReceive(false), which also sends what
// the spin left queued); the returned func turns it on again. With inline
// receive off (Inline set by a caller that never turned it on) it does
// nothing, so that the wake-up does not turn it on for nobody.
func (c *Context) pauseInline() (resume func()) {
	s := &c.in
	s.mu.Lock()
	on := s.n > 0
	s.mu.Unlock()
	if !on {
		return func() {}
	}
	c.SetInlineReceive(false)
	return func() { c.SetInlineReceive(true) }
}

// ReceiveInline reads the packets queued on the context's socket, without
// waiting, and handles them in the caller's goroutine, as the receive loop
// would; it returns how many it handled. It does nothing (0) unless inline
// receive is on, and when another caller is doing it at the moment.
func (c *Context) ReceiveInline() int {
	k, _ := c.receiveInline(true)
	return k
}

// receiveInline is ReceiveInline; read reports whether it read the socket
// (false: inline receive is off, or another caller is reading it). With
// flush false, what the handling queued (an ACK) stays queued for the
// caller's next flush.
func (c *Context) receiveInline(flush bool) (k int, read bool) {
	s := &c.in
	if !s.on.Load() || !s.rx.TryLock() {
		return 0, false
	}
	defer s.rx.Unlock()
	k, err := s.r.TryReadBatch(s.msgs)
	if err != nil || k == 0 {
		return 0, true
	}
	now := engineNow()
	var lk qpLookup
	for i := 0; i < k; i++ {
		c.handle(&s.msgs[i], &s.pkt, &lk, now)
	}
	if flush {
		c.flush()
	}
	return k, true
}
