package verbs

// The responder of a QP (rxe_resp.c in spirit): PSN checks, opcode
// sequence, access and bounds checks, execution of SEND, WRITE, READ and
// atomics, ACK/NAK/RNR NAK generation, duplicate detection and replay of
// READ responses and atomic results. Runs with qp.mu held.

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs/internal/mem"
)

type respKind uint8

const (
	respNone respKind = iota
	respSend
	respWrite
)

type responder struct {
	ePSN    PSN
	msn     uint32
	nakSent bool
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
}

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

// respondRC handles one RC request packet.
func (qp *QP) respondRC(pkt *wire.Packet, now time.Time) {
	c := qp.ctx
	r := &qp.rsp
	psn := pkt.BTH.PSN()
	op := pkt.BTH.Opcode()
	d := psn.Diff(r.ePSN)
	if d > 0 {
		if !r.nakSent {
			r.nakSent = true
			qp.sendAck(r.ePSN, wire.SyndromePSNSeqError)
			c.ctr.naksSent[NAKSeq].Add(1)
		}
		c.ctr.drop(DropPSN)
		return
	}
	if d < 0 {
		c.ctr.dupRequests.Add(1)
		qp.duplicate(pkt, psn, op)
		return
	}
	r.nakSent = false
	// Opcode sequence.
	switch r.cur {
	case respSend:
		if !op.Has(wire.IsSend) || !(op.Has(wire.IsMiddle) || op.Has(wire.IsLast)) {
			qp.nakInvalid(psn, now)
			return
		}
	case respWrite:
		if !op.Has(wire.IsWrite) || !(op.Has(wire.IsMiddle) || op.Has(wire.IsLast)) {
			qp.nakInvalid(psn, now)
			return
		}
	default:
		if op.Has(wire.IsMiddle) || op.Has(wire.IsLast) {
			qp.nakInvalid(psn, now)
			return
		}
	}
	pmtu := uint64(qp.pmtu)
	n := uint64(len(pkt.Payload))
	// Segment sizes: FIRST and MIDDLE exactly PMTU, LAST 1..PMTU, ONLY 0..PMTU.
	if op.Has(wire.HasPayload) {
		switch {
		case op.Has(wire.IsFirst) || op.Has(wire.IsMiddle):
			if n != pmtu || pkt.BTH.PadCnt() != 0 {
				qp.nakInvalid(psn, now)
				return
			}
		case op.Has(wire.IsLast):
			if n == 0 || n > pmtu {
				qp.nakInvalid(psn, now)
				return
			}
		default:
			if n > pmtu {
				qp.nakInvalid(psn, now)
				return
			}
		}
	}
	access := qp.attr.AccessFlags
	switch {
	case op.Has(wire.IsSend):
		if op.Has(wire.IsFirst) || op.Has(wire.IsOnly) {
			if !qp.popRecv(&r.recv) {
				qp.rnrNak(psn)
				return
			}
			r.inRecv = true
			r.recvOff = 0
		}
		// The message does not fit the receive buffer, or the receive's
		// SGEs do not name writable memory of the PD: as rdma_rxe's
		// responder (copy_data fails, a malformed WQE, class A) the
		// receive completes with LOC_QP_OP_ERR, the requester gets NAK
		// remote operation error, and nothing is placed outside the SGEs.
		if r.recvOff+n > r.recv.size || c.scatter(r.recv.sgl, r.recvOff, pkt.Payload, qp.pd.id) != WCSuccess {
			wc := WC{Status: WCLocQPOpErr, Opcode: WCRecv, SrcQP: qp.attr.DestQPN}
			r.inRecv = false
			qp.completeRecv(&r.recv, &wc, false)
			qp.nak(psn, wire.SyndromeRemoteOp, now)
			return
		}
		r.recvOff += n
		r.cur = respSend
		if op.Has(wire.IsLast) || op.Has(wire.IsOnly) {
			r.cur = respNone
			r.inRecv = false
			r.msn = (r.msn + 1) & 0xFFFFFF
			c.ctr.executed.Add(1)
			wc := WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(r.recvOff), SrcQP: qp.attr.DestQPN}
			if pkt.ImmDt != nil {
				wc.Flags |= WCFlagWithImm
				wc.ImmData = pkt.ImmDt.Imm()
			}
			if pkt.IETH != nil {
				wc.Flags |= WCFlagWithInv
				wc.InvalidatedRKey = pkt.IETH.RKey()
				c.mrs.Deregister(uint32(pkt.IETH.RKey()))
			}
			qp.completeRecv(&r.recv, &wc, pkt.BTH.SE())
		}
		r.ePSN = psn.Next()
		if pkt.BTH.AckReq() {
			qp.sendAck(psn, wire.SyndromeACK)
		}
	case op.Has(wire.IsWrite):
		if access&AccessRemoteWrite == 0 {
			qp.nakInvalid(psn, now)
			return
		}
		if pkt.RETH != nil {
			dl := uint64(pkt.RETH.DMALen())
			if dl > MaxMessageSize || op.Has(wire.IsOnly) && n != dl || op.Has(wire.IsFirst) && dl <= pmtu {
				qp.nakInvalid(psn, now)
				return
			}
			r.wKey, r.wVA, r.wLen, r.wOff = uint32(pkt.RETH.RKey()), pkt.RETH.VA(), dl, 0
			if dl > 0 {
				c.mrs.RLock()
				_, st := c.mrs.Lookup(r.wKey, qp.pd.id, r.wVA, dl, mem.RemoteWrite)
				c.mrs.RUnlock()
				if st != mem.OK {
					qp.nak(psn, wire.SyndromeRemoteAccess, now)
					return
				}
			}
		}
		if r.wOff+n > r.wLen || op.Has(wire.IsLast) && r.wOff+n != r.wLen {
			qp.nakInvalid(psn, now)
			return
		}
		// WRITE_WITH_IMM consumes a receive WQE when its last packet arrives.
		imm := pkt.ImmDt != nil
		if imm && !qp.popRecv(&r.recv) {
			qp.rnrNak(psn)
			return
		}
		if n > 0 {
			c.mrs.RLock()
			dst, st := c.mrs.Lookup(r.wKey, qp.pd.id, r.wVA+r.wOff, n, mem.RemoteWrite)
			if st == mem.OK {
				copy(dst, pkt.Payload)
			}
			c.mrs.RUnlock()
			if st != mem.OK {
				qp.nak(psn, wire.SyndromeRemoteAccess, now)
				return
			}
		}
		r.wOff += n
		r.cur = respWrite
		if op.Has(wire.IsLast) || op.Has(wire.IsOnly) {
			r.cur = respNone
			r.msn = (r.msn + 1) & 0xFFFFFF
			c.ctr.executed.Add(1)
			if imm {
				wc := WC{Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.wLen), SrcQP: qp.attr.DestQPN,
					Flags: WCFlagWithImm, ImmData: pkt.ImmDt.Imm()}
				qp.completeRecv(&r.recv, &wc, pkt.BTH.SE())
			}
		}
		r.ePSN = psn.Next()
		if pkt.BTH.AckReq() {
			qp.sendAck(psn, wire.SyndromeACK)
		}
	case op == wire.ReadRequest:
		if access&AccessRemoteRead == 0 || len(r.res) == 0 {
			qp.nakInvalid(psn, now)
			return
		}
		va, rkey, dl := pkt.RETH.VA(), uint32(pkt.RETH.RKey()), pkt.RETH.DMALen()
		if uint64(dl) > MaxMessageSize {
			qp.nakInvalid(psn, now)
			return
		}
		if dl > 0 {
			c.mrs.RLock()
			_, st := c.mrs.Lookup(rkey, qp.pd.id, va, uint64(dl), mem.RemoteRead)
			c.mrs.RUnlock()
			if st != mem.OK {
				qp.nak(psn, wire.SyndromeRemoteAccess, now)
				return
			}
		}
		np := npkts(dl, qp.pmtu)
		r.msn = (r.msn + 1) & 0xFFFFFF
		c.ctr.executed.Add(1)
		res := qp.newResource()
		*res = rdResource{valid: true, first: psn, last: psn.Add(np - 1), va: va, length: dl, rkey: rkey, msn: r.msn}
		r.ePSN = psn.Add(np)
		qp.sendReadResponses(res, psn, dl)
	case op.IsAtomic():
		if access&AccessRemoteAtomic == 0 || len(r.res) == 0 {
			qp.nakInvalid(psn, now)
			return
		}
		a := pkt.AtomicETH
		va := a.VA()
		if va%8 != 0 {
			qp.nakInvalid(psn, now)
			return
		}
		c.mrs.RLock()
		b, st := c.mrs.Lookup(uint32(a.RKey()), qp.pd.id, va, 8, mem.RemoteAtomic)
		var orig uint64
		if st == mem.OK {
			orig = doAtomic(b, op, a.SwapAdd(), a.Compare())
		}
		c.mrs.RUnlock()
		if st != mem.OK {
			qp.nak(psn, wire.SyndromeRemoteAccess, now)
			return
		}
		r.msn = (r.msn + 1) & 0xFFFFFF
		c.ctr.executed.Add(1)
		res := qp.newResource()
		*res = rdResource{valid: true, atomic: true, first: psn, last: psn, orig: orig, msn: r.msn}
		r.ePSN = psn.Next()
		qp.sendAtomicAck(res)
	default:
		qp.nakInvalid(psn, now)
	}
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

// duplicate answers a request whose PSN is before the expected one.
func (qp *QP) duplicate(pkt *wire.Packet, psn PSN, op wire.Opcode) {
	r := &qp.rsp
	switch {
	case op == wire.ReadRequest:
		for i := range r.res {
			res := &r.res[i]
			if !res.valid || res.atomic || psn.Diff(res.first) < 0 || psn.Diff(res.last) > 0 {
				continue
			}
			// The duplicate must ask for a part of the original range, with
			// the same R_Key; rxe then replays what it asks for.
			off := uint64(psn.Diff(res.first)) * uint64(qp.pmtu)
			dl := uint64(pkt.RETH.DMALen())
			if pkt.RETH.RKey() != RKey(res.rkey) || pkt.RETH.VA() != res.va+off || off+dl > uint64(res.length) {
				qp.ctx.ctr.drop(DropDuplicate)
				return
			}
			qp.sendReadResponses(res, psn, uint32(off+dl))
			return
		}
		// Older than every saved READ: silently dropped (IBTA 9.7.5.1.2
		// lets the responder forget old read responses).
		qp.ctx.ctr.drop(DropDuplicate)
	case op.IsAtomic():
		for i := range r.res {
			res := &r.res[i]
			if res.valid && res.atomic && res.first == psn {
				qp.sendAtomicAck(res)
				return
			}
		}
		qp.ctx.ctr.drop(DropDuplicate)
	default:
		qp.sendAck(r.ePSN.Add(-1), wire.SyndromeACK)
	}
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
		buf := h.Append(c.getBuf())
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

func (qp *QP) nakInvalid(psn PSN, now time.Time) { qp.nak(psn, wire.SyndromeInvalidReq, now) }

// nak sends a fatal NAK and moves the QP to ERR, as rxe's responder does
// after class B/C/D errors.
func (qp *QP) nak(psn PSN, syn wire.Syndrome, now time.Time) {
	qp.ctx.ctr.naksSent[nakKindOf(syn)].Add(1)
	qp.sendAck(psn, syn)
	qp.rsp.cur = respNone
	qp.ctx.postAsync(AsyncEvent{Type: EventQPReqErr, QP: qp})
	qp.enterError(now)
}

// respondUC handles one UC request packet: no ACKs; a lost packet drops
// the rest of its message and the responder resynchronises on the next
// FIRST or ONLY.
func (qp *QP) respondUC(pkt *wire.Packet, now time.Time) {
	c := qp.ctx
	r := &qp.rsp
	psn := pkt.BTH.PSN()
	op := pkt.BTH.Opcode()
	starts := op.Has(wire.IsFirst) || op.Has(wire.IsOnly)
	if psn != r.ePSN || (r.cur == respNone) != starts {
		qp.abortUC()
		if !starts {
			c.ctr.drop(DropPSN)
			r.ePSN = psn.Next()
			return
		}
	}
	r.ePSN = psn.Next()
	pmtu := uint64(qp.pmtu)
	n := uint64(len(pkt.Payload))
	if (op.Has(wire.IsFirst) || op.Has(wire.IsMiddle)) && n != pmtu || n > pmtu {
		c.ctr.drop(DropLength)
		qp.abortUC()
		return
	}
	switch {
	case op.Has(wire.IsSend):
		if starts {
			// A WQE kept from an aborted message is used again.
			if !r.inRecv && !qp.popRecv(&r.recv) {
				c.ctr.drop(DropNoRecv)
				return
			}
			r.inRecv = true
			r.recvOff = 0
		}
		if r.recvOff+n > r.recv.size {
			wc := WC{Status: WCLocLenErr, Opcode: WCRecv, SrcQP: qp.attr.DestQPN}
			r.inRecv = false
			r.cur = respNone
			qp.completeRecv(&r.recv, &wc, false)
			return
		}
		if st := c.scatter(r.recv.sgl, r.recvOff, pkt.Payload, qp.pd.id); st != WCSuccess {
			wc := WC{Status: st, Opcode: WCRecv, SrcQP: qp.attr.DestQPN}
			r.inRecv = false
			r.cur = respNone
			qp.completeRecv(&r.recv, &wc, false)
			return
		}
		r.recvOff += n
		r.cur = respSend
		if op.Has(wire.IsLast) || op.Has(wire.IsOnly) {
			c.ctr.executed.Add(1)
			r.cur = respNone
			r.inRecv = false
			wc := WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(r.recvOff), SrcQP: qp.attr.DestQPN}
			if pkt.ImmDt != nil {
				wc.Flags |= WCFlagWithImm
				wc.ImmData = pkt.ImmDt.Imm()
			}
			qp.completeRecv(&r.recv, &wc, pkt.BTH.SE())
		}
	case op.Has(wire.IsWrite):
		if qp.attr.AccessFlags&AccessRemoteWrite == 0 {
			c.ctr.drop(DropAccess)
			qp.abortUC()
			return
		}
		if pkt.RETH != nil {
			r.wKey, r.wVA, r.wLen, r.wOff = uint32(pkt.RETH.RKey()), pkt.RETH.VA(), uint64(pkt.RETH.DMALen()), 0
			// The whole message's range is checked before its first byte
			// moves, as for RC; UC has no NAK, so it is dropped.
			if r.wLen > 0 {
				c.mrs.RLock()
				_, st := c.mrs.Lookup(r.wKey, qp.pd.id, r.wVA, r.wLen, mem.RemoteWrite)
				c.mrs.RUnlock()
				if st != mem.OK {
					c.ctr.drop(DropAccess)
					qp.abortUC()
					return
				}
			}
		}
		if r.wOff+n > r.wLen || op.Has(wire.IsLast) && r.wOff+n != r.wLen {
			c.ctr.drop(DropLength)
			qp.abortUC()
			return
		}
		imm := pkt.ImmDt != nil
		// A WQE kept from an aborted SEND is the next one in line: it
		// takes the immediate data (popping another would lose it).
		if imm && !r.inRecv {
			if !qp.popRecv(&r.recv) {
				c.ctr.drop(DropNoRecv)
				qp.abortUC()
				return
			}
			r.inRecv = true
		}
		if n > 0 {
			c.mrs.RLock()
			dst, st := c.mrs.Lookup(r.wKey, qp.pd.id, r.wVA+r.wOff, n, mem.RemoteWrite)
			if st == mem.OK {
				copy(dst, pkt.Payload)
			}
			c.mrs.RUnlock()
			if st != mem.OK {
				c.ctr.drop(DropAccess) // deregistered in mid-message
				qp.abortUC()
				return
			}
		}
		r.wOff += n
		r.cur = respWrite
		if op.Has(wire.IsLast) || op.Has(wire.IsOnly) {
			c.ctr.executed.Add(1)
			r.cur = respNone
			if imm {
				r.inRecv = false
				wc := WC{Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.wLen), SrcQP: qp.attr.DestQPN,
					Flags: WCFlagWithImm, ImmData: pkt.ImmDt.Imm()}
				qp.completeRecv(&r.recv, &wc, pkt.BTH.SE())
			}
		}
	}
}

// abortUC drops the UC message in progress. A receive WQE it had taken
// stays with the responder (inRecv) and receives the next SEND.
func (qp *QP) abortUC() {
	qp.rsp.cur = respNone
}

// respondUD handles a UD SEND: Q_Key check, one packet, a 40-byte GRH area
// in front of the payload.
func (qp *QP) respondUD(pkt *wire.Packet, from netip.AddrPort, ipID uint16) {
	c := qp.ctx
	if pkt.DETH.QKey() != qp.attr.QKey {
		c.ctr.drop(DropQKey)
		return
	}
	rw := &qp.rsp.recv
	if !qp.popRecv(rw) {
		c.ctr.drop(DropNoRecv)
		return
	}
	var grh [40]byte
	fillGRH(&grh, from, c.local, ipID, len(pkt.Payload)+len(pkt.Pad)+wire.ICRCSize+pkt.Opcode().HdrLen())
	wc := WC{Status: WCSuccess, Opcode: WCRecv, SrcQP: pkt.DETH.SrcQP(), Flags: WCFlagGRH,
		ByteLen: uint32(40 + len(pkt.Payload))}
	if uint64(40+len(pkt.Payload)) > rw.size {
		wc.Status = WCLocLenErr
	} else if st := c.scatter(rw.sgl, 0, grh[:], qp.pd.id); st != WCSuccess {
		wc.Status = st
	} else if st := c.scatter(rw.sgl, 40, pkt.Payload, qp.pd.id); st != WCSuccess {
		wc.Status = st
	}
	if pkt.ImmDt != nil {
		wc.Flags |= WCFlagWithImm
		wc.ImmData = pkt.ImmDt.Imm()
	}
	if wc.Status == WCSuccess {
		c.ctr.executed.Add(1)
	}
	qp.completeRecv(rw, &wc, pkt.BTH.SE())
}

// fillGRH writes the network header area of a UD receive as rxe does: for
// IPv4 the 20-byte IPv4 header in bytes 20..39, for IPv6 the 40-byte IPv6
// header. roceLen is the UDP payload length.
func fillGRH(g *[40]byte, src, dst netip.AddrPort, ipID uint16, roceLen int) {
	udpLen := 8 + roceLen
	if src.Addr().Unmap().Is4() {
		h := g[20:]
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+udpLen))
		binary.BigEndian.PutUint16(h[4:], ipID)
		binary.BigEndian.PutUint16(h[6:], 0x4000)
		h[8] = 64
		h[9] = 17
		s4, d4 := src.Addr().Unmap().As4(), dst.Addr().Unmap().As4()
		copy(h[12:16], s4[:])
		copy(h[16:20], d4[:])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(h[i])<<8 | uint32(h[i+1])
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		return
	}
	g[0] = 0x60
	binary.BigEndian.PutUint16(g[4:], uint16(udpLen))
	g[6] = 17
	g[7] = 64
	s16, d16 := src.Addr().As16(), dst.Addr().As16()
	copy(g[8:24], s16[:])
	copy(g[24:40], d16[:])
}
