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

// seqRecvLen is the first receive the sequence victim posts: room for a
// SEND of three 1024-byte packets, so multi-packet messages can complete.
const seqRecvLen = 3072

// maxSeqPackets bounds the packets of one FuzzResponderSequence input.
const maxSeqPackets = 6

// FuzzResponderSequence is FuzzResponder for short sequences of packets:
// the input is up to six packets, each a big-endian uint16 length and that
// many bytes (BTH onward, no ICRC), delivered in order to the same victim
// (with a 3072-byte first receive instead of 64 bytes, so SEND FIRST,
// MIDDLE and LAST can be accepted and complete). This reaches what one
// packet cannot: messages that span packets, a wrong opcode in the middle
// of one, duplicates of requests just executed, PSN gaps and what follows
// them, READ replays. The checks are FuzzResponder's, after the whole
// sequence: the guard pages, another PD's MR and the deregistered MR never
// change; ERR only together with a fatal NAK; otherwise a normal SEND at
// the expected PSN is ACKed and placed — unless the last packet that moved
// the expected PSN was the first or middle packet of a message, when the
// SEND must be refused with NAK-invalid request.
func FuzzResponderSequence(f *testing.F) { fuzzSequence(f, false) }

// FuzzResponderSequenceSR is FuzzResponderSequence against a victim with
// selective retransmission (a tbrdma peer that agreed to it): packets past
// a gap are held and executed once the gap is filled. The checks are the
// same, taken after the held packets are dropped (SetSelectiveRetransmit
// false); the packet that last moved the expected PSN is the one whose PSN
// is just before it, which may have been held.
func FuzzResponderSequenceSR(f *testing.F) { fuzzSequence(f, true) }

func fuzzSequence(f *testing.F, sr bool) {
	for _, s := range sequenceSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		pkts := splitSequence(in)
		if len(pkts) == 0 {
			t.Skip("no packet of a BTH or more in the input")
		}
		synctest.Test(t, func(t *testing.T) { fuzzSequenceOnce(t, pkts, sr) })
	})
}

// splitSequence cuts in into length-prefixed packets. A length that runs
// past the end takes the rest (so that mutations of a length still give a
// sequence); packets shorter than a BTH or longer than 8 KiB are skipped.
func splitSequence(in []byte) [][]byte {
	var out [][]byte
	for len(in) >= 2 && len(out) < maxSeqPackets {
		n := int(binary.BigEndian.Uint16(in))
		in = in[2:]
		n = min(n, len(in))
		if n >= wire.BTHSize && n <= 8192 {
			out = append(out, in[:n])
		}
		in = in[n:]
	}
	return out
}

// joinSequence is splitSequence's inverse, for seeds.
func joinSequence(pkts ...[]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
		b = append(b, p...)
	}
	return b
}

func fuzzSequenceOnce(t *testing.T, pkts [][]byte, sr bool) {
	e := newHostileEnvRecv(t, verbs.QPTypeRC, verbs.MTU1024, seqRecvLen)
	defer e.close()
	if sr {
		mustOK(t, e.qp.SetSelectiveRetransmit(true))
	}
	type sent struct {
		psn verbs.PSN
		op  wire.Opcode
	}
	var seen []sent
	target := e.qp.QPN()
	before := bytes.Clone(e.arena)

	var wrote bool            // a WRITE opcode was sent: the write-only MR may change
	var lastMoved wire.Opcode // the opcode of the last packet that moved the expected PSN
	var moved bool
	var ops []wire.Opcode
	for _, in := range pkts {
		if e.qp.State() == verbs.QPStateErr {
			break
		}
		pkt := append(bytes.Clone(in), 0, 0, 0, 0) // room for the ICRC
		op := relocate(e, pkt, target)
		ops = append(ops, op)
		if op.Class() == wire.ClassRC && op >= wire.WriteFirst && op <= wire.WriteOnlyImm {
			wrote = true
		}
		psn := e.qp.Query().RQPSN
		seen = append(seen, sent{wire.BTH(pkt[:wire.BTHSize]).PSN(), op})
		e.send(t, e.peer, pkt)
		synctest.Wait()
		if now := e.qp.Query().RQPSN; now != psn {
			lastMoved, moved = op, true
			if sr && seen[len(seen)-1].psn != now.Add(-1) {
				// held packets were executed after this one
				for _, s := range seen {
					if s.psn == now.Add(-1) {
						lastMoved = s.op
						break
					}
				}
			}
		}
	}
	if sr {
		mustOK(t, e.qp.SetSelectiveRetransmit(false))
		synctest.Wait()
	}

	what := fmt.Sprintf("sequence %v (last PSN mover %v)", ops, lastMoved)
	checkAfterFuzz(t, e, before, wrote, what, func(verbs.PSN) bool {
		return moved && lastMoved.Class() == wire.ClassRC &&
			(lastMoved == wire.SendFirst || lastMoved == wire.SendMiddle || lastMoved == wire.WriteFirst || lastMoved == wire.WriteMiddle)
	}, 3072, 0, 3072)
}

// sequenceSeeds are multi-packet exchanges at the victim's expected PSN:
// complete SEND and WRITE messages, a message broken by a wrong opcode,
// duplicates of a READ and an atomic, a PSN gap and its repair, an
// overrunning WRITE.
func sequenceSeeds() [][]byte {
	pkt := func(op wire.Opcode, psn verbs.PSN, n int, f func(*wire.Headers)) []byte {
		h := req(op, psn)
		h.BTH.AckReq = true
		if f != nil {
			f(&h)
		}
		var payload []byte
		if n > 0 {
			payload = bytes.Repeat([]byte{byte(op) + 1}, n)
		}
		b := wire.AppendPacket(nil, &h, payload)
		return b[:len(b)-wire.ICRCSize]
	}
	reth := func(va uint64, key wire.RKey, n uint32) func(*wire.Headers) {
		return func(h *wire.Headers) { h.RETH = wire.RETHFields{VA: va, RKey: key, DMALen: n} }
	}
	atomic := func(va uint64) func(*wire.Headers) {
		return func(h *wire.Headers) { h.AtomicETH = wire.AtomicETHFields{VA: va, RKey: 1, SwapAdd: 5} }
	}
	p := verbs.PSN(victimPSN)
	return [][]byte{
		joinSequence(pkt(wire.SendFirst, p, 1024, nil), pkt(wire.SendMiddle, p+1, 1024, nil), pkt(wire.SendLast, p+2, 16, nil)),
		joinSequence(pkt(wire.WriteFirst, p, 1024, reth(page, 1, 2064)), pkt(wire.WriteMiddle, p+1, 1024, nil), pkt(wire.WriteLast, p+2, 16, nil)),
		joinSequence(pkt(wire.WriteFirst, p, 1024, reth(page, 1, 2048)), pkt(wire.SendMiddle, p+1, 1024, nil)),
		joinSequence(pkt(wire.WriteFirst, p, 1024, reth(page, 1, 2048)), pkt(wire.WriteLast, p+1, 1040, nil)),
		joinSequence(pkt(wire.WriteFirst, p, 1024, reth(3*page, 2, 2048)), pkt(wire.WriteLast, p+1, 1024, nil)),
		joinSequence(pkt(wire.ReadRequest, p, 0, reth(page, 1, 3000)), pkt(wire.ReadRequest, p, 0, reth(page, 1, 3000)), pkt(wire.ReadRequest, p+1, 0, reth(page+1024, 1, 100))),
		joinSequence(pkt(wire.FetchAdd, p, 0, atomic(page+8)), pkt(wire.FetchAdd, p, 0, atomic(page+8)), pkt(wire.CompareSwap, p+1, 0, atomic(page+8))),
		joinSequence(pkt(wire.SendFirst, p, 1024, nil), pkt(wire.SendMiddle, p+5, 1024, nil), pkt(wire.SendMiddle, p+1, 1024, nil), pkt(wire.SendLast, p+2, 100, nil)),
		joinSequence(pkt(wire.SendFirst, p, 1024, nil), pkt(wire.SendFirst, p+1, 1024, nil)),
		joinSequence(pkt(wire.SendOnly, p, 16, nil), pkt(wire.SendOnly, p+1, 16, nil), pkt(wire.SendOnly, p, 16, nil)),
		// out of order: held past the gap by a responder with selective retransmission
		joinSequence(pkt(wire.SendLast, p+2, 100, nil), pkt(wire.SendMiddle, p+1, 1024, nil), pkt(wire.SendFirst, p, 1024, nil)),
		joinSequence(pkt(wire.WriteLast, p+2, 16, nil), pkt(wire.WriteFirst, p, 1024, reth(page, 1, 2064)), pkt(wire.WriteMiddle, p+1, 1024, nil)),
		joinSequence(pkt(wire.FetchAdd, p+1, 0, atomic(page+8)), pkt(wire.ReadRequest, p+2, 0, reth(page, 1, 3000)), pkt(wire.SendOnly, p, 16, nil)),
		joinSequence(pkt(wire.SendOnly, p+3, 16, nil), pkt(wire.SendOnly, p+3, 16, nil), pkt(wire.SendOnly, p+2000, 16, nil), pkt(wire.SendOnly, p+1, 16, nil), pkt(wire.SendOnly, p, 16, nil)),
	}
}
