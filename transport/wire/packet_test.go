package wire_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

var (
	src4 = netip.MustParseAddrPort("198.18.0.2:49152")
	dst4 = netip.MustParseAddrPort("198.18.0.3:4791")
	src6 = netip.MustParseAddrPort("[fd00::2]:55410")
	dst6 = netip.MustParseAddrPort("[fd00::3]:4791")
)

// allHeaders has a distinctive non-zero value in every field of every
// header, with 24-bit fields at or near their maxima.
func allHeaders(op wire.Opcode) wire.Headers {
	return wire.Headers{
		BTH: wire.BTHFields{Opcode: op, SE: true, MigReq: false, PKey: wire.PKeyDefault,
			DestQP: 0xFFFFFE, AckReq: true, PSN: 0xFFFFFF},
		DETH:         wire.DETHFields{QKey: wire.QKeyGSI, SrcQP: 0xABCDEF},
		RETH:         wire.RETHFields{VA: 0x0123456789ABCDEF, RKey: 0xFEDCBA98, DMALen: 0x10000},
		AtomicETH:    wire.AtomicETHFields{VA: 0x00007F0000001000, RKey: 0x1234, SwapAdd: ^uint64(0) - 1, Compare: 1 << 63},
		AETH:         wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: 0xFFFFFF},
		AtomicAckETH: wire.AtomicAckETHFields{Orig: 0x8000000000000001},
		ImmDt:        wire.ImmDtFields{Imm: 0xDEADBEEF},
		IETH:         wire.IETHFields{RKey: 0xCAFEF00D},
	}
}

// carried returns h with the headers op does not carry zeroed, which is
// what Packet.Fields returns.
func carried(h wire.Headers) wire.Headers {
	op := h.BTH.Opcode
	var w wire.Headers
	w.BTH = h.BTH
	if op.Has(wire.HasDETH) {
		w.DETH = h.DETH
	}
	if op.Has(wire.HasRETH) {
		w.RETH = h.RETH
	}
	if op.Has(wire.HasAtomicETH) {
		w.AtomicETH = h.AtomicETH
	}
	if op.Has(wire.HasAETH) {
		w.AETH = h.AETH
	}
	if op.Has(wire.HasAtomicAckETH) {
		w.AtomicAckETH = h.AtomicAckETH
	}
	if op.Has(wire.HasImmDt) {
		w.ImmDt = h.ImmDt
	}
	if op.Has(wire.HasIETH) {
		w.IETH = h.IETH
	}
	return w
}

func payloadOf(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

func TestParseEveryOpcode(t *testing.T) {
	for _, r := range refTable() {
		sizes := []int{0}
		if r.payload {
			sizes = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 255, 256, 1024, 4093, 4096}
		}
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/%d", r.name, n), func(t *testing.T) {
				h := allHeaders(r.op)
				if got := h.Len(); got != len(h.Append(nil)) || got != r.op.HdrLen() {
					t.Errorf("Headers.Len() = %d, len(Append(nil)) = %d, HdrLen %d", got, len(h.Append(nil)), r.op.HdrLen())
				}
				payload := payloadOf(n)
				pkt := wire.AppendPacket([]byte("head"), &h, payload)[4:]
				if h.BTH.PadCnt != uint8(wire.PadCount(n)) {
					t.Errorf("AppendPacket set PadCnt %d, want %d", h.BTH.PadCnt, wire.PadCount(n))
				}
				if want := r.op.HdrLen() + n + wire.PadCount(n) + wire.ICRCSize; len(pkt) != want {
					t.Fatalf("packet length %d, want %d", len(pkt), want)
				}
				wire.PutICRC(pkt, src4, dst4, 0x1234)

				var p wire.Packet
				if err := p.Parse(pkt); err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if p.Opcode() != r.op {
					t.Errorf("Opcode %v", p.Opcode())
				}
				if got, want := p.Fields(), carried(h); got != want {
					t.Errorf("Fields:\n got %+v\nwant %+v", got, want)
				}
				if !bytes.Equal(p.Payload, payload) || cap(p.Payload) != len(p.Payload) {
					t.Errorf("payload %d bytes (cap %d), want %d bytes", len(p.Payload), cap(p.Payload), n)
				}
				if len(p.Pad) != wire.PadCount(n) || !bytes.Equal(p.Pad, make([]byte, len(p.Pad))) {
					t.Errorf("pad %x", p.Pad)
				}
				if !bytes.Equal(p.ICRC, pkt[len(pkt)-4:]) {
					t.Errorf("ICRC %x", p.ICRC)
				}
				if b := p.Bytes(); !bytes.Equal(b, pkt) || cap(b) != len(pkt) {
					t.Errorf("Bytes() %d bytes (cap %d), want the %d-byte packet", len(b), cap(b), len(pkt))
				}
				views := []struct {
					name string
					v    []byte
					flag wire.HdrMask
					size int
				}{
					{"DETH", p.DETH, wire.HasDETH, wire.DETHSize},
					{"RETH", p.RETH, wire.HasRETH, wire.RETHSize},
					{"AtomicETH", p.AtomicETH, wire.HasAtomicETH, wire.AtomicETHSize},
					{"AETH", p.AETH, wire.HasAETH, wire.AETHSize},
					{"AtomicAckETH", p.AtomicAckETH, wire.HasAtomicAckETH, wire.AtomicAckETHSize},
					{"ImmDt", p.ImmDt, wire.HasImmDt, wire.ImmDtSize},
					{"IETH", p.IETH, wire.HasIETH, wire.IETHSize},
				}
				for _, v := range views {
					if r.op.Has(v.flag) != (v.v != nil) || (v.v != nil && len(v.v) != v.size) {
						t.Errorf("%s view %x", v.name, v.v)
					}
				}
				if len(p.BTH) != wire.BTHSize {
					t.Errorf("BTH view %x", p.BTH)
				}

				// Re-encoding the parsed fields gives the same bytes.
				f := p.Fields()
				again := wire.AppendPacket(nil, &f, p.Payload)
				wire.PutICRC(again, src4, dst4, 0x1234)
				if !bytes.Equal(again, pkt) {
					t.Errorf("re-encoded packet differs:\n%x\n%x", again, pkt)
				}

				// The receiver recovers the IPv4 ID; IPv6 is exact.
				if id, ok := wire.VerifyICRC(pkt, src4, dst4); !ok || id != 0x1234 {
					t.Errorf("VerifyICRC IPv4 = %#x %v", id, ok)
				}
				wire.PutICRC(pkt, src6, dst6, 0)
				if _, ok := wire.VerifyICRC(pkt, src6, dst6); !ok {
					t.Error("VerifyICRC IPv6 failed")
				}
				pkt[len(pkt)-5] ^= 1
				if _, ok := wire.VerifyICRC(pkt, src6, dst6); ok {
					t.Error("VerifyICRC IPv6 passed a corrupted packet")
				}
				pkt[len(pkt)-5] ^= 1

				// Every shorter prefix fails or parses consistently, and
				// never panics.
				for i := range len(pkt) {
					var q wire.Packet
					err := q.Parse(pkt[:i])
					switch {
					case i < r.op.HdrLen()+wire.ICRCSize:
						checkShort(t, fmt.Sprintf("prefix %d", i), err)
					case err == nil:
						if len(q.Payload)+len(q.Pad)+r.op.HdrLen()+wire.ICRCSize != i {
							t.Errorf("prefix %d: lengths do not add up", i)
						}
					case wire.ReasonOf(err) != wire.ReasonPad:
						t.Errorf("prefix %d: %v", i, err)
					}
				}
			})
		}
	}
}

// parseErr builds a packet from h and payload, lets mutate change it, and
// returns Parse's error.
func parseErr(h wire.Headers, payload []byte, mutate func([]byte) []byte) error {
	pkt := wire.AppendPacket(nil, &h, payload)
	if mutate != nil {
		pkt = mutate(pkt)
	}
	p := wire.Packet{Payload: []byte("stale")}
	err := p.Parse(pkt)
	if err != nil && !reflect.ValueOf(p).IsZero() {
		return fmt.Errorf("Parse returned %v and a non-zero Packet %+v", err, p)
	}
	return err
}

// cutPad removes the n pad bytes in front of the ICRC trailer of b.
func cutPad(b []byte, n int) []byte {
	end := len(b) - wire.ICRCSize
	return append(b[:end-n:end-n], b[end:]...)
}

func TestParseErrors(t *testing.T) {
	ack := allHeaders(wire.Acknowledge)
	send := allHeaders(wire.SendOnly)
	setPad := func(n byte) func([]byte) []byte {
		return func(b []byte) []byte { b[1] = b[1]&^0x30 | n<<4; return b }
	}
	grow := func(n int) func([]byte) []byte {
		return func(b []byte) []byte { return append(b, make([]byte, n)...) }
	}
	for _, c := range []struct {
		name   string
		h      wire.Headers
		pl     []byte
		mutate func([]byte) []byte
		want   wire.Reason
	}{
		{"empty", send, nil, func([]byte) []byte { return nil }, wire.ReasonShort},
		{"bth only", send, nil, func(b []byte) []byte { return b[:wire.BTHSize] }, wire.ReasonShort},
		{"bth+3", send, nil, func(b []byte) []byte { return b[:wire.BTHSize+3] }, wire.ReasonShort},
		{"ack without aeth", ack, nil, func(b []byte) []byte { return append(b[:wire.BTHSize], 0, 0, 0, 0) }, wire.ReasonShort},
		{"ack aeth cut", ack, nil, func(b []byte) []byte { return b[:len(b)-1] }, wire.ReasonShort},
		{"rdma write only without reth", allHeaders(wire.WriteOnly), nil, func(b []byte) []byte { return b[:wire.BTHSize+8+4] }, wire.ReasonShort},
		{"atomic cut", allHeaders(wire.CompareSwap), nil, func(b []byte) []byte { return b[:len(b)-5] }, wire.ReasonShort},
		{"tver 1", send, nil, func(b []byte) []byte { b[1] |= 1; return b }, wire.ReasonTVer},
		{"tver 15", ack, nil, func(b []byte) []byte { b[1] |= 0xF; return b }, wire.ReasonTVer},
		{"payload on ack", ack, nil, grow(4), wire.ReasonPayload},
		{"one byte on ack", ack, nil, grow(1), wire.ReasonPayload},
		{"payload on read request", allHeaders(wire.ReadRequest), nil, grow(8), wire.ReasonPayload},
		{"payload on atomic", allHeaders(wire.FetchAdd), nil, grow(4), wire.ReasonPayload},
		{"payload on atomic ack", allHeaders(wire.AtomicAcknowledge), nil, grow(4), wire.ReasonPayload},
		{"pad on ack", ack, nil, setPad(1), wire.ReasonPad},
		{"pad on read request", allHeaders(wire.ReadRequest), nil, setPad(3), wire.ReasonPad},
		{"pad > payload 0", send, nil, setPad(1), wire.ReasonPad},
		{"pad > payload 2", send, payloadOf(2), func(b []byte) []byte { return setPad(3)(cutPad(b, 2)) }, wire.ReasonPad},
		{"pad > payload ud", allHeaders(wire.UDSendOnly), payloadOf(1), func(b []byte) []byte { return setPad(2)(cutPad(b, 3)) }, wire.ReasonPad},
		{"qpn 0", send, payloadOf(4), func(b []byte) []byte { b[5], b[6], b[7] = 0, 0, 0; return b }, wire.ReasonQPN},
		{"qpn 0 ack", ack, nil, func(b []byte) []byte { b[5], b[6], b[7] = 0, 0, 0; return b }, wire.ReasonQPN},
		{"opcode 0x15", send, nil, func(b []byte) []byte { b[0] = 0x15; return b }, wire.ReasonOpcode},
		{"cnp", send, nil, func(b []byte) []byte { b[0] = 0x81; return b }, wire.ReasonOpcode},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := parseErr(c.h, c.pl, c.mutate)
			if got := wire.ReasonOf(err); got != c.want {
				t.Errorf("error %v (reason %v), want reason %v", err, got, c.want)
			}
			if c.want == wire.ReasonShort {
				checkShort(t, c.name, err)
			}
		})
	}
}

func TestParsePad(t *testing.T) {
	send := allHeaders(wire.SendOnly)
	for n := range 9 {
		pkt := wire.AppendPacket(nil, &send, payloadOf(n))
		var p wire.Packet
		if err := p.Parse(pkt); err != nil {
			t.Fatalf("%d: %v", n, err)
		}
		if len(p.Payload) != n || len(p.Pad) != (4-n%4)%4 || p.BTH.PadCnt() != len(p.Pad) {
			t.Errorf("payload %d: parsed payload %d pad %d PadCnt %d", n, len(p.Payload), len(p.Pad), p.BTH.PadCnt())
		}
		if (n+len(p.Pad))%4 != 0 {
			t.Errorf("payload %d + pad %d is not a multiple of 4", n, len(p.Pad))
		}
	}
	// A pad count equal to what follows the headers leaves an empty
	// payload; Parse accepts that (the pad rule is the responder's business).
	pkt := wire.AppendPacket(nil, &send, payloadOf(3)) // PadCnt 1, 4 bytes after headers
	pkt[1] = pkt[1]&^0x30 | 3<<4                       // claim 3 pad bytes: 1 payload byte remains
	var p wire.Packet
	if err := p.Parse(pkt); err != nil || len(p.Payload) != 1 || len(p.Pad) != 3 {
		t.Errorf("PadCnt 3 over 4 bytes: payload %d pad %d err %v", len(p.Payload), len(p.Pad), err)
	}
	// Non-zero pad bytes are not checked (rxe does not check them either).
	pkt[len(pkt)-5] = 0xAA
	if err := p.Parse(pkt); err != nil {
		t.Errorf("non-zero pad byte rejected: %v", err)
	}
	// Appending to the payload must not overwrite the pad.
	padAt := len(pkt) - wire.ICRCSize - len(p.Pad)
	before := pkt[padAt]
	_ = append(p.Payload, 0x55)
	if pkt[padAt] != before {
		t.Error("append to Payload overwrote the pad")
	}
}

// Parse resets the Packet: no view survives from an earlier packet.
func TestParseResets(t *testing.T) {
	ud := allHeaders(wire.UDSendOnlyImm)
	ack := allHeaders(wire.AtomicAcknowledge)
	var p wire.Packet
	if err := p.Parse(wire.AppendPacket(nil, &ud, payloadOf(256))); err != nil {
		t.Fatal(err)
	}
	if err := p.Parse(wire.AppendPacket(nil, &ack, nil)); err != nil {
		t.Fatal(err)
	}
	if p.DETH != nil || p.ImmDt != nil || len(p.Payload) != 0 || p.AETH == nil || p.AtomicAckETH == nil {
		t.Errorf("stale views after a second Parse: %+v", p)
	}
	if err := p.Parse([]byte{1, 2, 3}); err == nil || p.BTH != nil || p.AETH != nil {
		t.Errorf("views survive a failed Parse: %+v", p)
	}
}

// Headers.Append writes only what the opcode carries, in wire order, and
// leaves PadCnt alone.
func TestHeadersAppendOrder(t *testing.T) {
	h := allHeaders(wire.WriteOnlyImm)
	h.BTH.PadCnt = 2
	got := h.Append(nil)
	want := h.BTH.Append(nil)
	want = h.RETH.Append(want)
	want = h.ImmDt.Append(want)
	if !bytes.Equal(got, want) {
		t.Errorf("WRITE_ONLY_WITH_IMMEDIATE headers\n got %x\nwant %x", got, want)
	}
	if wire.BTH(got).PadCnt() != 2 {
		t.Error("Headers.Append changed PadCnt")
	}
	h = allHeaders(wire.UDSendOnlyImm)
	want = h.DETH.Append(h.BTH.Append(nil))
	want = h.ImmDt.Append(want)
	if got := h.Append(nil); !bytes.Equal(got, want) {
		t.Errorf("UD SEND_ONLY_WITH_IMMEDIATE headers\n got %x\nwant %x", got, want)
	}
	h = allHeaders(wire.AtomicAcknowledge)
	want = h.AtomicAckETH.Append(h.AETH.Append(h.BTH.Append(nil)))
	if got := h.Append(nil); !bytes.Equal(got, want) {
		t.Errorf("ATOMIC_ACKNOWLEDGE headers\n got %x\nwant %x", got, want)
	}
}

// The packet of worked example A parses to the documented fields.
func TestParseExampleA(t *testing.T) {
	ipPkt := mustHex(t, `45 00 00 30 12 34 40 00 40 11 a5 1a c0 a8 01 0a
		c0 a8 01 14 c0 01 12 b7 00 1c 00 00 04 10 ff ff
		00 00 00 11 80 00 00 01 61 62 63 00 13 7b 1e b0`)
	roce := ipPkt[28:]
	var p wire.Packet
	if err := p.Parse(roce); err != nil {
		t.Fatal(err)
	}
	want := wire.Headers{BTH: wire.BTHFields{Opcode: wire.SendOnly, PadCnt: 1, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 1}}
	if got := p.Fields(); got != want || string(p.Payload) != "abc" || wire.Trailer(roce) != 0xB01E7B13 {
		t.Errorf("got %+v payload %q trailer %#x", got, p.Payload, wire.Trailer(roce))
	}
	src := netip.MustParseAddrPort("192.168.1.10:49153")
	dst := netip.MustParseAddrPort("192.168.1.20:4791")
	if id, ok := wire.VerifyICRC(roce, src, dst); !ok || id != 0x1234 {
		t.Errorf("VerifyICRC = %#x %v", id, ok)
	}
	h := want
	rebuilt := wire.AppendPacket(nil, &h, []byte("abc"))
	wire.PutICRC(rebuilt, src, dst, 0x1234)
	if !bytes.Equal(rebuilt, roce) {
		t.Errorf("rebuilt %x\n   want %x", rebuilt, roce)
	}
	if got := wire.AppendICRC(nil, 0xB01E7B13); !bytes.Equal(got, []byte{0x13, 0x7b, 0x1e, 0xb0}) {
		t.Errorf("AppendICRC = %x", got)
	}
}
