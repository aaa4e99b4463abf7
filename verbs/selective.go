package verbs

// Selective retransmission between tbrdma peers (a tbrdma extension that
// both ends of an RC connection must agree on; docs/wire-format.md,
// "Selective retransmission between tbrdma peers"). rdma_rxe's go-back-N
// resends everything after a lost packet: each loss costs up to a window.
// With the extension:
//
//   - the responder keeps the request packets that arrive past a gap (up to
//     heldSlots PSNs and heldBytes bytes ahead) and applies them in PSN order
//     once the gap is filled;
//   - it reports the gap as a PSN sequence NAK whose BTH PSN is the expected
//     PSN (everything before it arrived, as in any NAK) and whose AETH MSN
//     field is the gap's end: the first PSN after it that it holds. It sends
//     that NAK when the gap opens, when a filled gap uncovers the next one,
//     and in answer to every packet with AckReq while a gap is open;
//   - the requester resends only the gap and carries on where it stood; it
//     acts on a repeated report of the same gap only after a probe;
//   - a requester without an ACK for a while (tail-loss probe) sends one
//     packet again with AckReq: the gap it knows, else the last packet sent.
//     The answer (an ACK, or the NAK of a gap) says where the responder
//     stands, so a lost last packet, a lost resend or a lost NAK costs a
//     probe interval, not the ACK timeout. A probe spends no retry; the
//     retransmit timer and its retry count still end a dead connection.

import (
	"fmt"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

const (
	// heldSlots bounds how far past the expected PSN a responder holds
	// packets: MaxSendWindow, the widest window a requester may use.
	heldSlots = MaxSendWindow
	// heldBytes bounds the bytes a responder holds for one QP: a window of
	// large segments (maxUnackedBytes) with room to spare.
	heldBytes = 16 << 20
	// probeDiv sets the tail-loss probe interval: the ACK timeout divided
	// by it (1.05 ms for perftest's timeout 14), doubled after each probe
	// that brings no progress.
	probeDiv = 64
	// minProbe is the shortest probe interval, for very short ACK timeouts.
	minProbe = 100 * time.Microsecond
)

// SetSelectiveRetransmit turns selective retransmission on or off for an
// RC QP. It is a tbrdma extension, not an ibv_modify_qp attribute: both
// ends must turn it on before the connection carries traffic, and only
// toward a peer known to be a tbrdma that does the same (its perftest
// exchange said so). A responder with it on keeps packets past a lost one
// and reports the gap, which a stock requester would misread; a requester
// with it on reads NAKs so. With it on, a loss never narrows the send
// window either (SetSendWindow): it costs the packets lost, not a window.
func (qp *QP) SetSelectiveRetransmit(on bool) error {
	if qp.typ != QPTypeRC {
		return fmt.Errorf("verbs: selective retransmission on a %v QP: only RC QPs have it: %w", qp.typ, ErrInvalidArgument)
	}
	qp.mu.Lock()
	qp.sr = on
	if !on {
		qp.freeHeld()
	}
	qp.mu.Unlock()
	return nil
}

// heldPkt is a request packet the responder keeps past a gap: a copy of
// the whole packet and its PSN.
type heldPkt struct {
	psn PSN
	buf []byte
}

// held is the responder's store of packets past a gap, indexed by PSN
// modulo heldSlots; allocated at the first gap.
type held struct {
	slot  []heldPkt
	n     int // packets held
	bytes int
}

// respondSR handles an RC request packet on a QP with selective
// retransmission: a packet past the expected PSN is held; one at it is
// executed, followed by every held packet it uncovers; then the responder
// acknowledges, or reports the gap that is still open: when the packet
// asked for an ACK, or when held packets were executed up to the next gap
// (a packet that fills only part of a gap says nothing new: its resend is
// under way).
func (qp *QP) respondSR(pkt *wire.Packet, now time.Time) {
	r := &qp.rsp
	d := pkt.BTH.PSN().Diff(r.ePSN)
	if d > 0 {
		opened := qp.holdPacket(pkt, d)
		if r.held.n > 0 && (opened || pkt.BTH.AckReq()) {
			qp.reportGap()
		}
		return
	}
	r.deferAck = true
	drained, before := false, r.ePSN
	qp.applyRC(pkt, qp.stepsRC(pkt), now)
	if r.ePSN != before && r.held.n > 0 {
		drained = qp.drainHeld(now)
	}
	r.deferAck = false
	switch {
	case r.held.n > 0 && (drained || pkt.BTH.AckReq()):
		qp.reportGap()
		r.ackWanted = false
	case r.ackWanted:
		r.ackWanted = false
		qp.sendAck(r.ePSN.Add(-1), wire.SyndromeACK)
	}
}

// holdPacket keeps a copy of a packet d PSNs past the expected one and reports
// whether it opened a gap (nothing was held before). A packet beyond the
// store, over its byte budget or already held is dropped: the requester
// sends it again.
func (qp *QP) holdPacket(pkt *wire.Packet, d int32) (opened bool) {
	c, h := qp.ctx, &qp.rsp.held
	raw := pkt.Bytes()
	if d >= heldSlots || h.bytes+len(raw) > heldBytes {
		c.ctr.drop(DropPSN)
		return false
	}
	if h.slot == nil {
		h.slot = make([]heldPkt, heldSlots)
	}
	psn := pkt.BTH.PSN()
	s := &h.slot[uint32(psn)%heldSlots]
	if s.buf != nil {
		if s.psn == psn {
			c.ctr.drop(DropDuplicate)
			return false
		}
		qp.unhold(s) // a stale packet from before a go-back-N
	}
	opened = h.n == 0
	s.psn = psn
	s.buf = append(c.getBufFor(len(pkt.Payload)), raw...)
	h.n++
	h.bytes += len(raw)
	c.ctr.held.Add(1)
	return opened
}

// unhold frees one held packet's slot.
func (qp *QP) unhold(s *heldPkt) {
	h := &qp.rsp.held
	h.n--
	h.bytes -= len(s.buf)
	qp.ctx.putBuf(s.buf)
	*s = heldPkt{}
}

// freeHeld drops every held packet.
func (qp *QP) freeHeld() {
	h := &qp.rsp.held
	for i := range h.slot {
		if h.slot[i].buf != nil {
			qp.unhold(&h.slot[i])
		}
	}
}

// drainHeld executes the held packets from the expected PSN on, in order,
// until the next gap. A packet that is not accepted (no receive WQE, a
// refused request) ends the drain and drops everything held: the requester
// goes back to it (RNR) or the QP is in error. It reports whether it
// executed any.
func (qp *QP) drainHeld(now time.Time) (drained bool) {
	r := &qp.rsp
	var pkt wire.Packet
	for r.held.n > 0 && qp.state != QPStateErr {
		s := &r.held.slot[uint32(r.ePSN)%heldSlots]
		if s.buf == nil || s.psn != r.ePSN {
			return drained
		}
		drained = true
		buf := s.buf
		*s = heldPkt{}
		r.held.n--
		r.held.bytes -= len(buf)
		before := r.ePSN
		if pkt.Parse(buf) == nil {
			qp.applyRC(&pkt, qp.stepsRC(&pkt), now)
		}
		qp.ctx.putBuf(buf)
		if r.ePSN == before {
			qp.freeHeld()
			return drained
		}
	}
	if qp.state == QPStateErr {
		qp.freeHeld()
	}
	return drained
}

// reportGap sends the NAK of the open gap: the expected PSN, and in the
// AETH's MSN field the first PSN after it that is held. Held packets left
// behind the expected PSN (stale after a go-back-N) are freed on the way.
func (qp *QP) reportGap() {
	r := &qp.rsp
	for d := int32(1); d < heldSlots && r.held.n > 0; d++ {
		p := r.ePSN.Add(int(d))
		s := &r.held.slot[uint32(p)%heldSlots]
		if s.buf == nil {
			continue
		}
		if s.psn != p {
			qp.unhold(s)
			continue
		}
		qp.ctx.ctr.naksSent[NAKSeq].Add(1)
		var h wire.Headers
		h.BTH = wire.BTHFields{Opcode: wire.Acknowledge, PKey: wire.PKeyDefault, DestQP: qp.attr.DestQPN, PSN: r.ePSN}
		h.AETH = wire.AETHFields{Syndrome: wire.SyndromePSNSeqError, MSN: uint32(p)}
		qp.ctx.queue(wire.AppendPacket(qp.ctx.getBuf(), &h, nil), qp.dst)
		return
	}
}

// gapNAK handles a PSN sequence NAK on a QP with selective retransmission:
// e is the responder's expected PSN, end the first PSN after the gap that
// it holds. Everything before e is acknowledged; the gap is resent unless
// it is (what is left of) the one resent last and no probe went since
// (the responder repeats its report for every AckReq until the resend
// arrives).
func (qp *QP) gapNAK(e, end PSN, now time.Time) {
	r := &qp.req
	qp.ackThrough(e.Add(-1), now)
	if !r.rnrAt.IsZero() || e.Diff(r.compPSN) < 0 || e.Diff(r.sentPSN) >= 0 {
		return // waiting out an RNR NAK, or a stale report
	}
	if end.Diff(e) <= 0 || end.Diff(r.sentPSN) > 0 {
		end = r.sentPSN // not a gap this requester made: resend what it sent from e
	}
	if r.gap && end == r.gapEnd && e.Diff(r.gapStart) >= 0 && e.Diff(r.gapEnd) < 0 && !r.probed {
		return // the gap resent last, or what is left of it while the resend arrives
	}
	r.gap, r.gapStart, r.gapEnd, r.probed = true, e, end, false
	qp.resendRange(e, end, now)
}

// resendRange sends the packets with PSNs from..to-1 again, the last one
// with AckReq, without moving the requester: the next new packet is the
// one it would have sent anyway.
func (qp *QP) resendRange(from, to PSN, now time.Time) {
	r := &qp.req
	savePSN, saveNoAck := r.psn, r.noAckPkts
	defer func() { r.psn, r.noAckPkts, r.ackNext = savePSN, saveNoAck, false }()
	for i := qp.sqHead; i != qp.sqTail; i++ {
		w := qp.wqe(i)
		if w.npkts == 0 || w.first.Diff(to) >= 0 {
			return
		}
		if w.last.Diff(from) < 0 {
			continue
		}
		lo := max(int(from.Diff(w.first)), 0)
		hi := min(int(to.Diff(w.first)), w.npkts, w.sent)
		if w.wr.Opcode == WRRDMARead || w.wr.Opcode.isAtomic() {
			// One request packet stands for the whole range; a READ asks
			// for what has not arrived.
			k := 0
			if w.wr.Opcode == WRRDMARead {
				k = int(w.got / uint32(qp.pmtu))
			}
			if k < lo || k >= hi {
				continue
			}
			lo, hi = k, k+1
		}
		for k := lo; k < hi; k++ {
			save := w.sent
			w.sent = k
			r.ackNext = w.last.Diff(to.Add(-1)) >= 0 && k == hi-1
			ok := qp.sendSegment(w, now)
			w.sent = save
			qp.ctx.ctr.retransmits.Add(1)
			if !ok {
				return
			}
		}
	}
}

// probeInterval is the time without progress after which a requester with
// selective retransmission probes: the ACK timeout over probeDiv, doubled
// for each probe already sent without progress.
func (qp *QP) probeInterval() time.Duration {
	t := qp.ackTimeout() / probeDiv
	if t < minProbe {
		t = minProbe
	}
	return t << min(qp.req.probes, 10)
}

// armProbe (re)starts the tail-loss probe timer of a QP with selective
// retransmission while packets are unacknowledged.
func (qp *QP) armProbe(now time.Time) {
	if !qp.sr || qp.ackTimeout() == 0 || qp.req.compPSN == qp.req.sentPSN {
		qp.req.probeAt = time.Time{}
		return
	}
	qp.req.probeAt = now.Add(qp.probeInterval())
}

// sendProbe sends the tail-loss probe: the gap the responder last reported if
// it is still the oldest unacknowledged PSN, else the last packet sent,
// with AckReq. The answer is acted on even if it repeats a gap.
func (qp *QP) sendProbe(now time.Time) {
	r := &qp.req
	r.probes++
	r.probed = true
	qp.ctx.ctr.probes.Add(1)
	if r.gap && r.gapStart == r.compPSN {
		qp.resendRange(r.gapStart, r.gapEnd, now)
	} else {
		qp.resendRange(r.sentPSN.Add(-1), r.sentPSN, now)
	}
	qp.armProbe(now)
}
