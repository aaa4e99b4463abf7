package verbs

// Table tests of the responder's steps (responder_steps.go): plain values
// in, an action out, no Context.

import (
	"fmt"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs/internal/mem"
)

func (a respAction) String() string {
	names := [...]string{actOK: "ok", actDrop: "drop", actNAKSeq: "nak-seq", actDuplicate: "duplicate",
		actRNR: "rnr", actNAK: "nak", actResync: "resync"}
	s := fmt.Sprintf("kind(%d)", a.kind)
	if int(a.kind) < len(names) {
		s = names[a.kind]
	}
	switch a.kind {
	case actNAK:
		return fmt.Sprintf("%s(%#x, %v)", s, uint8(a.syn), a.drop)
	case actDrop, actRNR, actNAKSeq:
		return fmt.Sprintf("%s(%v)", s, a.drop)
	}
	return s
}

var (
	invalid      = refuse(wire.SyndromeInvalidReq, DropLength)
	invalidSeq   = refuse(wire.SyndromeInvalidReq, DropPSN)
	noRight      = refuse(wire.SyndromeInvalidReq, DropAccess)
	remoteAccess = refuse(wire.SyndromeRemoteAccess, DropAccess)
	nakSeq       = respAction{kind: actNAKSeq, drop: DropPSN}
	resync       = respAction{kind: actResync}
)

func TestCheckPSN(t *testing.T) {
	tests := []struct {
		name      string
		ePSN, psn PSN
		nakSent   bool
		want      respAction
	}{
		{"in order", 100, 100, false, accept},
		{"in order after a NAK", 100, 100, true, accept},
		{"ahead: NAK once", 100, 101, false, nakSeq},
		{"ahead again: drop", 100, 105, true, dropAs(DropPSN)},
		{"behind: duplicate", 100, 99, false, dupPacket},
		{"behind after a NAK", 100, 42, true, dupPacket},
		{"ahead across the wrap", 0xFFFFFF, 0, false, nakSeq},
		{"behind across the wrap", 0, 0xFFFFFF, false, dupPacket},
		{"half the PSN space behind", 0x800000, 0x000001, false, dupPacket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkPSN(tt.ePSN, tt.nakSent, tt.psn); got != tt.want {
				t.Errorf("checkPSN(%v, %v, %v) = %v, want %v", tt.ePSN, tt.nakSent, tt.psn, got, tt.want)
			}
		})
	}
}

func TestCheckUCPSN(t *testing.T) {
	uc := func(op wire.Opcode) wire.Opcode { return wire.ClassUC | op }
	tests := []struct {
		name      string
		ePSN, psn PSN
		cur       respKind
		op        wire.Opcode
		want      respAction
	}{
		{"ONLY in order", 7, 7, respNone, uc(wire.SendOnly), accept},
		{"FIRST in order", 7, 7, respNone, uc(wire.WriteFirst), accept},
		{"MIDDLE continues", 7, 7, respWrite, uc(wire.WriteMiddle), accept},
		{"LAST continues", 7, 7, respSend, uc(wire.SendLast), accept},
		{"MIDDLE after a gap", 7, 9, respSend, uc(wire.SendMiddle), dropAs(DropPSN)},
		{"LAST with no message", 7, 7, respNone, uc(wire.SendLastImm), dropAs(DropPSN)},
		{"FIRST after a gap", 7, 9, respSend, uc(wire.SendFirst), resync},
		{"ONLY inside a message", 7, 7, respWrite, uc(wire.WriteOnlyImm), resync},
		{"FIRST behind", 7, 3, respNone, uc(wire.SendFirst), resync},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkUCPSN(tt.ePSN, tt.cur, tt.psn, tt.op); got != tt.want {
				t.Errorf("checkUCPSN = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckOpSequence(t *testing.T) {
	tests := []struct {
		cur  respKind
		op   wire.Opcode
		want respAction
	}{
		{respNone, wire.SendFirst, accept},
		{respNone, wire.SendOnlyInvalidate, accept},
		{respNone, wire.WriteOnly, accept},
		{respNone, wire.ReadRequest, accept},
		{respNone, wire.FetchAdd, accept},
		{respNone, wire.SendMiddle, invalidSeq},
		{respNone, wire.WriteLast, invalidSeq},
		{respSend, wire.SendMiddle, accept},
		{respSend, wire.SendLastInvalidate, accept},
		{respSend, wire.SendFirst, invalidSeq},
		{respSend, wire.WriteMiddle, invalidSeq},
		{respSend, wire.ReadRequest, invalidSeq},
		{respWrite, wire.WriteLastImm, accept},
		{respWrite, wire.WriteOnly, invalidSeq},
		{respWrite, wire.SendLast, invalidSeq},
		{respWrite, wire.CompareSwap, invalidSeq},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v", tt.cur, tt.op), func(t *testing.T) {
			if got := checkOpSequence(tt.cur, tt.op); got != tt.want {
				t.Errorf("checkOpSequence(%d, %v) = %v, want %v", tt.cur, tt.op, got, tt.want)
			}
		})
	}
}

func TestCheckRCLength(t *testing.T) {
	const pmtu = 1024
	tests := []struct {
		op     wire.Opcode
		n, pad int
		want   respAction
	}{
		{wire.SendFirst, pmtu, 0, accept},
		{wire.SendFirst, pmtu - 1, 0, invalid},
		{wire.WriteMiddle, pmtu + 1, 0, invalid},
		{wire.WriteMiddle, pmtu, 1, invalid},
		{wire.SendLast, 1, 3, accept},
		{wire.SendLast, 0, 0, invalid},
		{wire.WriteLastImm, pmtu, 0, accept},
		{wire.WriteLastImm, pmtu + 1, 0, invalid},
		{wire.SendOnly, 0, 0, accept},
		{wire.WriteOnly, pmtu, 0, accept},
		{wire.SendOnlyImm, pmtu + 1, 0, invalid},
		{wire.ReadRequest, 0, 0, accept}, // no payload: not checked
		{wire.FetchAdd, 0, 0, accept},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%d/pad%d", tt.op, tt.n, tt.pad), func(t *testing.T) {
			if got := checkRCLength(tt.op, tt.n, pmtu, tt.pad); got != tt.want {
				t.Errorf("checkRCLength = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckUCLength(t *testing.T) {
	const pmtu = 256
	uc := func(op wire.Opcode) wire.Opcode { return wire.ClassUC | op }
	tests := []struct {
		op   wire.Opcode
		n    int
		want respAction
	}{
		{uc(wire.SendFirst), pmtu, accept},
		{uc(wire.SendFirst), pmtu - 1, dropAs(DropLength)},
		{uc(wire.WriteMiddle), pmtu + 1, dropAs(DropLength)},
		{uc(wire.SendLast), 0, accept}, // UC does not refuse an empty LAST
		{uc(wire.WriteLast), pmtu + 1, dropAs(DropLength)},
		{uc(wire.SendOnly), 0, accept},
		{uc(wire.WriteOnlyImm), pmtu, accept},
		{uc(wire.SendOnlyImm), pmtu + 1, dropAs(DropLength)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%d", tt.op, tt.n), func(t *testing.T) {
			if got := checkUCLength(tt.op, tt.n, pmtu); got != tt.want {
				t.Errorf("checkUCLength = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckRights(t *testing.T) {
	all := AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	tests := []struct {
		name      string
		op        wire.Opcode
		access    AccessFlags
		resources int
		want      respAction
	}{
		{"SEND needs nothing", wire.SendOnly, 0, 0, accept},
		{"WRITE with the right", wire.WriteFirst, AccessRemoteWrite, 0, accept},
		{"WRITE without it", wire.WriteOnly, AccessRemoteRead | AccessRemoteAtomic, 4, noRight},
		{"WRITE MIDDLE without it", wire.WriteMiddle, 0, 4, noRight},
		{"READ with the right", wire.ReadRequest, AccessRemoteRead, 1, accept},
		{"READ without it", wire.ReadRequest, AccessRemoteWrite | AccessRemoteAtomic, 1, noRight},
		{"READ without resources", wire.ReadRequest, all, 0, noRight},
		{"atomic with the right", wire.CompareSwap, AccessRemoteAtomic, 2, accept},
		{"atomic without it", wire.FetchAdd, AccessRemoteRead, 2, noRight},
		{"atomic without resources", wire.FetchAdd, all, 0, noRight},
		{"a response is no request", wire.Acknowledge, all, 4, refuse(wire.SyndromeInvalidReq, DropOpcode)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkRights(tt.op, tt.access, tt.resources); got != tt.want {
				t.Errorf("checkRights = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckRETH(t *testing.T) {
	const pmtu = 4096
	tests := []struct {
		name  string
		op    wire.Opcode
		dl, n uint64
		want  respAction
	}{
		{"WRITE ONLY carries it all", wire.WriteOnly, 100, 100, accept},
		{"WRITE ONLY short", wire.WriteOnly, 100, 99, invalid},
		{"WRITE ONLY empty", wire.WriteOnlyImm, 0, 0, accept},
		{"WRITE FIRST of a long message", wire.WriteFirst, pmtu + 1, pmtu, accept},
		{"WRITE FIRST of one PMTU", wire.WriteFirst, pmtu, pmtu, invalid},
		{"WRITE above the limit", wire.WriteFirst, MaxMessageSize + 1, pmtu, invalid},
		{"WRITE at the limit", wire.WriteFirst, MaxMessageSize, pmtu, accept},
		{"READ of any length", wire.ReadRequest, 1 << 20, 0, accept},
		{"READ of nothing", wire.ReadRequest, 0, 0, accept},
		{"READ above the limit", wire.ReadRequest, MaxMessageSize + 1, 0, invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkRETH(tt.op, tt.dl, tt.n, pmtu); got != tt.want {
				t.Errorf("checkRETH = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckWriteExtent(t *testing.T) {
	tests := []struct {
		name           string
		op             wire.Opcode
		off, length, n uint64
		want           respAction
	}{
		{"MIDDLE inside", wire.WriteMiddle, 1024, 4096, 1024, accept},
		{"MIDDLE past the end", wire.WriteMiddle, 3072, 4096, 2048, invalid},
		{"LAST ends it", wire.WriteLast, 3072, 4096, 1024, accept},
		{"LAST short of the end", wire.WriteLastImm, 2048, 4096, 1024, invalid},
		{"ONLY of all of it", wire.WriteOnly, 0, 512, 512, accept},
		{"ONLY empty", wire.WriteOnly, 0, 0, 0, accept},
		{"ONLY past the end", wire.WriteOnly, 0, 511, 512, invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkWriteExtent(tt.op, tt.off, tt.length, tt.n); got != tt.want {
				t.Errorf("checkWriteExtent = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckAtomicVAAndMR(t *testing.T) {
	for va, want := range map[uint64]respAction{0: accept, 8: accept, 0x7f0000001000: accept,
		1: noRight, 4: noRight, 0x7f0000001007: noRight} {
		if got := checkAtomicVA(va); got != want {
			t.Errorf("checkAtomicVA(%#x) = %v, want %v", va, got, want)
		}
	}
	for st, want := range map[mem.Status]respAction{mem.OK: accept, mem.BadKey: remoteAccess,
		mem.BadPD: remoteAccess, mem.NoAccess: remoteAccess, mem.OutOfRange: remoteAccess} {
		if got := checkMR(st); got != want {
			t.Errorf("checkMR(%d) = %v, want %v", st, got, want)
		}
	}
}

func TestAnswerDuplicate(t *testing.T) {
	const pmtu = 1024
	// A READ of 3000 bytes at PSN 10..12, an atomic at PSN 20, a slot
	// never used, and a READ at PSN 30 that was cleared.
	saved := []rdResource{
		{valid: true, first: 10, last: 12, va: 0x1000, length: 3000, rkey: 0x55},
		{valid: true, atomic: true, first: 20, last: 20, orig: 7},
		{},
		{valid: false, first: 30, last: 30, va: 0x9000, length: 8, rkey: 0x66},
	}
	read := func(psn PSN, va uint64, rkey RKey, dl uint32) dupRequest {
		return dupRequest{psn: psn, op: wire.ReadRequest, va: va, rkey: rkey, dl: dl}
	}
	tests := []struct {
		name string
		q    dupRequest
		want dupAnswer
	}{
		{"whole READ again", read(10, 0x1000, 0x55, 3000), dupAnswer{kind: dupRead, res: 0, end: 3000}},
		{"READ from its second packet", read(11, 0x1400, 0x55, 1976), dupAnswer{kind: dupRead, res: 0, end: 3000}},
		{"READ of less than the original", read(10, 0x1000, 0x55, 100), dupAnswer{kind: dupRead, res: 0, end: 100}},
		{"READ from its last packet, empty", read(12, 0x1800, 0x55, 0), dupAnswer{kind: dupRead, res: 0, end: 2048}},
		{"READ beyond the range", read(11, 0x1400, 0x55, 1977), dupAnswer{kind: dupDrop}},
		{"READ with another rkey", read(10, 0x1000, 0x56, 3000), dupAnswer{kind: dupDrop}},
		{"READ at another address", read(11, 0x1000, 0x55, 100), dupAnswer{kind: dupDrop}},
		{"READ older than all saved", read(5, 0x1000, 0x55, 3000), dupAnswer{kind: dupDrop}},
		{"READ of a cleared slot", read(30, 0x9000, 0x66, 8), dupAnswer{kind: dupDrop}},
		{"READ at the atomic's PSN", read(20, 0, 0, 8), dupAnswer{kind: dupDrop}},
		{"atomic again", dupRequest{psn: 20, op: wire.FetchAdd}, dupAnswer{kind: dupAtomic, res: 1}},
		{"atomic of no saved one", dupRequest{psn: 21, op: wire.CompareSwap}, dupAnswer{kind: dupDrop}},
		{"atomic at a READ's PSN", dupRequest{psn: 10, op: wire.CompareSwap}, dupAnswer{kind: dupDrop}},
		{"SEND", dupRequest{psn: 9, op: wire.SendOnly}, dupAnswer{kind: dupAck}},
		{"WRITE MIDDLE", dupRequest{psn: 11, op: wire.WriteMiddle}, dupAnswer{kind: dupAck}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := answerDuplicate(saved, pmtu, tt.q); got != tt.want {
				t.Errorf("answerDuplicate(%+v) = %+v, want %+v", tt.q, got, tt.want)
			}
		})
	}
}
