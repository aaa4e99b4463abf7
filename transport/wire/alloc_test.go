package wire_test

import (
	"fmt"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Allocation budget (STYLE §2 item 13): parsing, encoding into a buffer with
// room, the ICRC and PSN arithmetic never allocate.
func TestNoAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation may allocate")
	}
	ud := allHeaders(wire.UDSendOnlyImm)
	udPkt := wire.AppendPacket(nil, &ud, payloadOf(256))
	wire.PutICRC(udPkt, src4, dst4, 0xBEEF)
	write := allHeaders(wire.WriteOnlyImm)
	writePkt := wire.AppendPacket(nil, &write, payloadOf(4096))
	wire.PutICRC(writePkt, src6, dst6, 0)
	ack := allHeaders(wire.AtomicAcknowledge)
	ackPkt := wire.AppendPacket(nil, &ack, nil)
	wire.PutICRC(ackPkt, src4, dst4, 0)
	badPkt := append([]byte(nil), ackPkt...)
	badPkt[1] |= 1 // tver 1
	mad := append(wire.MADFields{BaseVersion: 1, MgmtClass: 7}.Append(nil), make([]byte, wire.MADDataSize)...)
	ip := mustHex(t, "45 00 00 30 12 34 40 00 40 11 a5 1a c0 a8 01 0a c0 a8 01 14")
	udp := mustHex(t, "c0 01 12 b7 00 1c 00 00")

	buf := make([]byte, 0, 8192)
	payload := payloadOf(4096)
	var p wire.Packet
	var sink int
	var sinkErr error
	wrapped := fmt.Errorf("qp 0x11: %w", p.Parse(badPkt))

	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Parse UD", func() { sinkErr = p.Parse(udPkt) }},
		{"Parse WRITE_ONLY_IMM", func() { sinkErr = p.Parse(writePkt) }},
		{"Parse ATOMIC_ACK", func() { sinkErr = p.Parse(ackPkt) }},
		{"Parse error", func() { sinkErr = p.Parse(badPkt) }},
		{"Parse short", func() { sinkErr = p.Parse(ackPkt[:5]) }},
		{"Packet.Fields", func() { _ = p.Parse(udPkt); h := p.Fields(); sink += int(h.BTH.PSN) }},
		{"ParseBTH", func() { h, n, _ := wire.ParseBTH(udPkt); sink += n + int(h.PSN()) }},
		{"ParseRETH", func() { h, n, _ := wire.ParseRETH(writePkt[12:]); sink += n + int(h.DMALen()) }},
		{"ParseAETH", func() { h, n, _ := wire.ParseAETH(ackPkt[12:]); sink += n + int(h.MSN()) }},
		{"ParseAtomicETH", func() { h, n, _ := wire.ParseAtomicETH(writePkt[12:]); sink += n + int(h.Compare()) }},
		{"ParseAtomicAckETH", func() { h, n, _ := wire.ParseAtomicAckETH(ackPkt[16:]); sink += n + int(h.Orig()) }},
		{"ParseImmDt", func() { h, n, _ := wire.ParseImmDt(udPkt[20:]); sink += n + int(h.Imm()) }},
		{"ParseIETH", func() { h, n, _ := wire.ParseIETH(udPkt[20:]); sink += n + int(h.RKey()) }},
		{"ParseDETH", func() { h, n, _ := wire.ParseDETH(udPkt[12:]); sink += n + int(h.SrcQP()) }},
		{"ParseMAD", func() { m, n, _ := wire.ParseMAD(mad); sink += n + int(m.AttributeID()) }},
		{"ParseMAD short", func() { _, _, sinkErr = wire.ParseMAD(mad[:10]) }},
		{"BTH.Append", func() { buf = ud.BTH.Append(buf[:0]) }},
		{"DETH.Append", func() { buf = ud.DETH.Append(buf[:0]) }},
		{"RETH.Append", func() { buf = ud.RETH.Append(buf[:0]) }},
		{"AtomicETH.Append", func() { buf = ud.AtomicETH.Append(buf[:0]) }},
		{"AETH.Append", func() { buf = ud.AETH.Append(buf[:0]) }},
		{"AtomicAckETH.Append", func() { buf = ud.AtomicAckETH.Append(buf[:0]) }},
		{"ImmDt.Append", func() { buf = ud.ImmDt.Append(buf[:0]) }},
		{"IETH.Append", func() { buf = ud.IETH.Append(buf[:0]) }},
		{"MADFields.Append", func() { buf = wire.MADFields{BaseVersion: 1}.Append(buf[:0]) }},
		{"Headers.Append", func() { buf = write.Append(buf[:0]) }},
		{"AppendPacket", func() { buf = wire.AppendPacket(buf[:0], &write, payload) }},
		{"AppendICRC", func() { buf = wire.AppendICRC(buf[:0], 0x12345678) }},
		{"ICRC IPv4", func() { sink += int(wire.ICRC(src4, dst4, 7, writePkt[:len(writePkt)-4])) }},
		{"ICRC IPv6", func() { sink += int(wire.ICRC(src6, dst6, 0, writePkt[:len(writePkt)-4])) }},
		{"PutICRC", func() { wire.PutICRC(writePkt, src6, dst6, 0) }},
		{"ICRCFromHeaders", func() { c, _ := wire.ICRCFromHeaders(ip, udp, ackPkt[:len(ackPkt)-4]); sink += int(c) }},
		{"VerifyICRC IPv4 recover", func() { id, _ := wire.VerifyICRC(udPkt, src4, dst4); sink += int(id) }},
		{"VerifyICRC IPv4 id 0", func() { id, _ := wire.VerifyICRC(ackPkt, src4, dst4); sink += int(id) }},
		{"VerifyICRC IPv6", func() { id, _ := wire.VerifyICRC(writePkt, src6, dst6); sink += int(id) }},
		{"RecoverIPv4ID", func() { id, _ := wire.RecoverIPv4ID(0x12345678, 4108); sink += int(id) }},
		{"Trailer", func() { sink += int(wire.Trailer(udPkt)) }},
		{"PSN", func() {
			q := wire.PSN(0xFFFFF0).Add(0x20).Next()
			sink += int(q.Diff(5))
			if q.Less(3) {
				sink++
			}
		}},
		{"PSN.AppendTo", func() { buf = wire.PSN(0xABCDEF).AppendTo(buf[:0]) }},
		{"GID", func() { g := wire.GIDFromAddr(src4.Addr()); sink += int(g.Addr().As4()[0]) }},
		{"GID.AppendTo", func() { buf = wire.GIDFromAddr(src6.Addr()).AppendTo(buf[:0]) }},
		{"ReasonOf", func() { sink += int(wire.ReasonOf(sinkErr)) }},
		{"ReasonOf wrapped", func() { sink += int(wire.ReasonOf(wrapped)) }},
	} {
		if n := testing.AllocsPerRun(100, c.f); n != 0 {
			t.Errorf("%s: %v allocs, want 0", c.name, n)
		}
	}
	_ = sink
}
