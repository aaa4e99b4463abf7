package verbs

import (
	"context"
	"fmt"
	"runtime"
	"sync"
)

// CompChannel is a completion event channel (struct ibv_comp_channel): CQs
// armed with ReqNotify post an event to it when a completion arrives.
type CompChannel struct {
	ctx    *Context
	events chan *CQ
	notify func(*CQ)
	once   sync.Once
	done   chan struct{}

	mu     sync.Mutex
	cqs    int // open CQs attached to the channel
	closed bool
}

// CreateCompChannel creates a completion channel.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	return &CompChannel{ctx: c, events: make(chan *CQ, 1024), done: make(chan struct{})}, nil
}

// CreateCompChannelFunc creates a completion channel that hands each event
// to notify instead of queueing it for GetEvent (which then only waits for
// Close). notify runs on the goroutine that completed the work, with no
// lock held; it must not block. It is for callers that deliver events
// their own way, such as tbrdma's C library, which signals a file
// descriptor that C programs poll.
func (c *Context) CreateCompChannelFunc(notify func(*CQ)) (*CompChannel, error) {
	if notify == nil {
		return nil, fmt.Errorf("verbs: create completion channel: nil notify func: %w", ErrInvalidArgument)
	}
	return &CompChannel{ctx: c, events: make(chan *CQ), notify: notify, done: make(chan struct{})}, nil
}

// GetEvent blocks until a CQ attached to the channel has an event, or ctx
// ends, and returns that CQ. Every event must be acknowledged with
// CQ.AckEvents.
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.events:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-ch.done:
		return nil, ErrClosed
	}
}

// Close destroys the channel; pending GetEvent calls return ErrClosed. It
// refuses with ErrBusy while a CQ attached to the channel is open, as
// ibv_destroy_comp_channel does: close the CQs first. Closing a closed
// channel does nothing.
func (ch *CompChannel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.cqs > 0 {
		return fmt.Errorf("verbs: close completion channel: %d CQ(s) use it: close them first: %w", ch.cqs, ErrBusy)
	}
	ch.closed = true
	ch.once.Do(func() { close(ch.done) })
	return nil
}

// attach counts a CQ created on (d = 1) or closed from (d = -1) the
// channel. It fails on a closed channel.
func (ch *CompChannel) attach(d int) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if d > 0 && ch.closed {
		return fmt.Errorf("verbs: create CQ: completion channel %w", ErrClosed)
	}
	ch.cqs += d
	return nil
}

// CQ is a completion queue (struct ibv_cq). Poll, Wait, ReqNotify and
// AckEvents are safe for concurrent use.
type CQ struct {
	ctx     *Context
	channel *CompChannel
	cqe     int

	mu       sync.Mutex
	ring     []WC
	head     int // next to poll
	count    int
	armed    bool
	solOnly  bool
	overflow bool
	events   uint64
	acked    uint64
	// waiters counts Wait calls asleep on the CQ; while there are any, the
	// CQ's next event closes wake instead of going to the channel.
	waiters int
	wake    chan struct{}
	// waitArmed is set when Wait armed the CQ (not ReqNotify): the last
	// waiter to leave without an event disarms it again.
	waitArmed bool
	// users counts the live QPs that use the CQ (Close refuses while
	// there are any).
	users  int
	closed bool
	done   chan struct{} // closed by Close
}

// CreateCQ creates a completion queue for at least cqe completions,
// attached to ch (which may be nil).
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE {
		return nil, fmt.Errorf("verbs: create CQ: %d entries, want 1..%d (verbs.MaxCQE): ask for fewer entries and poll more often: %w", cqe, MaxCQE, ErrInvalidArgument)
	}
	if ch != nil {
		if err := ch.attach(1); err != nil {
			return nil, err
		}
	}
	return &CQ{ctx: c, channel: ch, cqe: cqe, ring: make([]WC, cqe), done: make(chan struct{})}, nil
}

// Len returns the capacity of the CQ.
func (cq *CQ) Len() int { return cq.cqe }

// Poll moves up to len(wc) completions into wc and returns how many. It
// never blocks and never allocates. After an overflow it returns
// ErrQueueFull: completions were lost and the CQ is in error, as in ibverbs.
// On a closed CQ it returns ErrClosed.
func (cq *CQ) Poll(wc []WC) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.pollLocked(wc)
}

func (cq *CQ) pollLocked(wc []WC) (int, error) {
	if cq.closed {
		return 0, fmt.Errorf("verbs: poll CQ: %w", ErrClosed)
	}
	n := 0
	for n < len(wc) && cq.count > 0 {
		wc[n] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.count--
		n++
	}
	if n == 0 && cq.overflow {
		return 0, fmt.Errorf("verbs: CQ overrun, completions lost: %w", ErrQueueFull)
	}
	return n, nil
}

// ReqNotify arms the CQ: the next completion (only a solicited or failed
// one when solicitedOnly) posts one event to the completion channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.channel == nil {
		return fmt.Errorf("verbs: CQ has no completion channel: create the CQ with one (CreateCQ), or use CQ.Wait, which needs none: %w", ErrInvalidArgument)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return fmt.Errorf("verbs: arm CQ: %w", ErrClosed)
	}
	cq.armed = true
	cq.solOnly = solicitedOnly
	cq.waitArmed = false
	return nil
}

// AckEvents acknowledges n events received from GetEvent.
func (cq *CQ) AckEvents(n int) {
	cq.mu.Lock()
	cq.acked += uint64(n)
	cq.mu.Unlock()
}

// Wait blocks until the CQ holds at least one completion, then moves up to
// len(wc) of them into wc and returns how many, like Poll. It returns
// early with ctx's error when ctx ends, ErrClosed when the CQ is closed,
// and Poll's error (ErrQueueFull) when the
// CQ overran.
//
// Wait does the arm, poll, get event and acknowledge sequence of an
// ibverbs program once, inside: when the CQ is empty it arms the CQ for
// any completion and checks it again under the same lock a completion
// takes to land, so none that arrives in between is slept through, and it
// acknowledges each event it takes. It needs no completion channel: it
// sleeps on the CQ itself. Events it takes never reach the CQ's channel,
// and it takes only its own CQ's events, so other CQs sharing that channel
// lose none and GetEvent sees only theirs. Do not mix Wait with
// ReqNotify/GetEvent on the same CQ at the same time: whichever armed the
// CQ last gets its next event. Concurrent Wait calls on one CQ are
// allowed; they all wake and race to poll.
func (cq *CQ) Wait(ctx context.Context, wc []WC) (int, error) {
	return cq.WaitSpin(ctx, wc, SpinPolicy{})
}

// SpinPolicy says how CQ.WaitSpin busy-polls before it sleeps.
type SpinPolicy struct {
	// Polls is how many empty polls WaitSpin makes, yielding the
	// processor (runtime.Gosched) between them, before it sleeps as Wait
	// does; 0 sleeps at once.
	Polls int
	// HoldEngine, when set, tells the CQ's Context that a goroutine spins
	// for as long as WaitSpin polls, so that a receive loop that busy-polls
	// (an engine setting the CLI's latency tests use) keeps polling its
	// socket instead of sleeping; WaitSpin stops telling it before it
	// sleeps. On a context that does not busy-poll it costs nothing.
	HoldEngine bool
	// Inline says that the caller has inline receive on for the CQ's
	// Context (SetInlineReceive returned true). WaitSpin's polls then read
	// the socket and handle what came themselves (ReceiveInline), so the
	// completion a spinner waits for needs no switch to the receive loop
	// and back; and before WaitSpin sleeps it turns the caller's inline
	// receive off, so that the receive loop reads while nobody spins, and
	// on again once it wakes.
	Inline bool
}

// WaitSpin is Wait for busy-polling callers: it polls the CQ up to p.Polls
// times first (checking ctx every 256 polls), and sleeps only if all were
// empty. After a wake-up it polls once and sleeps again if the CQ is still
// empty; it does not spin again.
func (cq *CQ) WaitSpin(ctx context.Context, wc []WC, p SpinPolicy) (int, error) {
	if len(wc) == 0 {
		return 0, fmt.Errorf("verbs: wait on CQ: no room for completions (len(wc) == 0): %w", ErrInvalidArgument)
	}
	if p.Polls > 0 {
		if n, err, done := cq.spin(ctx, wc, p); done {
			return n, err
		}
	}
	if p.Inline {
		defer cq.ctx.pauseInline()()
	}
	// The CQ's channel cannot close while the CQ is open, so closing the
	// CQ (which closes wake) is what ends a Wait early.
	for {
		n, err, wake := cq.pollOrArm(wc)
		if n > 0 || err != nil {
			return n, err
		}
		select {
		case <-wake:
			cq.leave(false)
		case <-ctx.Done():
			cq.leave(true)
			return 0, ctx.Err()
		}
	}
}

// spin does WaitSpin's busy polls; done reports that it has an answer.
func (cq *CQ) spin(ctx context.Context, wc []WC, p SpinPolicy) (n int, err error, done bool) {
	if p.HoldEngine {
		(*engineHooks)(cq.ctx).Spinning(true)
		defer (*engineHooks)(cq.ctx).Spinning(false)
	}
	// An inline reader yields after every 16th empty read when the process
	// has one P (a latency test pinned to its core: nothing else of its
	// runs meanwhile, and each yield lengthens the polling cycle), after
	// every one otherwise: with more Ps, goroutines of its own process (a
	// serve beside it, under load from other processes) waited up to a
	// millisecond a round trip behind a spinner that seldom yielded.
	yieldMask := 0
	if p.Inline && runtime.GOMAXPROCS(0) == 1 {
		yieldMask = 15
	}
	for i := 0; i < p.Polls; i++ {
		if n, err = cq.Poll(wc); n > 0 || err != nil {
			return n, err, true
		}
		if i&255 == 255 && ctx.Err() != nil {
			return 0, ctx.Err(), true
		}
		if p.Inline {
			// Read the socket instead of yielding to the receive loop
			// (which waits while inline receive is on); yield as
			// yieldMask says, for the process's other goroutines,
			// and whenever another reader had the socket.
			// What the handling queues (the ACK of a SEND that
			// completes a receive here) is sent by the next round's
			// flush, or, when this poll returns, by the caller's next
			// post along with its own packet, one system call
			// instead of two, as the receive loop arranges it by
			// letting a spinner run before its flush (recvLoop).
			cq.ctx.flush()
			if k, read := cq.ctx.receiveInline(false); k > 0 || read && i&yieldMask != yieldMask {
				continue
			}
		}
		runtime.Gosched()
	}
	return 0, nil, false
}

// pollOrArm polls the CQ and, if it is empty, arms it for Wait and returns
// the channel its next event closes. Both happen under cq.mu, which push
// holds to add a completion, so a completion lands either before the poll
// (and is returned) or after the arming (and wakes the waiter).
func (cq *CQ) pollOrArm(wc []WC) (int, error, <-chan struct{}) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	n, err := cq.pollLocked(wc)
	if n > 0 || err != nil {
		return n, err, nil
	}
	if !cq.armed || cq.solOnly {
		cq.armed, cq.solOnly, cq.waitArmed = true, false, true
	}
	if cq.wake == nil {
		cq.wake = make(chan struct{})
	}
	cq.waiters++
	return 0, nil, cq.wake
}

// leave ends one Wait's sleep. A waiter that leaves without an event
// (early) and is the last one disarms the CQ if Wait armed it, so no event
// for it reaches the completion channel later.
func (cq *CQ) leave(early bool) {
	cq.mu.Lock()
	cq.waiters--
	if cq.waiters == 0 && early && cq.waitArmed && cq.armed {
		cq.armed, cq.waitArmed = false, false
	}
	cq.mu.Unlock()
}

// Close destroys the CQ and frees its ring. It refuses with ErrBusy while
// a QP that uses the CQ is open: close the QPs first. Pending Wait calls
// return ErrClosed; events already queued on the completion channel for
// the CQ stay there. Closing a closed CQ does nothing.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return nil
	}
	if cq.users > 0 {
		return fmt.Errorf("verbs: close CQ: %d QP(s) use it: close them first: %w", cq.users, ErrBusy)
	}
	cq.closed = true
	cq.ring, cq.count, cq.armed = nil, 0, false
	close(cq.done)
	if cq.channel != nil {
		cq.channel.attach(-1)
	}
	if cq.wake != nil {
		close(cq.wake)
		cq.wake = nil
	}
	return nil
}

// use counts a QP that starts (d = 1) or stops (d = -1) using the CQ. It
// fails on a closed CQ.
func (cq *CQ) use(d int) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if d > 0 && cq.closed {
		return fmt.Errorf("verbs: CQ %w", ErrClosed)
	}
	cq.users += d
	return nil
}

// push adds a completion. solicited marks a receive completion of a
// solicited message.
func (cq *CQ) push(wc *WC, solicited bool) {
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return
	}
	if cq.count == len(cq.ring) {
		cq.overflow = true
		cq.mu.Unlock()
		cq.ctx.postAsync(AsyncEvent{Type: EventCQErr, CQ: cq})
		return
	}
	i := cq.head + cq.count
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *wc
	cq.count++
	notify := cq.armed && (!cq.solOnly || solicited || wc.Status != WCSuccess)
	var wake chan struct{}
	if notify {
		cq.armed, cq.waitArmed = false, false
		cq.events++
		if cq.waiters > 0 {
			// The event is Wait's: it takes and acknowledges it here.
			wake, cq.wake = cq.wake, nil
			cq.acked++
		}
	}
	cq.mu.Unlock()
	switch {
	case wake != nil:
		close(wake)
		cq.ctx.woke.Store(true)
	case !notify || cq.channel == nil:
	case cq.channel.notify != nil:
		cq.channel.notify(cq)
	default:
		select {
		case cq.channel.events <- cq:
			cq.ctx.woke.Store(true)
		default:
		}
	}
}
