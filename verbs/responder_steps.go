package verbs

// The responder's checks as steps. Each step is a function of plain
// values (the responder's state, fields of the parsed packet, the status
// of a memory region lookup) that returns a respAction; it changes
// nothing. The RC and UC responders run the steps in rxe's order and apply
// the first action that is not actOK (applyRC, applyUC): the same action
// is a NAK on RC and a counted drop on UC.

import (
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs/internal/mem"
)

// respActionKind says what the responder does with a request packet.
type respActionKind uint8

const (
	// actOK: the packet passes the step. From an execute step: the
	// packet was handled, answers and completions included.
	actOK respActionKind = iota
	// actDrop: the packet is dropped without an answer; drop says why.
	actDrop
	// actNAKSeq: the PSN is ahead of the expected one (a packet was
	// lost). RC answers with one PSN sequence error NAK for the expected
	// PSN and drops the packet; later packets of the gap are actDrop.
	actNAKSeq
	// actDuplicate: the PSN is behind the expected one. RC answers it
	// from what it executed before (answerDuplicate).
	actDuplicate
	// actRNR: no receive WQE is posted. RC answers with an RNR NAK; UC
	// drops the packet (DropNoRecv).
	actRNR
	// actNAK: the request is refused. RC sends a NAK with syn and moves
	// the QP to ERR; UC drops the packet (drop) and abandons the message.
	actNAK
	// actResync: UC only: the message in progress is abandoned and this
	// packet, a FIRST or ONLY, starts the next one.
	actResync
)

// respAction is a step's decision.
type respAction struct {
	kind respActionKind
	syn  wire.Syndrome // actNAK: the NAK's syndrome on RC
	drop DropReason    // actDrop, actNAK, actRNR: the drop a UC responder counts
}

func (a respAction) ok() bool { return a.kind == actOK }

var (
	accept    = respAction{}
	needRecv  = respAction{kind: actRNR, drop: DropNoRecv}
	dupPacket = respAction{kind: actDuplicate}
)

func dropAs(r DropReason) respAction { return respAction{kind: actDrop, drop: r} }

func refuse(syn wire.Syndrome, r DropReason) respAction {
	return respAction{kind: actNAK, syn: syn, drop: r}
}

// ends reports whether op carries the last packet of a message.
func ends(op wire.Opcode) bool { return op.Has(wire.IsLast) || op.Has(wire.IsOnly) }

// starts reports whether op carries the first packet of a message.
func starts(op wire.Opcode) bool { return op.Has(wire.IsFirst) || op.Has(wire.IsOnly) }

// checkPSN is the RC PSN check against the expected PSN: in order, a
// duplicate, or ahead (a gap, NAKed once: nakSent says the NAK went).
func checkPSN(ePSN PSN, nakSent bool, psn PSN) respAction {
	d := psn.Diff(ePSN)
	switch {
	case d > 0 && nakSent:
		return dropAs(DropPSN)
	case d > 0:
		return respAction{kind: actNAKSeq, drop: DropPSN}
	case d < 0:
		return dupPacket
	}
	return accept
}

// checkUCPSN is the UC PSN and opcode sequence check. UC has no NAKs and
// no duplicates: a packet out of sequence (or one that does not continue
// the message in progress) abandons that message; a FIRST or ONLY starts
// the next one, anything else is dropped until one comes. Either way the
// expected PSN moves past psn.
func checkUCPSN(ePSN PSN, cur respKind, psn PSN, op wire.Opcode) respAction {
	if psn == ePSN && (cur == respNone) == starts(op) {
		return accept
	}
	if !starts(op) {
		return dropAs(DropPSN)
	}
	return respAction{kind: actResync}
}

// checkOpSequence is the RC opcode sequence check: a SEND or WRITE in
// progress continues with a MIDDLE or LAST of the same kind; otherwise a
// message starts (FIRST or ONLY).
func checkOpSequence(cur respKind, op wire.Opcode) respAction {
	cont := op.Has(wire.IsMiddle) || op.Has(wire.IsLast)
	var ok bool
	switch cur {
	case respSend:
		ok = cont && op.Has(wire.IsSend)
	case respWrite:
		ok = cont && op.Has(wire.IsWrite)
	default:
		ok = !cont
	}
	if !ok {
		return refuse(wire.SyndromeInvalidReq, DropPSN)
	}
	return accept
}

// checkRCLength is the RC segment size check: FIRST and MIDDLE carry
// exactly one PMTU and no pad, LAST 1..PMTU bytes, ONLY 0..PMTU.
func checkRCLength(op wire.Opcode, n, pmtu, pad int) respAction {
	if !op.Has(wire.HasPayload) {
		return accept
	}
	var ok bool
	switch {
	case op.Has(wire.IsFirst) || op.Has(wire.IsMiddle):
		ok = n == pmtu && pad == 0
	case op.Has(wire.IsLast):
		ok = n > 0 && n <= pmtu
	default:
		ok = n <= pmtu
	}
	if !ok {
		return refuse(wire.SyndromeInvalidReq, DropLength)
	}
	return accept
}

// checkUCLength is the UC segment size check: FIRST and MIDDLE carry
// exactly one PMTU, no packet more.
func checkUCLength(op wire.Opcode, n, pmtu int) respAction {
	if (op.Has(wire.IsFirst) || op.Has(wire.IsMiddle)) && n != pmtu || n > pmtu {
		return dropAs(DropLength)
	}
	return accept
}

// checkRights checks that the QP's access flags allow op, and that a READ
// or atomic has responder resources (resources: max_dest_rd_atomic
// rounded up; 0 refuses them). A SEND needs no right.
func checkRights(op wire.Opcode, access AccessFlags, resources int) respAction {
	var need AccessFlags
	switch {
	case op.Has(wire.IsSend):
		return accept
	case op.Has(wire.IsWrite):
		need = AccessRemoteWrite
	case op == wire.ReadRequest:
		need = AccessRemoteRead
	case op.IsAtomic():
		need = AccessRemoteAtomic
	default:
		return refuse(wire.SyndromeInvalidReq, DropOpcode)
	}
	if access&need == 0 || need != AccessRemoteWrite && resources == 0 {
		return refuse(wire.SyndromeInvalidReq, DropAccess)
	}
	return accept
}

// checkRETH checks an RC request's DMA length dl against the message: at
// most MaxMessageSize; a WRITE ONLY carries all of it (n bytes), a WRITE
// FIRST starts a message longer than one PMTU.
func checkRETH(op wire.Opcode, dl, n, pmtu uint64) respAction {
	bad := dl > MaxMessageSize
	if op.Has(wire.IsWrite) {
		bad = bad || op.Has(wire.IsOnly) && n != dl || op.Has(wire.IsFirst) && dl <= pmtu
	}
	if bad {
		return refuse(wire.SyndromeInvalidReq, DropLength)
	}
	return accept
}

// checkWriteExtent checks that a WRITE packet of n bytes at offset off of
// a message of length bytes stays inside it, and that the last packet
// ends it.
func checkWriteExtent(op wire.Opcode, off, length, n uint64) respAction {
	if off+n > length || op.Has(wire.IsLast) && off+n != length {
		return refuse(wire.SyndromeInvalidReq, DropLength)
	}
	return accept
}

// checkAtomicVA checks an atomic's address: 8-byte aligned.
func checkAtomicVA(va uint64) respAction {
	if va%8 != 0 {
		return refuse(wire.SyndromeInvalidReq, DropAccess)
	}
	return accept
}

// checkMR turns the status of a memory region lookup (the rkey, the PD,
// the access right, the bounds) into an action.
func checkMR(st mem.Status) respAction {
	if st != mem.OK {
		return refuse(wire.SyndromeRemoteAccess, DropAccess)
	}
	return accept
}

// dupAnswerKind says how an RC responder answers a duplicate request.
type dupAnswerKind uint8

const (
	// dupAck: a SEND or WRITE: acknowledge the last PSN executed again.
	dupAck dupAnswerKind = iota
	// dupRead: replay READ responses of res from the duplicate's PSN up
	// to byte end of the saved range.
	dupRead
	// dupAtomic: resend res's atomic ACK (the saved original value; the
	// atomic is not executed again).
	dupAtomic
	// dupDrop: a READ or atomic that matches no saved request: dropped
	// (DropDuplicate).
	dupDrop
)

type dupAnswer struct {
	kind dupAnswerKind
	res  int    // dupRead, dupAtomic: index into the saved requests
	end  uint32 // dupRead
}

// dupRequest is what a duplicate READ or atomic asks for.
type dupRequest struct {
	psn  PSN
	op   wire.Opcode
	va   uint64 // READ
	rkey RKey   // READ
	dl   uint32 // READ
}

// answerDuplicate finds the saved request a duplicate repeats. A
// duplicate READ must ask for a part of the original range, from the
// offset its PSN stands for, with the same R_Key; rxe then replays what it
// asks for. A READ older than every saved one is dropped: IBTA 9.7.5.1.2
// lets the responder forget old read responses.
func answerDuplicate(saved []rdResource, pmtu int, q dupRequest) dupAnswer {
	switch {
	case q.op == wire.ReadRequest:
		for i := range saved {
			res := &saved[i]
			if !res.valid || res.atomic || q.psn.Diff(res.first) < 0 || q.psn.Diff(res.last) > 0 {
				continue
			}
			off := uint64(q.psn.Diff(res.first)) * uint64(pmtu)
			if q.rkey != RKey(res.rkey) || q.va != res.va+off || off+uint64(q.dl) > uint64(res.length) {
				return dupAnswer{kind: dupDrop}
			}
			return dupAnswer{kind: dupRead, res: i, end: uint32(off + uint64(q.dl))}
		}
		return dupAnswer{kind: dupDrop}
	case q.op.IsAtomic():
		for i := range saved {
			if res := &saved[i]; res.valid && res.atomic && res.first == q.psn {
				return dupAnswer{kind: dupAtomic, res: i}
			}
		}
		return dupAnswer{kind: dupDrop}
	}
	return dupAnswer{kind: dupAck}
}
