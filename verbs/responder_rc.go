package verbs

// The RC responder: one request packet at a time, in PSN order.

import (
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs/internal/mem"
)

// respondRC handles one RC request packet: the checks (responder_steps.go)
// and the execution of the request decide an action, which applyRC
// carries out.
func (qp *QP) respondRC(pkt *wire.Packet, now time.Time) {
	qp.applyRC(pkt, qp.stepsRC(pkt), now)
}

// stepsRC runs the RC responder's steps in order: PSN, opcode sequence,
// segment length, rights, then the request's own checks and its
// execution. It returns the first action that is not actOK.
func (qp *QP) stepsRC(pkt *wire.Packet) respAction {
	r := &qp.rsp
	op := pkt.BTH.Opcode()
	if act := checkPSN(r.ePSN, r.nakSent, pkt.BTH.PSN()); !act.ok() {
		return act
	}
	r.nakSent = false
	if act := checkOpSequence(r.cur, op); !act.ok() {
		return act
	}
	if act := checkRCLength(op, len(pkt.Payload), qp.pmtu, pkt.BTH.PadCnt()); !act.ok() {
		return act
	}
	if act := checkRights(op, qp.attr.AccessFlags, len(r.res)); !act.ok() {
		return act
	}
	switch {
	case op.Has(wire.IsSend):
		return qp.execSendRC(pkt)
	case op.Has(wire.IsWrite):
		return qp.execWriteRC(pkt)
	case op == wire.ReadRequest:
		return qp.execRead(pkt)
	default: // checkRights let nothing else through but atomics
		return qp.execAtomic(pkt)
	}
}

// applyRC carries out the action the steps chose for pkt.
func (qp *QP) applyRC(pkt *wire.Packet, act respAction, now time.Time) {
	c := qp.ctx
	psn := pkt.BTH.PSN()
	switch act.kind {
	case actDrop:
		c.ctr.drop(act.drop)
	case actNAKSeq:
		qp.rsp.nakSent = true
		qp.sendAck(qp.rsp.ePSN, wire.SyndromePSNSeqError)
		c.ctr.naksSent[NAKSeq].Add(1)
		c.ctr.drop(DropPSN)
	case actDuplicate:
		c.ctr.dupRequests.Add(1)
		qp.duplicate(pkt)
	case actRNR:
		qp.rnrNak(psn)
	case actNAK:
		qp.nak(psn, act.syn, now)
	}
}

// acceptRC moves the expected PSN past an executed SEND or WRITE packet
// and acknowledges it if the requester asked.
func (qp *QP) acceptRC(pkt *wire.Packet) {
	psn := pkt.BTH.PSN()
	qp.rsp.ePSN = psn.Next()
	if pkt.BTH.AckReq() {
		if qp.rsp.deferAck {
			qp.rsp.ackWanted = true
			return
		}
		qp.sendAck(psn, wire.SyndromeACK)
	}
}

// execSendRC places a SEND packet in the receive WQE (the FIRST or ONLY
// packet takes one).
func (qp *QP) execSendRC(pkt *wire.Packet) respAction {
	c, r := qp.ctx, &qp.rsp
	op := pkt.BTH.Opcode()
	n := uint64(len(pkt.Payload))
	if starts(op) {
		if !qp.popRecv(&r.recv) {
			return needRecv
		}
		r.inRecv = true
		r.recvOff = 0
	}
	// The message does not fit the receive buffer, or the receive's SGEs
	// do not name writable memory of the PD: as rdma_rxe's responder
	// (copy_data fails, a malformed WQE, class A) the receive completes
	// with LOC_QP_OP_ERR, the requester gets NAK remote operation error,
	// and nothing is placed outside the SGEs.
	if r.recvOff+n > r.recv.size || c.scatter(r.recv.sgl, r.recvOff, pkt.Payload, qp.pd.id) != WCSuccess {
		qp.failRecv(WCLocQPOpErr)
		return refuse(wire.SyndromeRemoteOp, DropLength)
	}
	r.recvOff += n
	r.cur = respSend
	if ends(op) {
		r.msn = (r.msn + 1) & 0xFFFFFF
		qp.recvDone(pkt)
	}
	qp.acceptRC(pkt)
	return accept
}

// execWriteRC places a WRITE packet. The FIRST or ONLY packet's RETH
// names the whole message, whose range is checked before a byte moves;
// WRITE_WITH_IMM takes a receive WQE when its last packet arrives.
func (qp *QP) execWriteRC(pkt *wire.Packet) respAction {
	r := &qp.rsp
	op := pkt.BTH.Opcode()
	n := uint64(len(pkt.Payload))
	if pkt.RETH != nil {
		dl := uint64(pkt.RETH.DMALen())
		if act := checkRETH(op, dl, n, uint64(qp.pmtu)); !act.ok() {
			return act
		}
		if act := qp.beginWrite(pkt.RETH); !act.ok() {
			return act
		}
	}
	if act := checkWriteExtent(op, r.wOff, r.wLen, n); !act.ok() {
		return act
	}
	imm := pkt.ImmDt != nil
	if imm && !qp.popRecv(&r.recv) {
		return needRecv
	}
	if act := qp.placeWrite(pkt.Payload); !act.ok() {
		return act
	}
	if ends(op) {
		r.cur = respNone
		r.msn = (r.msn + 1) & 0xFFFFFF
		qp.ctx.ctr.executed.Add(1)
		if imm {
			qp.writeImmDone(pkt)
		}
	}
	qp.acceptRC(pkt)
	return accept
}

// execRead answers a READ request: it saves the request in a responder
// resource (for duplicates) and sends the responses.
func (qp *QP) execRead(pkt *wire.Packet) respAction {
	r := &qp.rsp
	psn := pkt.BTH.PSN()
	va, rkey, dl := pkt.RETH.VA(), uint32(pkt.RETH.RKey()), pkt.RETH.DMALen()
	if act := checkRETH(wire.ReadRequest, uint64(dl), 0, uint64(qp.pmtu)); !act.ok() {
		return act
	}
	if dl > 0 {
		if act := checkMR(qp.probe(rkey, va, uint64(dl), mem.RemoteRead)); !act.ok() {
			return act
		}
	}
	np := npkts(dl, qp.pmtu)
	r.msn = (r.msn + 1) & 0xFFFFFF
	qp.ctx.ctr.executed.Add(1)
	res := qp.newResource()
	*res = rdResource{valid: true, first: psn, last: psn.Add(np - 1), va: va, length: dl, rkey: rkey, msn: r.msn}
	r.ePSN = psn.Add(np)
	qp.sendReadResponses(res, psn, dl)
	return accept
}

// execAtomic executes an atomic, saves its original value in a responder
// resource (for duplicates) and sends the atomic ACK.
func (qp *QP) execAtomic(pkt *wire.Packet) respAction {
	r := &qp.rsp
	c := qp.ctx
	psn := pkt.BTH.PSN()
	a := pkt.AtomicETH
	va := a.VA()
	if act := checkAtomicVA(va); !act.ok() {
		return act
	}
	c.mrs.RLock()
	b, st := c.mrs.Lookup(uint32(a.RKey()), qp.pd.id, va, 8, mem.RemoteAtomic)
	var orig uint64
	if st == mem.OK {
		orig = doAtomic(b, pkt.BTH.Opcode(), a.SwapAdd(), a.Compare())
	}
	c.mrs.RUnlock()
	if act := checkMR(st); !act.ok() {
		return act
	}
	r.msn = (r.msn + 1) & 0xFFFFFF
	c.ctr.executed.Add(1)
	res := qp.newResource()
	*res = rdResource{valid: true, atomic: true, first: psn, last: psn, orig: orig, msn: r.msn}
	r.ePSN = psn.Next()
	qp.sendAtomicAck(res)
	return accept
}
