package verbs

// The responder of a QP (rxe_resp.c in spirit), the parts the transports
// share: its state, atomics, the replay of READ responses and atomic
// results to duplicates, and ACK/NAK/RNR NAK generation. The transports'
// packet handlers are in responder_rc.go, responder_uc.go and
// responder_ud.go. Runs with qp.mu held.

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs/internal/mem"
)

// respKind is the kind of multi-packet message the responder is in the
// middle of.
type respKind uint8

const (
	respNone respKind = iota
	respSend
	respWrite
)

// responder is a QP's responder state: the PSN and MSN it expects, the
// message in progress, and its resources (res, a ring of max_dest_rd_atomic
// rounded up to a power of two) holding the READs and atomics it executed,
// so that duplicates are answered without executing them again.
type responder struct {
	ePSN    PSN
	msn     uint32
	nakSent bool // a PSN sequence NAK for ePSN went; further gaps are dropped
	cur     respKind
	// SEND in progress
	inRecv  bool
	recv    recvWQE
	recvSGE [MaxSGE]SGE
	recvOff uint64
	// WRITE in progress
	wKey    uint32
	wVA     uint64
	wLen    uint64
	wOff    uint64
	res     []rdResource
	resNext int
	// selective retransmission (selective.go): packets held past a gap;
	// while deferAck is set, acceptRC notes an AckReq in ackWanted
	// instead of answering it, so that one ACK (or the gap's NAK)
	// answers a packet and the held ones it uncovered.
	held      held
	deferAck  bool
	ackWanted bool
}

// rdResource is a saved READ (va, length, rkey) or atomic (orig: the
// value it returned) at PSNs first..last.
type rdResource struct {
	valid  bool
	atomic bool
	first  PSN
	last   PSN
	va     uint64
	length uint32
	rkey   uint32
	orig   uint64
	msn    uint32
}

// doAtomic executes an atomic on the 8 bytes of b (8-byte aligned) and
// returns the value they held before. Memory holds the value in host order.
func doAtomic(b []byte, op wire.Opcode, swapAdd, compare uint64) uint64 {
	p := (*uint64)(unsafe.Pointer(unsafe.SliceData(b)))
	if op == wire.FetchAdd {
		return atomic.AddUint64(p, swapAdd) - swapAdd
	}
	for {
		old := atomic.LoadUint64(p)
		if old != compare {
			return old
		}
		if atomic.CompareAndSwapUint64(p, old, swapAdd) {
			return old
		}
	}
}

func (qp *QP) newResource() *rdResource {
	r := &qp.rsp
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	return res
}

// duplicate answers a request whose PSN is before the expected one, as
// answerDuplicate decides.
func (qp *QP) duplicate(pkt *wire.Packet) {
	r := &qp.rsp
	q := dupRequest{psn: pkt.BTH.PSN(), op: pkt.BTH.Opcode()}
	if q.op == wire.ReadRequest {
		q.va, q.rkey, q.dl = pkt.RETH.VA(), pkt.RETH.RKey(), pkt.RETH.DMALen()
	}
	switch ans := answerDuplicate(r.res, qp.pmtu, q); ans.kind {
	case dupRead:
		qp.sendReadResponses(&r.res[ans.res], q.psn, ans.end)
	case dupAtomic:
		qp.sendAtomicAck(&r.res[ans.res])
	case dupDrop:
		qp.ctx.ctr.drop(DropDuplicate)
	default:
		qp.sendAck(r.ePSN.Add(-1), wire.SyndromeACK)
	}
}

// probe looks up n bytes at va under rkey with the access need, as the
// check of a whole WRITE or READ before any of it moves.
func (qp *QP) probe(rkey uint32, va, n uint64, need uint32) mem.Status {
	mrs := qp.ctx.mrs
	mrs.RLock()
	_, st := mrs.Lookup(rkey, qp.pd.id, va, n, need)
	mrs.RUnlock()
	return st
}

// beginWrite starts a WRITE message from the RETH of its FIRST or ONLY
// packet: its rkey, address and length, whose whole range is checked
// before a byte moves.
func (qp *QP) beginWrite(reth wire.RETH) respAction {
	r := &qp.rsp
	r.wKey, r.wVA, r.wLen, r.wOff = uint32(reth.RKey()), reth.VA(), uint64(reth.DMALen()), 0
	if r.wLen == 0 {
		return accept
	}
	return checkMR(qp.probe(r.wKey, r.wVA, r.wLen, mem.RemoteWrite))
}

// placeWrite copies a WRITE packet's payload to the message's current
// offset and moves the offset past it. The lookup fails only if the region
// was deregistered since beginWrite checked it.
func (qp *QP) placeWrite(payload []byte) respAction {
	r := &qp.rsp
	if n := uint64(len(payload)); n > 0 {
		mrs := qp.ctx.mrs
		mrs.RLock()
		dst, st := mrs.Lookup(r.wKey, qp.pd.id, r.wVA+r.wOff, n, mem.RemoteWrite)
		if st == mem.OK {
			copy(dst, payload)
		}
		mrs.RUnlock()
		if st != mem.OK {
			return checkMR(st)
		}
	}
	r.wOff += uint64(len(payload))
	r.cur = respWrite
	return accept
}

// failRecv completes the receive WQE of the SEND in progress with status
// st and ends the message.
func (qp *QP) failRecv(st WCStatus) {
	r := &qp.rsp
	wc := WC{Status: st, Opcode: WCRecv, SrcQP: qp.attr.DestQPN}
	r.inRecv = false
	r.cur = respNone
	qp.completeRecv(&r.recv, &wc, false)
}

// recvDone completes the receive WQE of a SEND whose last packet was
// placed.
func (qp *QP) recvDone(pkt *wire.Packet) {
	r := &qp.rsp
	r.cur = respNone
	r.inRecv = false
	qp.ctx.ctr.executed.Add(1)
	wc := WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(r.recvOff), SrcQP: qp.attr.DestQPN}
	if pkt.ImmDt != nil {
		wc.Flags |= WCFlagWithImm
		wc.ImmData = pkt.ImmDt.Imm()
	}
	if pkt.IETH != nil {
		wc.Flags |= WCFlagWithInv
		wc.InvalidatedRKey = pkt.IETH.RKey()
		qp.ctx.mrs.Deregister(uint32(pkt.IETH.RKey()))
	}
	qp.completeRecv(&r.recv, &wc, pkt.BTH.SE())
}

// writeImmDone completes the receive WQE a WRITE_WITH_IMM took.
func (qp *QP) writeImmDone(pkt *wire.Packet) {
	r := &qp.rsp
	wc := WC{Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.wLen), SrcQP: qp.attr.DestQPN,
		Flags: WCFlagWithImm, ImmData: pkt.ImmDt.Imm()}
	qp.completeRecv(&r.recv, &wc, pkt.BTH.SE())
}

// sendReadResponses sends the responses of a READ from PSN from up to
// byte end of the original range (a duplicate request may ask for less
// than the original did).
func (qp *QP) sendReadResponses(res *rdResource, from PSN, end uint32) {
	c := qp.ctx
	pmtu := uint64(qp.pmtu)
	k := int(from.Diff(res.first))
	total := npkts(end, qp.pmtu)
	for i := k; i < total; i++ {
		off := uint64(i) * pmtu
		n := uint64(end) - off
		if n > pmtu {
			n = pmtu
		}
		first, last := i == k, i == total-1
		var h wire.Headers
		h.BTH = wire.BTHFields{PKey: wire.PKeyDefault, DestQP: qp.attr.DestQPN, PSN: res.first.Add(i)}
		switch {
		case first && last:
			h.BTH.Opcode = wire.ReadResponseOnly
		case first:
			h.BTH.Opcode = wire.ReadResponseFirst
		case last:
			h.BTH.Opcode = wire.ReadResponseLast
		default:
			h.BTH.Opcode = wire.ReadResponseMiddle
		}
		h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: res.msn}
		buf := h.Append(c.getBufFor(int(n)))
		hl := len(buf)
		var zc []byte // the payload, sent from registered memory
		if n > 0 {
			c.mrs.RLock()
			src, st := c.mrs.Lookup(res.rkey, qp.pd.id, res.va+off, n, mem.RemoteRead)
			if st == mem.OK {
				if n >= zeroCopyMin && c.gathers {
					zc = src
				} else {
					buf = buf[:hl+int(n)]
					copy(buf[hl:], src)
				}
			}
			c.mrs.RUnlock()
			if st != mem.OK {
				// Deregistered while the READ was being answered.
				c.putBuf(buf)
				qp.nak(res.first.Add(i), wire.SyndromeRemoteAccess, time.Now())
				return
			}
		}
		pad := wire.PadCount(int(n))
		buf[1] = buf[1]&^0x30 | byte(pad)<<4
		buf = append(buf, zeroPad[:pad+wire.ICRCSize]...)
		if zc != nil {
			c.queuePayload(buf, zc, qp.dst)
		} else {
			c.queue(buf, qp.dst)
		}
	}
}

func (qp *QP) sendAtomicAck(res *rdResource) {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.AtomicAcknowledge, PKey: wire.PKeyDefault, DestQP: qp.attr.DestQPN, PSN: res.first}
	h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: res.msn}
	h.AtomicAckETH.Orig = res.orig
	qp.ctx.queue(wire.AppendPacket(qp.ctx.getBuf(), &h, nil), qp.dst)
}

// sendAck sends an ACK or NAK with the given syndrome for psn.
func (qp *QP) sendAck(psn PSN, syn wire.Syndrome) {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.Acknowledge, PKey: wire.PKeyDefault, DestQP: qp.attr.DestQPN, PSN: psn}
	h.AETH = wire.AETHFields{Syndrome: syn, MSN: qp.rsp.msn}
	qp.ctx.queue(wire.AppendPacket(qp.ctx.getBuf(), &h, nil), qp.dst)
}

func (qp *QP) rnrNak(psn PSN) {
	qp.ctx.ctr.rnrNAKsSent.Add(1)
	qp.sendAck(psn, wire.SyndromeRNR(qp.attr.MinRNRTimer))
}

// nak sends a fatal NAK and moves the QP to ERR, as rxe's responder does
// after class B/C/D errors.
func (qp *QP) nak(psn PSN, syn wire.Syndrome, now time.Time) {
	qp.ctx.ctr.naksSent[nakKindOf(syn)].Add(1)
	qp.sendAck(psn, syn)
	qp.rsp.cur = respNone
	qp.ctx.postAsync(AsyncEvent{Type: EventQPReqErr, QP: qp})
	qp.enterError(now)
}
