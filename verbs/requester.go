package verbs

// The requester of a QP (rxe_req.c in spirit): segmentation, PSN
// assignment, AckReq, the send window, the retransmit and RNR timers and
// go-back-N. The completer (completer.go) handles what the peer answers.
// Everything here runs with qp.mu held and takes the current time as an
// argument; the only side effects are packets queued on the context and
// completions pushed to CQs.

import (
	"fmt"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

const (
	// maxUnackedPSNs bounds how far the requester runs ahead of the
	// oldest unacknowledged PSN (rxe: RXE_MAX_UNACKED_PSNS).
	maxUnackedPSNs = 128
	// maxPktsPerAck forces AckReq on one packet in this many (rxe:
	// RXE_MAX_PKT_PER_ACK).
	maxPktsPerAck = 64
	// maxUnackedBytes bounds the payload the requester has in flight when
	// its packets are large (the large-segment extension): 128 packets of
	// 61440 bytes are 7.5 MiB, more than a tbrdma peer's socket receive
	// buffer holds (transport.DefaultSocketBuffer: 4 MiB asked, 8 MiB
	// granted) once the kernel's per-datagram overhead is counted. A
	// receiver that falls behind then drops datagrams (UDP RcvbufErrors),
	// and every drop costs a NAK and a go-back-N resend of up to the whole
	// window. 6 MiB (102 packets of 61440 bytes) leaves that overhead room;
	// see docs/performance.md. With the standard 4096-byte path the PSN
	// bound (512 KiB) is the smaller one and applies, as in rxe.
	maxUnackedBytes = 6 << 20
)

// MaxSendWindow is the largest window SetSendWindow accepts: 2048 packets
// of 4096 bytes are 8 MiB, as much as a tbrdma peer's socket receive buffer
// holds.
const MaxSendWindow = 2048

// unackedLimit is how many PSNs the requester may run ahead of the oldest
// unacknowledged one: maxUnackedPSNs (or the window SetSendWindow chose),
// fewer for large segments.
func (qp *QP) unackedLimit() int32 {
	w := maxUnackedPSNs
	if qp.window > 0 && (!qp.req.lossy || qp.window < w) {
		w = qp.window // a loss never widens a narrow window
	}
	return int32(min(w, max(16, maxUnackedBytes/max(qp.pmtu, 1))))
}

// lossSeen notes a loss (a PSN-sequence NAK, a timeout): a QP that
// SetSendWindow widened falls back to the default window for good (one it
// narrowed keeps its window: several QPs share a peer's buffer so).
// Go-back-N resends everything after a lost packet, so each loss costs a
// whole window, and a wide window costs more per loss than it gains (the
// figures are in docs/performance.md). The wide window is for a clean
// link, which Thunderbolt is; a link that loses gets rxe's.
func (qp *QP) lossSeen() { qp.req.lossy = !qp.sr }

// SetSendWindow sets how many packets an RC QP's requester may have sent
// and not yet seen acknowledged, n from 16 to MaxSendWindow; 0 restores
// the default of 128 (rdma_rxe's RXE_MAX_UNACKED_PSNS). Whatever n, the
// payload in flight stays within 6 MiB. This is a tbrdma extension, not an
// ibv_modify_qp attribute: use it only toward a peer known to be tbrdma
// (its perftest exchange or connection said so), whose 8 MiB socket buffer
// takes a larger burst. rdma_rxe's responder keeps up with 128; more would
// only fill its queues. After the QP's first loss the default applies
// again for good (lossSeen), unless n is narrower: go-back-N pays a
// window per loss. A narrower window suits several QPs toward one peer,
// which share its buffer (the perftest commands' -q); one narrower than
// 64 packets asks for an ACK when it fills. A wider
// window pays at 4096-byte packets: with 128, two ACK intervals
// (maxPktsPerAck) fill it, and the sender waits for the receiver's
// turnaround (docs/performance.md).
func (qp *QP) SetSendWindow(n int) error {
	if n != 0 && (n < 16 || n > MaxSendWindow) {
		return fmt.Errorf("verbs: send window %d: want 16..%d, or 0 for the default: %w", n, MaxSendWindow, ErrInvalidArgument)
	}
	if qp.typ != QPTypeRC {
		return fmt.Errorf("verbs: send window on a %v QP: only RC QPs have one: %w", qp.typ, ErrInvalidArgument)
	}
	qp.mu.Lock()
	qp.window = n
	qp.mu.Unlock()
	return nil
}

type requester struct {
	psn       PSN // next PSN to send
	compPSN   PSN // oldest PSN not yet acknowledged
	rdOut     int // READ/atomic WQEs awaiting responses
	retryLeft int
	rnrLeft   int
	noAckPkts int
	retxAt    time.Time // retransmit deadline, zero = not armed
	rnrAt     time.Time // end of the RNR wait, zero = not waiting
	inRetry   bool
	readGap   bool // a READ response gap was re-requested; cleared by progress
	lossy     bool // a loss was seen: SetSendWindow's window no longer applies
	sentPSN   PSN  // one past the highest PSN sent (psn may be lower after a rewind)
	ackNext   bool // the next packet built asks for an ACK (a resend's last)

	// selective retransmission (selective.go)
	probeAt  time.Time // tail-loss probe deadline, zero = not armed
	probes   int       // probes sent since the last progress
	probed   bool      // a probe went since the gap was last resent
	gap      bool      // gapStart..gapEnd-1 is the gap resent last
	gapStart PSN
	gapEnd   PSN
}

func (r *requester) deadline() time.Time {
	at := r.retxAt
	for _, t := range [...]time.Time{r.rnrAt, r.probeAt} {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at
}

// ackTimeout returns the local ACK timeout, or 0 when there is none.
func (qp *QP) ackTimeout() time.Duration {
	t := qp.attr.Timeout
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

func (qp *QP) wqe(i uint64) *sendWQE { return &qp.sq[i%uint64(len(qp.sq))] }

func npkts(length uint32, pmtu int) int {
	if length == 0 {
		return 1
	}
	return int((uint64(length) + uint64(pmtu) - 1) / uint64(pmtu))
}

// pump transmits as much of the send queue as the state, the PSN window
// and the READ/atomic limit allow.
func (qp *QP) pump(now time.Time) {
	if qp.state != QPStateRTS || !qp.req.rnrAt.IsZero() {
		return
	}
	for qp.sqNext != qp.sqTail {
		w := qp.wqe(qp.sqNext)
		switch qp.typ {
		case QPTypeUD:
			qp.sendUD(w)
			qp.sqNext++
			qp.sqHead++
			continue
		case QPTypeUC:
			if w.sent == 0 {
				w.npkts = npkts(w.length, qp.pmtu)
				w.first = qp.req.psn
				w.last = w.first.Add(w.npkts - 1)
			}
			if !qp.sendSegment(w, now) {
				return
			}
			if w.sent == w.npkts {
				qp.sqNext++
				qp.sqHead++
				qp.completeSend(w, WCSuccess)
			}
			continue
		}
		// RC
		if qp.req.psn.Diff(qp.req.compPSN) >= qp.unackedLimit() {
			return
		}
		if w.sent == 0 && w.npkts == 0 {
			if w.wr.Opcode.isReadLike() && qp.req.rdOut >= int(qp.attr.MaxRdAtomic) {
				return
			}
			if w.wr.Flags&SendFence != 0 && qp.req.rdOut > 0 {
				return
			}
			w.npkts = npkts(w.length, qp.pmtu)
			if w.wr.Opcode.isAtomic() {
				w.npkts = 1
			}
			w.first = qp.req.psn
			w.last = w.first.Add(w.npkts - 1)
			if w.wr.Opcode.isReadLike() {
				qp.req.rdOut++
			}
		}
		if !qp.sendSegment(w, now) {
			return
		}
		if w.sent == w.npkts {
			qp.sqNext++
		}
	}
}

// sendSegment builds and queues the next packet of w (for a READ, the
// request for what is still missing). It returns false when the WQE failed.
func (qp *QP) sendSegment(w *sendWQE, now time.Time) bool {
	c := qp.ctx
	var h wire.Headers
	h.BTH.PKey = wire.PKeyDefault
	h.BTH.DestQP = qp.attr.DestQPN
	psn := w.first.Add(w.sent)
	h.BTH.PSN = psn
	var buf []byte
	op := w.wr.Opcode
	switch {
	case op == WRRDMARead:
		off := uint64(w.sent) * uint64(qp.pmtu)
		h.BTH.Opcode = wire.ReadRequest
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + off, RKey: w.wr.RKey, DMALen: w.length - uint32(off)}
		h.BTH.AckReq = true
		buf = wire.AppendPacket(c.getBuf(), &h, nil)
		qp.req.psn = w.last.Next()
		qp.noteSent()
		w.sent = w.npkts
	case op.isAtomic():
		h.BTH.Opcode = wire.FetchAdd
		h.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
		if op == WRAtomicCmpAndSwp {
			h.BTH.Opcode = wire.CompareSwap
			h.AtomicETH.SwapAdd = w.wr.Swap
			h.AtomicETH.Compare = w.wr.CompareAdd
		}
		h.BTH.AckReq = true
		buf = wire.AppendPacket(c.getBuf(), &h, nil)
		qp.req.psn = psn.Next()
		qp.noteSent()
		w.sent = 1
	default:
		return qp.sendData(w, &h, now)
	}
	c.queue(buf, qp.dst)
	qp.armRetx(now)
	return true
}

// dataOpcode returns the operation (the opcode without its transport
// class) of packet first/last of a SEND or WRITE: FIRST, MIDDLE, LAST or
// ONLY, the last one with immediate data or an invalidation if op has one.
func dataOpcode(op WROpcode, first, last bool) wire.Opcode {
	isWrite := op == WRRDMAWrite || op == WRRDMAWriteWithImm
	var o wire.Opcode
	switch {
	case first && last:
		o = wire.SendOnly
		if isWrite {
			o = wire.WriteOnly
		}
	case first:
		o = wire.SendFirst
		if isWrite {
			o = wire.WriteFirst
		}
	case last:
		o = wire.SendLast
		if isWrite {
			o = wire.WriteLast
		}
	default:
		o = wire.SendMiddle
		if isWrite {
			o = wire.WriteMiddle
		}
	}
	if last {
		switch op {
		case WRSendWithImm, WRRDMAWriteWithImm:
			o++ // *_LAST → *_LAST_WITH_IMMEDIATE, *_ONLY → *_ONLY_WITH_IMMEDIATE
		case WRSendWithInv:
			if first {
				o = wire.SendOnlyInvalidate
			} else {
				o = wire.SendLastInvalidate
			}
		}
	}
	return o
}

// sendData builds and queues the next packet of a SEND or WRITE WQE; h
// holds its BTH's PKey, destination QP and PSN. Its payload is sent from
// registered memory when that is one contiguous range (zero copy), else
// copied. It returns false when the WQE failed.
func (qp *QP) sendData(w *sendWQE, h *wire.Headers, now time.Time) bool {
	c := qp.ctx
	op := w.wr.Opcode
	k := w.sent
	off := uint64(k) * uint64(qp.pmtu)
	n := min(uint64(w.length)-off, uint64(qp.pmtu))
	first, last := k == 0, k == w.npkts-1
	class := wire.ClassRC
	if qp.typ == QPTypeUC {
		class = wire.ClassUC
	}
	h.BTH.Opcode = class | dataOpcode(op, first, last)
	if last {
		switch op {
		case WRSendWithImm, WRRDMAWriteWithImm:
			h.ImmDt.Imm = w.wr.ImmData
		case WRSendWithInv:
			h.IETH.RKey = w.wr.InvalidateRKey
		}
		h.BTH.SE = w.wr.Flags&SendSolicited != 0 && op != WRRDMAWrite
	}
	if (op == WRRDMAWrite || op == WRRDMAWriteWithImm) && first {
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
	}
	if qp.typ == QPTypeRC {
		qp.req.noAckPkts++
		// A window narrower than maxPktsPerAck (SetSendWindow) fills
		// before the periodic AckReq: ask for an ACK on the packet
		// that fills it, else the requester waits for its timer; but
		// not again within half a window of the last ask, whose ACK
		// frees that much (one per packet would double the packets on
		// the link once every ACK refills the window).
		lim := qp.unackedLimit()
		full := lim < maxPktsPerAck && h.BTH.PSN.Next().Diff(qp.req.compPSN) >= lim &&
			int32(qp.req.noAckPkts) >= max(lim/2, 1)
		if last || qp.req.noAckPkts >= maxPktsPerAck || full || qp.req.ackNext {
			h.BTH.AckReq = true
			qp.req.noAckPkts = 0
		}
	}
	buf := h.Append(c.getBufFor(int(n)))
	hl := len(buf)
	var zc []byte // the payload, sent from registered memory
	if n >= zeroCopyMin && w.inline == nil && c.gathers {
		zc = c.contiguous(w.wr.SGList, off, n, qp.pd.id)
	}
	if zc == nil {
		buf = buf[:hl+int(n)]
		payload := buf[hl:]
		if w.inline != nil {
			copy(payload, w.inline[off:off+n])
		} else if st := c.gather(payload, w.wr.SGList, off, qp.pd.id); st != WCSuccess {
			c.putBuf(buf)
			qp.failWQE(w, st, now)
			return false
		}
	}
	pad := wire.PadCount(int(n))
	buf[1] = buf[1]&^0x30 | byte(pad)<<4
	buf = append(buf, zeroPad[:pad+wire.ICRCSize]...)
	w.sent++
	qp.req.psn = h.BTH.PSN.Next()
	qp.noteSent()
	if zc != nil {
		c.queuePayload(buf, zc, qp.dst)
	} else {
		c.queue(buf, qp.dst)
	}
	qp.armRetx(now)
	return true
}

// armRetx starts the retransmit timer of an RC QP if it is not running.
func (qp *QP) armRetx(now time.Time) {
	if qp.typ == QPTypeRC && qp.req.retxAt.IsZero() {
		if t := qp.ackTimeout(); t > 0 {
			qp.req.retxAt = now.Add(t)
		}
	}
	if qp.sr && qp.req.probeAt.IsZero() {
		qp.armProbe(now)
	}
}

var zeroPad [8]byte

// failWQE completes a WQE that could not be transmitted and moves the QP
// to ERR (a local error: the WQE is the oldest one the requester touches).
func (qp *QP) failWQE(w *sendWQE, st WCStatus, now time.Time) {
	for qp.sqHead != qp.sqTail && qp.wqe(qp.sqHead) != w {
		// Earlier WQEs are still in flight; they are flushed as well.
		qp.completeSend(qp.wqe(qp.sqHead), WCWRFlushErr)
		qp.sqHead++
	}
	qp.fail(st, now)
}

func (qp *QP) sendUD(w *sendWQE) {
	c := qp.ctx
	if int(w.length) > qp.pmtu {
		// IBA C10-93.1.1, as rdma_rxe does: a UD message larger than the
		// MTU is not sent, and not an error either: it completes
		// successfully (and uses up its PSN).
		qp.req.psn = qp.req.psn.Next()
		qp.completeSend(w, WCSuccess)
		return
	}
	var h wire.Headers
	// A UD QP numbers its packets from its SQ PSN too, as rxe does (the
	// receiver ignores the PSN).
	h.BTH = wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.PKeyDefault, DestQP: w.wr.RemoteQPN, PSN: qp.req.psn}
	qp.req.psn = qp.req.psn.Next()
	qp.noteSent()
	qkey := w.wr.RemoteQKey
	if qkey&0x80000000 != 0 {
		qkey = qp.attr.QKey
	}
	h.DETH = wire.DETHFields{QKey: qkey, SrcQP: qp.qpn}
	if w.wr.Opcode == WRSendWithImm {
		h.BTH.Opcode = wire.UDSendOnlyImm
		h.ImmDt.Imm = w.wr.ImmData
	}
	h.BTH.SE = w.wr.Flags&SendSolicited != 0
	buf := h.Append(c.getBufFor(int(w.length)))
	hl := len(buf)
	buf = buf[:hl+int(w.length)]
	if w.inline != nil {
		copy(buf[hl:], w.inline)
	} else if st := c.gather(buf[hl:], w.wr.SGList, 0, qp.pd.id); st != WCSuccess {
		c.putBuf(buf)
		qp.completeSend(w, st)
		return
	}
	pad := wire.PadCount(int(w.length))
	buf[1] = buf[1]&^0x30 | byte(pad)<<4
	buf = append(buf, zeroPad[:pad+wire.ICRCSize]...)
	c.queue(buf, w.wr.AH.dst)
	qp.completeSend(w, WCSuccess)
}

// rewind restarts transmission at PSN p (go-back-N).
func (qp *QP) rewind(p PSN, now time.Time) {
	qp.rewindTo(p)
	qp.pump(now)
}

// rewindTo repositions the requester so that the next packet sent is the
// one with PSN p, resuming inside a message if p falls there.
func (qp *QP) rewindTo(p PSN) {
	resumed := false
	for i := qp.sqHead; i != qp.sqTail; i++ {
		w := qp.wqe(i)
		if w.npkts == 0 {
			break
		}
		if !resumed && w.last.Diff(p) >= 0 {
			// p lies in (or before) this WQE: resume here.
			k := int(p.Diff(w.first))
			if k < 0 {
				k = 0
			}
			switch {
			case w.wr.Opcode == WRRDMARead:
				k = int(w.got / uint32(qp.pmtu))
			case w.wr.Opcode.isAtomic():
				k = 0
			}
			if w.sent > k {
				qp.ctx.ctr.retransmits.Add(uint64(w.sent - k))
			}
			w.sent = k
			qp.sqNext = i
			qp.req.psn = w.first.Add(k)
			resumed = true
			continue
		}
		if resumed {
			qp.ctx.ctr.retransmits.Add(uint64(w.sent))
			w.sent = 0
			w.npkts = 0
		}
	}
	// Count every READ and atomic still holding a responder resource,
	// those before p included: a sequence NAK rewinds to the responder's
	// expected PSN, which may lie past READs whose responses are still
	// missing. Counting only from p let the requester run more READs and
	// atomics than max_rd_atomic, and the responder, whose saved requests
	// are a ring of that size, forgot the oldest: its re-request matched
	// nothing and was dropped, until RETRY_EXC_ERR.
	qp.req.rdOut = 0
	for i := qp.sqHead; i != qp.sqTail; i++ {
		w := qp.wqe(i)
		if w.npkts == 0 {
			break
		}
		if w.wr.Opcode.isReadLike() {
			qp.req.rdOut++
		}
	}
	qp.req.noAckPkts = 0
}

// expire handles the QP's timer: the end of an RNR wait or a retransmit
// timeout.
func (qp *QP) expire(now time.Time) {
	if qp.state != QPStateRTS && qp.state != QPStateSQD {
		return
	}
	if !qp.req.rnrAt.IsZero() && !now.Before(qp.req.rnrAt) {
		qp.req.rnrAt = time.Time{}
		qp.rewind(qp.req.compPSN, now)
		if t := qp.ackTimeout(); t > 0 && qp.req.compPSN != qp.req.psn {
			qp.req.retxAt = now.Add(t)
		}
	}
	if !qp.req.probeAt.IsZero() && !now.Before(qp.req.probeAt) {
		if qp.state == QPStateRTS && qp.req.rnrAt.IsZero() {
			qp.sendProbe(now)
		} else {
			// No probe in an RNR wait or SQD; a deadline left in the
			// past would fire the timer again at once, for ever. The
			// next packet sent arms it again.
			qp.req.probeAt = time.Time{}
		}
	}
	if !qp.req.retxAt.IsZero() && !now.Before(qp.req.retxAt) {
		qp.ctx.ctr.timeouts.Add(1)
		if qp.req.retryLeft == 0 {
			qp.fail(WCRetryExcErr, now)
			return
		}
		qp.req.retryLeft--
		qp.req.retxAt = time.Time{}
		// A new round: its gaps may be re-requested at once again. Left
		// set, a round whose first READ response (or atomic ACK) was lost
		// waited out a whole ACK timeout, and spent a retry, although the
		// responses after it were arriving: on a very lossy link READs
		// would end in RETRY_EXC_ERR with the peer alive.
		qp.req.readGap = false
		qp.lossSeen()
		qp.rewind(qp.req.compPSN, now)
		if t := qp.ackTimeout(); t > 0 {
			qp.req.retxAt = now.Add(t)
		}
	}
}

// noteSent moves sentPSN up to psn (PSNs compare within the 24-bit window).
func (qp *QP) noteSent() {
	if qp.req.psn.Diff(qp.req.sentPSN) > 0 {
		qp.req.sentPSN = qp.req.psn
	}
}
