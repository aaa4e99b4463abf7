package verbs

// The UC responder: no ACKs, no duplicates; a gap abandons the message.

import (
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// respondUC handles one UC request packet: no ACKs; a lost packet drops
// the rest of its message and the responder resynchronises on the next
// FIRST or ONLY. The steps decide an action, which applyUC carries out.
func (qp *QP) respondUC(pkt *wire.Packet, now time.Time) {
	qp.applyUC(qp.stepsUC(pkt))
}

// stepsUC runs the UC responder's steps in order: PSN and opcode
// sequence, segment length, then the request's own checks and its
// execution. It returns the first action that is not actOK.
func (qp *QP) stepsUC(pkt *wire.Packet) respAction {
	r := &qp.rsp
	psn := pkt.BTH.PSN()
	op := pkt.BTH.Opcode()
	act := checkUCPSN(r.ePSN, r.cur, psn, op)
	r.ePSN = psn.Next()
	switch act.kind {
	case actResync:
		qp.abortUC()
	case actDrop:
		return act
	}
	if act := checkUCLength(op, len(pkt.Payload), qp.pmtu); !act.ok() {
		return act
	}
	switch {
	case op.Has(wire.IsSend):
		return qp.execSendUC(pkt)
	case op.Has(wire.IsWrite):
		return qp.execWriteUC(pkt)
	}
	return accept
}

// applyUC carries out the action the steps chose: anything but actOK is a
// counted drop that abandons the message in progress.
func (qp *QP) applyUC(act respAction) {
	if act.ok() {
		return
	}
	qp.ctx.ctr.drop(act.drop)
	qp.abortUC()
}

// execSendUC places a SEND packet in the receive WQE (the FIRST or ONLY
// packet takes one, unless an abandoned message left one). A message that
// does not fit completes the WQE in error, as does a receive whose SGEs
// do not name writable memory.
func (qp *QP) execSendUC(pkt *wire.Packet) respAction {
	r := &qp.rsp
	op := pkt.BTH.Opcode()
	n := uint64(len(pkt.Payload))
	if starts(op) {
		// A WQE kept from an aborted message is used again.
		if !r.inRecv && !qp.popRecv(&r.recv) {
			return needRecv
		}
		r.inRecv = true
		r.recvOff = 0
	}
	if r.recvOff+n > r.recv.size {
		qp.failRecv(WCLocLenErr)
		return accept
	}
	if st := qp.ctx.scatter(r.recv.sgl, r.recvOff, pkt.Payload, qp.pd.id); st != WCSuccess {
		qp.failRecv(st)
		return accept
	}
	r.recvOff += n
	r.cur = respSend
	if ends(op) {
		qp.recvDone(pkt)
	}
	return accept
}

// execWriteUC places a WRITE packet. As for RC, the whole message's range
// is checked before its first byte moves; UC has no NAK, so a WRITE that
// fails a check is dropped.
func (qp *QP) execWriteUC(pkt *wire.Packet) respAction {
	r := &qp.rsp
	op := pkt.BTH.Opcode()
	n := uint64(len(pkt.Payload))
	if act := checkRights(op, qp.attr.AccessFlags, len(r.res)); !act.ok() {
		return act
	}
	if pkt.RETH != nil {
		if act := qp.beginWrite(pkt.RETH); !act.ok() {
			return act
		}
	}
	if act := checkWriteExtent(op, r.wOff, r.wLen, n); !act.ok() {
		return act
	}
	imm := pkt.ImmDt != nil
	// A WQE kept from an aborted SEND is the next one in line: it takes
	// the immediate data (popping another would lose it).
	if imm && !r.inRecv {
		if !qp.popRecv(&r.recv) {
			return needRecv
		}
		r.inRecv = true
	}
	if act := qp.placeWrite(pkt.Payload); !act.ok() {
		return act
	}
	if ends(op) {
		qp.ctx.ctr.executed.Add(1)
		r.cur = respNone
		if imm {
			r.inRecv = false
			qp.writeImmDone(pkt)
		}
	}
	return accept
}

// abortUC drops the UC message in progress. A receive WQE it had taken
// stays with the responder (inRecv) and receives the next SEND.
func (qp *QP) abortUC() {
	qp.rsp.cur = respNone
}
