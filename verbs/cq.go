package verbs

import (
	"context"
	"fmt"
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

// Close destroys the channel; pending GetEvent calls return ErrClosed.
func (ch *CompChannel) Close() error {
	ch.once.Do(func() { close(ch.done) })
	return nil
}

// CQ is a completion queue (struct ibv_cq). Poll, ReqNotify and AckEvents
// are safe for concurrent use.
type CQ struct {
	ctx     *Context
	channel *CompChannel

	mu       sync.Mutex
	ring     []WC
	head     int // next to poll
	count    int
	armed    bool
	solOnly  bool
	overflow bool
	events   uint64
	acked    uint64
}

// CreateCQ creates a completion queue for at least cqe completions,
// attached to ch (which may be nil).
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE {
		return nil, fmt.Errorf("verbs: create CQ: %d entries, want 1..%d (verbs.MaxCQE): ask for fewer entries and poll more often: %w", cqe, MaxCQE, ErrInvalidArgument)
	}
	return &CQ{ctx: c, channel: ch, ring: make([]WC, cqe)}, nil
}

// Len returns the capacity of the CQ.
func (cq *CQ) Len() int { return len(cq.ring) }

// Poll moves up to len(wc) completions into wc and returns how many. It
// never blocks and never allocates. After an overflow it returns
// ErrQueueFull: completions were lost and the CQ is in error, as in ibverbs.
func (cq *CQ) Poll(wc []WC) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
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
		return fmt.Errorf("verbs: CQ has no completion channel: %w", ErrInvalidArgument)
	}
	cq.mu.Lock()
	cq.armed = true
	cq.solOnly = solicitedOnly
	cq.mu.Unlock()
	return nil
}

// AckEvents acknowledges n events received from GetEvent.
func (cq *CQ) AckEvents(n int) {
	cq.mu.Lock()
	cq.acked += uint64(n)
	cq.mu.Unlock()
}

// Close destroys the CQ.
func (cq *CQ) Close() error { return nil }

// push adds a completion. solicited marks a receive completion of a
// solicited message.
func (cq *CQ) push(wc *WC, solicited bool) {
	cq.mu.Lock()
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
	if notify {
		cq.armed = false
		cq.events++
	}
	cq.mu.Unlock()
	if notify && cq.channel.notify != nil {
		cq.channel.notify(cq)
	} else if notify {
		select {
		case cq.channel.events <- cq:
			cq.ctx.woke.Store(true)
		default:
		}
	}
}
