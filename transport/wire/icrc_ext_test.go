package wire_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Independent vectors (roce-wire.md §3.5), from scapy's
// test/contrib/roce.uts: a CNP captured on a ConnectX-4 Lx, and a UC
// SEND_ONLY with MigReq, pad 2 and a non-zero (masked) UDP checksum.
func TestICRCScapyVectors(t *testing.T) {
	t.Run("ConnectX-4 Lx CNP", func(t *testing.T) {
		frame := mustHex(t, `e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2
			003c 718c 4000 4011 9161 0a00 1101 0a00
			1201 0000 12b7 0028 0000 8100 ffff 4000
			0118 0000 0000 0000 0000 0000 0000 0000
			0000 0000 0000 82fd 002a`)
		ip, udp, roce := frame[14:34], frame[34:42], frame[42:]
		body := roce[:len(roce)-wire.ICRCSize]
		if got, ok := wire.ICRCFromHeaders(ip, udp, body); !ok || got != 0x2A00FD82 || got != wire.Trailer(roce) {
			t.Errorf("ICRCFromHeaders = %#08x %v, want 0x2a00fd82", got, ok)
		}
		src := netip.MustParseAddrPort("10.0.17.1:0")
		dst := netip.MustParseAddrPort("10.0.18.1:4791")
		if id, ok := wire.VerifyICRC(roce, src, dst); !ok || id != 0x718C {
			t.Errorf("VerifyICRC = %#04x %v, want 0x718c", id, ok)
		}
		// tbrdma does not speak CNP: Parse rejects it even though the ICRC is good.
		var p wire.Packet
		if err := p.Parse(roce); wire.ReasonOf(err) != wire.ReasonOpcode {
			t.Errorf("Parse(CNP) = %v, want reason opcode", err)
		}
		b := wire.BTH(roce)
		if !b.BECN() || b.FECN() || b.DestQP() != 0x118 {
			t.Errorf("CNP BTH %+v", b.Fields())
		}
	})
	t.Run("UC SEND_ONLY", func(t *testing.T) {
		ip := mustHex(t, "45 01 00 40 04 78 40 00 40 11 00 00 c0 a8 00 07 c0 a8 00 07")
		udp := mustHex(t, "c0 00 12 b7 00 2c ac a2")
		payload := []byte("F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P")
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.ClassUC | wire.SendOnly, MigReq: true,
			PKey: 0xFFFF, DestQP: 211, PSN: 13571856}}
		roce := wire.AppendPacket(nil, &h, payload)
		if roce[1] != 0x60 {
			t.Fatalf("BTH byte 1 = %#02x, want 0x60 (MigReq, pad 2)", roce[1])
		}
		body := roce[:len(roce)-wire.ICRCSize]
		if got, ok := wire.ICRCFromHeaders(ip, udp, body); !ok || got != 0xF353F378 {
			t.Errorf("ICRCFromHeaders = %#08x %v, want 0xf353f378 (wire 78 f3 53 f3)", got, ok)
		}
		src := netip.MustParseAddrPort("192.168.0.7:49152")
		dst := netip.MustParseAddrPort("192.168.0.7:4791")
		wire.PutICRC(roce, src, dst, 1144)
		if got := roce[len(roce)-4:]; !bytes.Equal(got, []byte{0x78, 0xf3, 0x53, 0xf3}) {
			t.Errorf("trailer %x, want 78f353f3", got)
		}
		if id, ok := wire.VerifyICRC(roce, src, dst); !ok || id != 1144 {
			t.Errorf("VerifyICRC = %d %v, want 1144", id, ok)
		}
	})
}

// VerifyICRC takes its addresses from the socket; odd ones must fail
// cleanly, never panic. IPv4-mapped addresses (a dual-stack socket) count
// as IPv4.
func TestVerifyICRCAddresses(t *testing.T) {
	h := allHeaders(wire.SendOnly)
	pkt := wire.AppendPacket(nil, &h, payloadOf(64))
	wire.PutICRC(pkt, src4, dst4, 0x4242)
	mapped := func(a netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
	}
	if id, ok := wire.VerifyICRC(pkt, mapped(src4), mapped(dst4)); !ok || id != 0x4242 {
		t.Errorf("IPv4-mapped addresses: %#x %v", id, ok)
	}
	if id, ok := wire.VerifyICRC(pkt, src4, mapped(dst4)); !ok || id != 0x4242 {
		t.Errorf("one address IPv4-mapped: %#x %v", id, ok)
	}
	if got, want := wire.ICRC(mapped(src4), mapped(dst4), 1, pkt[:len(pkt)-4]), wire.ICRC(src4, dst4, 1, pkt[:len(pkt)-4]); got != want {
		t.Errorf("ICRC differs for IPv4-mapped addresses: %#x, %#x", got, want)
	}
	// A different port or address does not verify (with the true ID).
	other := netip.AddrPortFrom(src4.Addr(), src4.Port()+1)
	if id, ok := wire.VerifyICRC(pkt, other, dst4); ok && id == 0x4242 {
		t.Error("wrong source port verified")
	}
	for _, c := range []struct{ src, dst netip.AddrPort }{
		{src4, netip.AddrPort{}},
		{netip.AddrPort{}, dst4},
		{netip.AddrPort{}, netip.AddrPort{}},
		{src4, dst6},
		{src6, dst4},
		{netip.AddrPortFrom(netip.Addr{}, 4791), dst6},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("VerifyICRC(%v, %v) panics: %v", c.src, c.dst, r)
				}
			}()
			if _, ok := wire.VerifyICRC(pkt, c.src, c.dst); ok {
				t.Errorf("VerifyICRC(%v, %v) = ok", c.src, c.dst)
			}
			_ = wire.ICRC(c.src, c.dst, 0, pkt[:len(pkt)-4])
		}()
	}
	for n := range wire.BTHSize + wire.ICRCSize {
		if _, ok := wire.VerifyICRC(pkt[:n], src4, dst4); ok {
			t.Errorf("VerifyICRC of %d bytes = ok", n)
		}
	}
}

// ICRCFromHeaders accepts only the header forms rxe sends.
func TestICRCFromHeadersRejects(t *testing.T) {
	ip4 := mustHex(t, "45 00 00 30 12 34 40 00 40 11 a5 1a c0 a8 01 0a c0 a8 01 14")
	udp := mustHex(t, "c0 01 12 b7 00 1c 00 00")
	body := mustHex(t, "04 10 ff ff 00 00 00 11 80 00 00 01 61 62 63 00")
	if got, ok := wire.ICRCFromHeaders(ip4, udp, body); !ok || got != 0xB01E7B13 {
		t.Fatalf("example A: %#x %v", got, ok)
	}
	withOptions := append(bytes.Clone(ip4), 1, 1, 1, 0)
	withOptions[0] = 0x46
	for _, c := range []struct {
		name          string
		ip, udp, body []byte
	}{
		{"no ip", nil, udp, body},
		{"ipv4 options", withOptions, udp, body},
		{"ihl 6 in 20 bytes", append([]byte{0x46}, ip4[1:]...), udp, body},
		{"ipv6 short", append([]byte{0x60}, make([]byte, 30)...), udp, body},
		{"version 5", append([]byte{0x55}, ip4[1:]...), udp, body},
		{"udp 7", ip4, udp[:7], body},
		{"udp 9", ip4, append(bytes.Clone(udp), 0), body},
		{"no bth", ip4, udp, body[:11]},
	} {
		if _, ok := wire.ICRCFromHeaders(c.ip, c.udp, c.body); ok {
			t.Errorf("%s: ok", c.name)
		}
	}
	// The masked fields do not matter: TOS, TTL, IP checksum, UDP checksum,
	// BTH byte 4.
	ip := bytes.Clone(ip4)
	ip[1], ip[8], ip[10], ip[11] = 0xB8, 1, 0xDE, 0xAD
	u := bytes.Clone(udp)
	binary.BigEndian.PutUint16(u[6:], 0x1234)
	b := bytes.Clone(body)
	b[4] = 0xC0
	if got, ok := wire.ICRCFromHeaders(ip, u, b); !ok || got != 0xB01E7B13 {
		t.Errorf("masked fields changed the ICRC: %#x", got)
	}
	// The covered ones do: the ID, DF, a reserved BTH bit.
	for i, mut := range []func(ip, udp, body []byte){
		func(ip, _, _ []byte) { ip[5] ^= 1 },
		func(ip, _, _ []byte) { ip[6] ^= 0x40 },
		func(_, _, body []byte) { body[8] ^= 0x01 },
		func(_, udp, _ []byte) { udp[0] ^= 0x80 },
	} {
		ip, u, b := bytes.Clone(ip4), bytes.Clone(udp), bytes.Clone(body)
		mut(ip, u, b)
		if got, _ := wire.ICRCFromHeaders(ip, u, b); got == 0xB01E7B13 {
			t.Errorf("covered field %d did not change the ICRC", i)
		}
	}
}
