package verbs

import (
	"fmt"
	"sync"
)

// SRQ is a shared receive queue (struct ibv_srq): QPs created with it take
// their receive WQEs from it.
type SRQ struct {
	pd     *PD
	maxSGE int

	mu    sync.Mutex
	ring  []recvWQE
	sges  []SGE
	head  uint64
	tail  uint64
	limit int // armed limit; 0 = not armed
	// users counts the live QPs attached to the SRQ.
	users  int
	closed bool
}

// SRQAttr holds the sizes and the limit of an SRQ (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	// Limit arms the limit event: when fewer WQEs than Limit remain, an
	// EventSRQLimitReached async event is posted once and the limit is
	// disarmed.
	Limit int
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	if attr.MaxWR < 1 || attr.MaxWR > MaxSRQWR {
		return nil, fmt.Errorf("verbs: create SRQ: max_wr %d outside 1..%d: %w", attr.MaxWR, MaxSRQWR, ErrInvalidArgument)
	}
	if attr.MaxSGE < 1 {
		attr.MaxSGE = 1
	}
	if attr.MaxSGE > MaxSGE {
		return nil, fmt.Errorf("verbs: create SRQ: max_sge %d above %d: %w", attr.MaxSGE, MaxSGE, ErrInvalidArgument)
	}
	if err := pd.use(useSRQ, 1); err != nil {
		return nil, fmt.Errorf("verbs: create SRQ: %w", err)
	}
	return &SRQ{pd: pd, maxSGE: attr.MaxSGE, ring: make([]recvWQE, attr.MaxWR),
		sges: make([]SGE, attr.MaxWR*attr.MaxSGE), limit: attr.Limit}, nil
}

// Modify arms the limit (ibv_modify_srq with IBV_SRQ_LIMIT).
func (s *SRQ) Modify(limit int) error {
	if limit < 0 || limit > len(s.ring) {
		return fmt.Errorf("verbs: modify SRQ: limit %d outside 0..%d: %w", limit, len(s.ring), ErrInvalidArgument)
	}
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
	return nil
}

// Query returns the SRQ's attributes.
func (s *SRQ) Query() SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SRQAttr{MaxWR: len(s.ring), MaxSGE: s.maxSGE, Limit: s.limit}
}

// PostRecv queues receive work requests on the SRQ.
func (s *SRQ) PostRecv(wrs ...RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("verbs: post SRQ recv: %w", ErrClosed)
	}
	for i := range wrs {
		wr := &wrs[i]
		if s.tail-s.head >= uint64(len(s.ring)) {
			return i, fmt.Errorf("verbs: post SRQ recv: queue full (%d WRs): %w", len(s.ring), ErrQueueFull)
		}
		if len(wr.SGList) > s.maxSGE {
			return i, fmt.Errorf("verbs: post SRQ recv: %d SGEs, max %d: %w", len(wr.SGList), s.maxSGE, ErrInvalidArgument)
		}
		slot := int(s.tail % uint64(len(s.ring)))
		sg := s.sges[slot*s.maxSGE : slot*s.maxSGE+len(wr.SGList)]
		copy(sg, wr.SGList)
		var size uint64
		for _, e := range sg {
			size += uint64(e.Length)
		}
		s.ring[slot] = recvWQE{wrID: wr.WRID, sgl: sg, size: size}
		s.tail++
	}
	return len(wrs), nil
}

// Close destroys the SRQ and drops the receive WQEs still queued on it.
// It refuses with ErrBusy while a QP attached to it is open: close the
// QPs first. Closing a closed SRQ does nothing.
func (s *SRQ) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.users > 0 {
		return fmt.Errorf("verbs: close SRQ: %d QP(s) are attached to it: close them first: %w", s.users, ErrBusy)
	}
	s.closed = true
	s.ring, s.sges, s.head, s.tail = nil, nil, 0, 0
	s.pd.use(useSRQ, -1)
	return nil
}

// use counts a QP that is attached to (d = 1) or detached from (d = -1)
// the SRQ. Attaching fails on a closed SRQ.
func (s *SRQ) use(d int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d > 0 && s.closed {
		return fmt.Errorf("verbs: SRQ %w", ErrClosed)
	}
	s.users += d
	return nil
}

func (s *SRQ) pop(out *recvWQE, sge []SGE) bool {
	s.mu.Lock()
	if s.head == s.tail {
		s.mu.Unlock()
		return false
	}
	*out = s.ring[s.head%uint64(len(s.ring))]
	out.sgl = sge[:copy(sge, out.sgl)]
	s.head++
	fire := s.limit > 0 && int(s.tail-s.head) < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		s.pd.ctx.postAsync(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
	return true
}
