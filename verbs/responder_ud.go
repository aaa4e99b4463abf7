package verbs

// The UD responder: single-packet SENDs behind a Q_Key check.

import (
	"encoding/binary"
	"net/netip"

	"github.com/tbrdma/tbrdma/transport/wire"
)

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
