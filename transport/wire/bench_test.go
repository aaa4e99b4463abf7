package wire_test

import (
	"fmt"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Codec costs; docs/performance.md records a run of
//
//	go test ./transport/wire/ -run '^$' -bench . -benchmem

func benchPacket(op wire.Opcode, payload int) []byte {
	h := allHeaders(op)
	pkt := wire.AppendPacket(nil, &h, payloadOf(payload))
	wire.PutICRC(pkt, src4, dst4, 0x1234)
	return pkt
}

func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name    string
		op      wire.Opcode
		payload int
	}{
		{"RC_SEND_ONLY/64", wire.SendOnly, 64},
		{"RC_SEND_MIDDLE/4096", wire.SendMiddle, 4096},
		{"RC_WRITE_FIRST/4096", wire.WriteFirst, 4096},
		{"RC_WRITE_ONLY_IMM/64", wire.WriteOnlyImm, 64},
		{"RC_READ_REQUEST", wire.ReadRequest, 0},
		{"RC_READ_RESPONSE_ONLY/64", wire.ReadResponseOnly, 64},
		{"RC_ACK", wire.Acknowledge, 0},
		{"RC_COMPARE_SWAP", wire.CompareSwap, 0},
		{"RC_ATOMIC_ACK", wire.AtomicAcknowledge, 0},
		{"UC_WRITE_ONLY/4096", wire.ClassUC | wire.WriteOnly, 4096},
		{"UD_SEND_ONLY/256", wire.UDSendOnly, 256},
	} {
		pkt := benchPacket(c.op, c.payload)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			var p wire.Packet
			for b.Loop() {
				if err := p.Parse(pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("reject_tver", func(b *testing.B) {
		pkt := benchPacket(wire.SendOnly, 64)
		pkt[1] |= 1
		b.ReportAllocs()
		var p wire.Packet
		for b.Loop() {
			if wire.ReasonOf(p.Parse(pkt)) != wire.ReasonTVer {
				b.Fatal("accepted")
			}
		}
	})
}

func BenchmarkParseMAD(b *testing.B) {
	mad := append(wire.MADFields{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3, AttributeID: 0x10}.Append(nil),
		make([]byte, wire.MADDataSize)...)
	b.ReportAllocs()
	for b.Loop() {
		m, _, err := wire.ParseMAD(mad)
		if err != nil || m.AttributeID() != 0x10 {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	h := allHeaders(wire.WriteOnlyImm)
	mad := wire.MADFields{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3, TransactionID: 42, AttributeID: 0x10}
	buf := make([]byte, 0, 8192)
	for _, c := range []struct {
		name string
		f    func([]byte) []byte
	}{
		{"BTH", h.BTH.Append},
		{"RETH", h.RETH.Append},
		{"AETH", h.AETH.Append},
		{"AtomicETH", h.AtomicETH.Append},
		{"AtomicAckETH", h.AtomicAckETH.Append},
		{"ImmDt", h.ImmDt.Append},
		{"IETH", h.IETH.Append},
		{"DETH", h.DETH.Append},
		{"MAD", mad.Append},
		{"Headers_WRITE_ONLY_IMM", h.Append},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf = c.f(buf[:0])
			}
		})
	}
	for _, n := range []int{64, 4096} {
		payload := payloadOf(n)
		b.Run(fmt.Sprintf("AppendPacket_SEND_ONLY/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				buf = wire.AppendPacket(buf[:0], &h, payload)
			}
		})
	}
}

func BenchmarkICRC(b *testing.B) {
	for _, n := range []int{64, 4096} {
		pkt := benchPacket(wire.SendOnly, n)
		body := pkt[:len(pkt)-wire.ICRCSize]
		b.Run(fmt.Sprintf("IPv4/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				_ = wire.ICRC(src4, dst4, 0, body)
			}
		})
		b.Run(fmt.Sprintf("IPv6/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				_ = wire.ICRC(src6, dst6, 0, body)
			}
		})
		b.Run(fmt.Sprintf("PutICRC_IPv4/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				wire.PutICRC(pkt, src4, dst4, 0)
			}
		})
	}
}

func BenchmarkVerifyICRC(b *testing.B) {
	for _, n := range []int{64, 4096} {
		for _, c := range []struct {
			name string
			id   uint16
			v6   bool
		}{
			{"IPv4_id0", 0, false},
			{"IPv4_recover", 0xBEEF, false},
			{"IPv6", 0, true},
		} {
			pkt := benchPacket(wire.SendOnly, n)
			src, dst := src4, dst4
			if c.v6 {
				src, dst = src6, dst6
			}
			wire.PutICRC(pkt, src, dst, c.id)
			b.Run(fmt.Sprintf("%s/%d", c.name, n), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(pkt)))
				for b.Loop() {
					if id, ok := wire.VerifyICRC(pkt, src, dst); !ok || id != c.id {
						b.Fatal(id, ok)
					}
				}
			})
		}
	}
}

func BenchmarkRecoverIPv4ID(b *testing.B) {
	body := benchPacket(wire.SendOnly, 4096)
	body = body[:len(body)-wire.ICRCSize]
	diff := wire.ICRC(src4, dst4, 0xBEEF, body) ^ wire.ICRC(src4, dst4, 0, body)
	b.ReportAllocs()
	for b.Loop() {
		if id, ok := wire.RecoverIPv4ID(diff, len(body)); !ok || id != 0xBEEF {
			b.Fatal(id, ok)
		}
	}
}

func BenchmarkPSN(b *testing.B) {
	b.ReportAllocs()
	p := wire.PSN(0xFFFFF0)
	for b.Loop() {
		p = p.Add(3).Next()
		if p.Diff(0) > 1<<23 || p.Less(p) {
			b.Fatal(p)
		}
	}
}
