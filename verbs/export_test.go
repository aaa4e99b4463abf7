package verbs

// Test-only hooks for the replay tests (replay_test.go): they let a test
// give a QP and a memory region the numbers a captured peer used.

import (
	"fmt"
	"time"
)

// createQPNumbered creates a QP whose QPN is qpn (which must be free).
func (pd *PD) createQPNumbered(init *QPInitAttr, qpn QPN) (*QP, error) {
	c := pd.ctx
	if !qpn.Valid() || qpn < firstQPN {
		return nil, fmt.Errorf("createQPNumbered: QPN %v is reserved", qpn)
	}
	c.mu.Lock()
	taken := c.qps[qpn] != nil
	if !taken {
		c.nextQPN = qpn
	}
	c.mu.Unlock()
	if taken {
		return nil, fmt.Errorf("createQPNumbered: QPN %v in use", qpn)
	}
	qp, err := pd.CreateQP(init)
	if err != nil {
		return nil, err
	}
	if qp.QPN() != qpn {
		qp.Close()
		return nil, fmt.Errorf("createQPNumbered: got QPN %v, want %v", qp.QPN(), qpn)
	}
	return qp, nil
}

// regMRAt registers buf so that remote requests name it with key at
// virtual addresses va .. va+len(buf), as a captured peer's MR was.
func (pd *PD) regMRAt(buf []byte, va uint64, key RKey, access AccessFlags) (*MR, error) {
	r, ok := pd.ctx.mrs.RegisterAt(buf, va, uint32(key), uint32(access), pd.id)
	if !ok {
		return nil, fmt.Errorf("regMRAt: key %v is 0 or in use, or the table is full", key)
	}
	return &MR{pd: pd, region: r}, nil
}

// Push adds a completion to the CQ as the engine does.
func (cq *CQ) Push(wc WC) { cq.push(&wc, false) }

// Waiters returns how many Wait calls sleep on the CQ.
func (cq *CQ) Waiters() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.waiters
}

// EventCounts returns how many events the CQ raised and how many were
// acknowledged.
func (cq *CQ) EventCounts() (events, acked uint64) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.events, cq.acked
}

// Queued returns how many events wait in the channel for GetEvent.
func (ch *CompChannel) Queued() int { return len(ch.events) }

// QPTimerAt is when qp's timer fires next (zero: not armed).
func QPTimerAt(qp *QP) time.Time {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.timerAt
}
