package verbs

// The completer of a QP (rxe_comp.c in spirit): the handling of ACKs,
// NAKs, READ responses and atomic ACKs, which retire send WQEs, restore
// the retry counters and ask the requester to go back. Runs with qp.mu
// held and takes the current time as an argument.

import (
	"encoding/binary"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// complete handles a response packet: ACK, NAK, READ response or atomic ACK.
func (qp *QP) complete(pkt *wire.Packet, now time.Time) {
	c := qp.ctx
	psn := pkt.BTH.PSN()
	op := pkt.BTH.Opcode()
	// A response for a PSN never sent is bogus. Not qp.req.psn, which a
	// go-back-N lowers: the responder may hold packets sent before it, and
	// its ACK for them must count, or a requester whose window shrank
	// (lossSeen) resends a window that cannot reach that far, drops every
	// ACK and ends in RETRY_EXC_ERR.
	if psn.Diff(qp.req.sentPSN) >= 0 {
		c.ctr.drop(DropResponse)
		return
	}
	switch op {
	case wire.Acknowledge:
		qp.handleAck(psn, pkt.AETH, now)
	case wire.AtomicAcknowledge:
		if !pkt.AETH.Syndrome().IsACK() {
			qp.fail(WCBadRespErr, now)
			return
		}
		if qp.ackThrough(psn.Add(-1), now) && !qp.req.readGap {
			// The response to an earlier READ or atomic is missing: ask
			// again at once, once per gap (see handleReadResponse).
			qp.req.readGap = true
			qp.rewind(qp.req.compPSN, now)
		}
		if qp.sqHead == qp.sqTail {
			c.ctr.drop(DropResponse)
			return
		}
		w := qp.wqe(qp.sqHead)
		if !w.wr.Opcode.isAtomic() || w.npkts == 0 || w.first != psn {
			c.ctr.drop(DropResponse)
			return
		}
		var v [8]byte
		binary.NativeEndian.PutUint64(v[:], pkt.AtomicAckETH.Orig())
		if st := c.scatter(w.wr.SGList, 0, v[:], qp.pd.id); st != WCSuccess {
			qp.fail(st, now)
			return
		}
		qp.retire(w, now)
	case wire.ReadResponseFirst, wire.ReadResponseMiddle, wire.ReadResponseLast, wire.ReadResponseOnly:
		if pkt.AETH != nil && !pkt.AETH.Syndrome().IsACK() {
			qp.fail(WCBadRespErr, now)
			return
		}
		qp.handleReadResponse(pkt, psn, op, now)
	default:
		c.ctr.drop(DropResponse)
	}
}

// retire completes the WQE at the head of the send queue successfully.
func (qp *QP) retire(w *sendWQE, now time.Time) {
	if w.wr.Opcode.isReadLike() {
		qp.req.rdOut--
	}
	qp.completeSend(w, WCSuccess)
	qp.sqHead++
	if qp.sqNext < qp.sqHead {
		qp.sqNext = qp.sqHead
	}
	qp.req.compPSN = w.last.Next()
	qp.progress(now)
}

// progress notes that the peer answered: retry counters are restored and
// the retransmit timer restarts or stops.
func (qp *QP) progress(now time.Time) {
	qp.req.retryLeft = int(qp.attr.RetryCnt)
	qp.req.rnrLeft = int(qp.attr.RNRRetry)
	qp.req.inRetry = false
	qp.req.readGap = false
	if qp.req.compPSN == qp.req.psn {
		qp.req.retxAt = time.Time{}
	} else if t := qp.ackTimeout(); t > 0 {
		qp.req.retxAt = now.Add(t)
	}
	qp.req.probes = 0
	qp.armProbe(now)
}

// ackThrough completes every SEND/WRITE WQE whose last PSN is at or before
// p. It stops at a READ or atomic still waiting for its response; if p
// covers such a WQE, its responses were lost and it is retried. It returns
// whether that happened.
func (qp *QP) ackThrough(p PSN, now time.Time) (lostResponse bool) {
	advanced := false
	for qp.sqHead != qp.sqTail {
		w := qp.wqe(qp.sqHead)
		if w.npkts == 0 || w.first.Diff(p) > 0 {
			break
		}
		if w.wr.Opcode.isReadLike() {
			lostResponse = true
			break
		}
		if w.sent < w.npkts || w.last.Diff(p) > 0 {
			// Part of the message is acknowledged.
			if p.Next().Diff(qp.req.compPSN) > 0 {
				qp.req.compPSN = p.Next()
				advanced = true
			}
			break
		}
		qp.completeSend(w, WCSuccess)
		qp.sqHead++
		qp.req.compPSN = w.last.Next()
		advanced = true
	}
	if qp.sqNext < qp.sqHead {
		qp.sqNext = qp.sqHead
	}
	if qp.req.psn.Diff(qp.req.compPSN) < 0 {
		qp.req.psn = qp.req.compPSN
	}
	if advanced {
		qp.progress(now)
	}
	return lostResponse
}

func (qp *QP) handleAck(p PSN, aeth wire.AETH, now time.Time) {
	c := qp.ctx
	syn := aeth.Syndrome()
	switch syn.Type() {
	case wire.SynACK:
		if qp.ackThrough(p, now) {
			// Responses to a READ or atomic inside the acknowledged range
			// were lost: ask again.
			qp.rewind(qp.req.compPSN, now)
		}
	case wire.SynRNR:
		c.ctr.rnrNAKsRcvd.Add(1)
		qp.ackThrough(p.Add(-1), now)
		if qp.req.rnrLeft == 0 {
			qp.fail(WCRNRRetryExcErr, now)
			return
		}
		if qp.attr.RNRRetry != 7 {
			qp.req.rnrLeft--
		}
		qp.req.rnrAt = now.Add(time.Duration(wire.RNRTimer(syn.Value())))
		qp.req.retxAt, qp.req.probeAt = time.Time{}, time.Time{}
		qp.rewindTo(p)
	case wire.SynNAK:
		c.ctr.naksRcvd[nakKindOf(syn)].Add(1)
		if syn.NAK() == wire.NAKPSNSeqError && qp.sr {
			qp.gapNAK(p, PSN(aeth.MSN()), now)
			return
		}
		if syn.NAK() == wire.NAKPSNSeqError {
			qp.ackThrough(p.Add(-1), now)
			if qp.req.inRetry {
				return // one go-back-N per loss is enough
			}
			if qp.req.retryLeft == 0 {
				qp.fail(WCRetryExcErr, now)
				return
			}
			qp.req.retryLeft--
			qp.req.inRetry = true
			qp.lossSeen()
			qp.rewind(p, now)
			return
		}
		qp.ackThrough(p.Add(-1), now)
		st := WCRemOpErr
		switch syn.NAK() {
		case wire.NAKInvalidReq:
			st = WCRemInvReqErr
		case wire.NAKRemoteAccess:
			st = WCRemAccessErr
		}
		qp.fail(st, now)
	default:
		qp.fail(WCBadRespErr, now)
	}
}

func (qp *QP) handleReadResponse(pkt *wire.Packet, psn PSN, op wire.Opcode, now time.Time) {
	c := qp.ctx
	if psn != qp.req.compPSN {
		// Responses are accepted only in order, as rxe's completer does.
		// rxe waits for the retransmit timer to recover a gap; tbrdma asks
		// again at once, once per gap, which a peer sees as a duplicate
		// READ request and answers by replaying from the missing PSN.
		c.ctr.drop(DropResponse)
		if psn.Diff(qp.req.compPSN) > 0 && !qp.req.readGap {
			qp.req.readGap = true
			qp.rewind(qp.req.compPSN, now)
		}
		return
	}
	if qp.sqHead == qp.sqTail {
		c.ctr.drop(DropResponse)
		return
	}
	w := qp.wqe(qp.sqHead)
	if w.wr.Opcode != WRRDMARead || w.sent == 0 {
		// A READ response that belongs to no READ: a protocol violation.
		c.ctr.drop(DropResponse)
		return
	}
	idx := psn.Diff(w.first)
	if idx < 0 || int(idx) >= w.npkts || uint64(idx)*uint64(qp.pmtu) != uint64(w.got) {
		c.ctr.drop(DropResponse)
		return
	}
	remaining := w.length - w.got
	n := uint32(len(pkt.Payload))
	isEnd := op == wire.ReadResponseLast || op == wire.ReadResponseOnly
	if isEnd && n != remaining || !isEnd && n != uint32(qp.pmtu) {
		qp.fail(WCBadRespErr, now)
		return
	}
	if st := c.scatter(w.wr.SGList, uint64(w.got), pkt.Payload, qp.pd.id); st != WCSuccess {
		qp.fail(st, now)
		return
	}
	w.got += n
	qp.req.compPSN = psn.Next()
	qp.progress(now)
	if isEnd {
		qp.retire(w, now)
	}
}
