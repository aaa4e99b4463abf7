package verbs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// FuzzResponder delivers one raw RoCEv2 packet — the fuzz input is the BTH
// and everything after it, without the ICRC, which the in-memory link
// fills — from the connected peer to a live RC responder (hostileEnv: a QP
// in RTR, MRs between guard pages), then checks:
//
//   - nothing panics;
//   - the guard pages, the MR of another PD and the deregistered MR never
//     change; the write-only MR changes only under a WRITE;
//   - the QP is in ERR only if it sent a NAK the specification makes fatal
//     (invalid request, remote access, remote operational error);
//   - otherwise it answers a normal SEND at its expected PSN with an ACK
//     and places it — except when the fuzz packet was accepted as the
//     first or middle packet of a message, after which a SEND ONLY is an
//     out-of-sequence opcode the responder must refuse with a fatal NAK
//     (accepted explicitly).
//
// So that inputs can reach the access checks, the harness relocates a few
// values before sending: DestQP 0 becomes the victim's QPN; an R_Key of 1,
// 2, 3 or 4 in a RETH or AtomicETH becomes that of the read-write MR, the
// write-only MR, the other PD's MR or the deregistered MR; and a virtual
// address below the arena's size becomes that offset into the arena
// (page 1 is the read-write MR, page 3 the write-only one). Each input runs
// in its own synctest bubble, on a fresh context (a few hundred µs).
func FuzzResponder(f *testing.F) {
	for _, s := range responderSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < wire.BTHSize || len(in) > 8192 {
			t.Skip("the link carries packets of a BTH and more, up to 8 KiB here")
		}
		synctest.Test(t, func(t *testing.T) { fuzzResponderOnce(t, in) })
	})
}

// fatalNAK reports whether a responder that sends s must move its QP to
// the error state: NAK-invalid request, remote access and remote
// operational error end the connection (the requester completes with
// REM_INV_REQ_ERR, REM_ACCESS_ERR, REM_OP_ERR: roce-wire.md, NAK codes);
// a PSN sequence error NAK and an RNR NAK do not.
func fatalNAK(s wire.Syndrome) bool {
	return s == wire.SyndromeInvalidReq || s == wire.SyndromeRemoteAccess || s == wire.SyndromeRemoteOp
}

func fuzzResponderOnce(t *testing.T, in []byte) {
	e := newHostileEnv(t, verbs.QPTypeRC, verbs.MTU1024)
	defer e.close()
	target := e.qp.QPN()
	pkt := append(bytes.Clone(in), 0, 0, 0, 0) // room for the ICRC
	op := relocate(e, pkt, target)

	before := bytes.Clone(e.arena)
	psn0 := e.qp.Query().RQPSN
	e.send(t, e.peer, pkt)
	synctest.Wait()

	isWrite := op.Class() == wire.ClassRC && op >= wire.WriteFirst && op <= wire.WriteOnlyImm
	what := fmt.Sprintf("%v packet % x (expected PSN %v before)", op, in, psn0)
	checkAfterFuzz(t, e, before, isWrite, what, func(psn verbs.PSN) bool {
		return psn != psn0 && op.Class() == wire.ClassRC &&
			(op == wire.SendFirst || op == wire.SendMiddle || op == wire.WriteFirst || op == wire.WriteMiddle)
	}, 2048, 0, 2048)
}

// checkAfterFuzz is what FuzzResponder and FuzzResponderSequence check once
// their input was delivered (what names it in failures; before is the
// arena as it was; wrote says a WRITE opcode was sent, so the write-only
// MR may change):
//
//   - no page of the arena changed but the read-write MR's (and the
//     write-only MR's after a WRITE);
//   - the QP is in ERR only together with a fatal NAK, and a fatal NAK
//     always put it there;
//   - otherwise a normal SEND at the expected PSN, into a new receive at
//     recvOff of the read-write MR, gets one ACK and lands at one of
//     placedOffs — unless midMessage(expected PSN) says the input left a
//     message open, when the SEND may instead be refused with
//     NAK-invalid request (the QP then in ERR).
func checkAfterFuzz(t *testing.T, e *hostileEnv, before []byte, wrote bool, what string, midMessage func(verbs.PSN) bool, recvOff int, placedOffs ...int) {
	t.Helper()
	for pg := range arenaPages {
		if bytes.Equal(before[pg*page:(pg+1)*page], e.arena[pg*page:(pg+1)*page]) {
			continue
		}
		if pg == 1 || (pg == 3 && wrote) {
			continue
		}
		t.Fatalf("%s changed page %d of the arena (guards: 0 2 4 6 8; 5 another PD's MR; 7 deregistered; 3 write-only)", what, pg)
	}

	e.mu.Lock()
	got := e.got
	e.got = nil
	e.mu.Unlock()
	fatal := false
	for _, p := range got {
		if p.Opcode() == wire.Acknowledge && fatalNAK(p.AETH.Syndrome()) {
			fatal = true
		}
	}
	switch st := e.qp.State(); {
	case st == verbs.QPStateErr:
		if !fatal {
			t.Fatalf("%s moved the QP to ERR without a fatal NAK (responses %s)", what, describe(got))
		}
		t.Logf("%s: %s→ QP in ERR", what, describe(got))
		return
	case st != verbs.QPStateRTR:
		t.Fatalf("%s moved the QP to %v", what, st)
	case fatal:
		t.Fatalf("%s got a fatal NAK but the QP stayed in %v (responses %s)", what, st, describe(got))
	}

	// A normal SEND at the expected PSN, into a receive of our own.
	psn := e.qp.Query().RQPSN
	if _, err := e.qp.PostRecv(verbs.RecvWR{WRID: 99, SGList: []verbs.SGE{e.rw.SGE(recvOff, 64)}}); err != nil {
		t.Fatalf("post receive after %s: %v", what, err)
	}
	msg := []byte("a normal SEND...")
	h := req(wire.SendOnly, psn)
	h.BTH.DestQP = e.qp.QPN()
	h.BTH.AckReq = true
	e.send(t, e.peer, wire.AppendPacket(nil, &h, msg))
	synctest.Wait()
	e.mu.Lock()
	got = e.got
	e.mu.Unlock()

	if midMessage(psn) && len(got) == 1 && got[0].AETH.Syndrome() == wire.SyndromeInvalidReq && e.qp.State() == verbs.QPStateErr {
		t.Logf("%s: accepted (PSN → %v) mid-message; the SEND after it broke off the message: %s", what, psn, describe(got))
		return // refused, as it must be
	}
	if len(got) != 1 || got[0].Opcode() != wire.Acknowledge || got[0].AETH.Syndrome() != wire.SyndromeACK || got[0].BTH.PSN() != psn {
		t.Fatalf("after %s, a SEND at the expected PSN %v got %s, want one ACK of it", what, psn, describe(got))
	}
	for _, off := range placedOffs {
		if bytes.Equal(e.arena[page+off:page+off+len(msg)], msg) {
			t.Logf("%s: PSN → %v; the SEND after it: %s", what, psn, describe(got))
			return
		}
	}
	t.Fatalf("after %s, a SEND was ACKed but not placed in a receive buffer", what)
}

// relocate patches pkt (see FuzzResponder) and returns its opcode.
func relocate(e *hostileEnv, pkt []byte, target verbs.QPN) wire.Opcode {
	bth := wire.BTH(pkt[:wire.BTHSize])
	op := bth.Opcode()
	if bth.DestQP() == 0 {
		pkt[5], pkt[6], pkt[7] = byte(target>>16), byte(target>>8), byte(target)
	}
	if !op.Valid() || !(op.Has(wire.HasRETH) || op.Has(wire.HasAtomicETH)) {
		return op
	}
	off := wire.BTHSize
	if op.Has(wire.HasDETH) {
		off += 8
	}
	if len(pkt) < off+12 {
		return op
	}
	keys := []verbs.RKey{e.rw.RKey(), e.wo.RKey(), e.other.RKey(), e.dead.RKey()}
	if k := binary.BigEndian.Uint32(pkt[off+8:]); k >= 1 && int(k) <= len(keys) {
		binary.BigEndian.PutUint32(pkt[off+8:], uint32(keys[k-1]))
	}
	if va := binary.BigEndian.Uint64(pkt[off:]); va < arenaPages*page {
		binary.BigEndian.PutUint64(pkt[off:], e.rw.Addr()-page+va)
	}
	return op
}

// describe lists responses for a failure message.
func describe(ps []wire.Packet) string {
	if len(ps) == 0 {
		return "no response"
	}
	s := ""
	for _, p := range ps {
		s += p.Opcode().String() + " PSN " + p.BTH.PSN().String()
		if p.Opcode().Has(wire.HasAETH) {
			s += " " + p.AETH.Syndrome().String()
		}
		s += "; "
	}
	return s
}

// responderSeeds returns a packet of every RC opcode (requests, responses
// and acknowledgements, which a responder must also survive), a few of the
// other classes, and the hostile cases' shapes, all at the victim's
// expected PSN with relocatable keys and addresses.
func responderSeeds() [][]byte {
	var seeds [][]byte
	add := func(h wire.Headers, payload []byte) {
		b := wire.AppendPacket(nil, &h, payload)
		seeds = append(seeds, b[:len(b)-wire.ICRCSize])
	}
	hdr := func(op wire.Opcode, psn verbs.PSN) wire.Headers {
		h := req(op, psn)
		h.BTH.AckReq = true
		return h
	}
	for op := wire.Opcode(0); op <= 0x17; op++ {
		if !op.Valid() {
			continue
		}
		h := hdr(op, victimPSN)
		n := 16
		if op == wire.SendFirst || op == wire.SendMiddle || op == wire.WriteFirst || op == wire.WriteMiddle ||
			op == wire.ReadResponseFirst || op == wire.ReadResponseMiddle {
			n = 1024 // a full path MTU
		}
		h.RETH = wire.RETHFields{VA: page, RKey: 1, DMALen: uint32(n)}
		if op == wire.WriteFirst {
			h.RETH.DMALen = 2048
		}
		if op == wire.ReadRequest {
			h.RETH.DMALen = 64
		}
		h.AtomicETH = wire.AtomicETHFields{VA: page + 8, RKey: 1, SwapAdd: 7, Compare: 0}
		h.ImmDt = wire.ImmDtFields{Imm: 0x01020304}
		h.IETH = wire.IETHFields{RKey: 2}
		h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: 1}
		var payload []byte
		if !op.IsAtomic() && op != wire.ReadRequest && op != wire.Acknowledge && op != wire.AtomicAcknowledge {
			payload = bytes.Repeat([]byte{byte(op)}, n)
		}
		add(h, payload)
	}
	// Other classes: UC and UD SENDs, an RD opcode; keys and PSNs off.
	add(hdr(wire.ClassUC|wire.SendOnly, victimPSN), []byte("uc"))
	u := hdr(wire.UDSendOnly, victimPSN)
	u.DETH = wire.DETHFields{QKey: 0x1111, SrcQP: peerQPN}
	add(u, []byte("ud"))
	add(hdr(wire.ClassRD|wire.SendOnly, victimPSN), []byte("rd"))
	// Hostile shapes: the write-only MR read, another PD's MR, a
	// deregistered MR, a wrapping address, a PSN far ahead and behind,
	// an unaligned atomic.
	for _, k := range []uint32{2, 3, 4} {
		h := hdr(wire.ReadRequest, victimPSN)
		h.RETH = wire.RETHFields{VA: uint64(k*2-1) * page, RKey: wire.RKey(k), DMALen: 64}
		add(h, nil)
		w := hdr(wire.WriteOnly, victimPSN)
		w.RETH = wire.RETHFields{VA: uint64(k*2-1) * page, RKey: wire.RKey(k), DMALen: 8}
		add(w, make([]byte, 8))
	}
	w := hdr(wire.WriteOnly, victimPSN)
	w.RETH = wire.RETHFields{VA: ^uint64(0) - 7, RKey: 1, DMALen: 16}
	add(w, make([]byte, 16))
	w = hdr(wire.WriteOnly, victimPSN+1<<22)
	w.RETH = wire.RETHFields{VA: page, RKey: 1, DMALen: 16}
	add(w, make([]byte, 16))
	w.BTH.PSN = verbs.PSN(victimPSN).Add(-3)
	add(w, make([]byte, 16))
	a := hdr(wire.CompareSwap, victimPSN)
	a.AtomicETH = wire.AtomicETHFields{VA: page + 4, RKey: 1, SwapAdd: 1}
	add(a, nil)
	return seeds
}
