package wire

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Worked examples from the wire reference (§3.4), whole IP packets.
var icrcVectors = []struct {
	name string
	pkt  string
	want uint32
}{
	{"A RC SEND_ONLY IPv4", `45 00 00 30 12 34 40 00 40 11 a5 1a c0 a8 01 0a
		c0 a8 01 14 c0 01 12 b7 00 1c 00 00 04 10 ff ff
		00 00 00 11 80 00 00 01 61 62 63 00 13 7b 1e b0`, 0xB01E7B13},
	{"B RC ACK IPv4", `45 00 00 30 00 01 40 00 40 11 b7 4d c0 a8 01 14
		c0 a8 01 0a c1 23 12 b7 00 1c 00 00 11 00 ff ff
		00 00 00 22 00 00 00 01 1f 00 00 01 5a b7 1d 97`, 0x971DB75A},
	{"C RC SEND_ONLY IPv6", `60 00 00 00 00 1c 11 40 fd 00 00 00 00 00 00 00
		00 00 00 00 00 00 00 0a fd 00 00 00 00 00 00 00
		00 00 00 00 00 00 00 14 c0 01 12 b7 00 1c 00 00
		04 10 ff ff 00 00 00 11 80 00 00 01 61 62 63 00
		ac 53 98 be`, 0xBE9853AC},
}

func splitIP(t *testing.T, pkt []byte) (ip, udp, roce []byte, src, dst netip.AddrPort, id uint16) {
	t.Helper()
	n := 20
	if pkt[0]>>4 == 6 {
		n = 40
	}
	ip, udp, roce = pkt[:n], pkt[n:n+8], pkt[n+8:]
	var sa, da netip.Addr
	if n == 20 {
		sa, da = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		id = uint16(ip[4])<<8 | uint16(ip[5])
	} else {
		sa, da = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	}
	src = netip.AddrPortFrom(sa, uint16(udp[0])<<8|uint16(udp[1]))
	dst = netip.AddrPortFrom(da, uint16(udp[2])<<8|uint16(udp[3]))
	return
}

func TestICRCVectors(t *testing.T) {
	for _, v := range icrcVectors {
		t.Run(v.name, func(t *testing.T) {
			pkt := unhex(t, v.pkt)
			ip, udp, roce, src, dst, id := splitIP(t, pkt)
			body := roce[:len(roce)-ICRCSize]
			if got := Trailer(roce); got != v.want {
				t.Fatalf("trailer %#x, want %#x (little-endian order)", got, v.want)
			}
			if got := ICRC(src, dst, id, body); got != v.want {
				t.Errorf("ICRC = %#x, want %#x", got, v.want)
			}
			if got, ok := ICRCFromHeaders(ip, udp, body); !ok || got != v.want {
				t.Errorf("ICRCFromHeaders = %#x %v, want %#x", got, ok, v.want)
			}
			gotID, ok := VerifyICRC(roce, src, dst)
			if !ok || gotID != id {
				t.Errorf("VerifyICRC = id %#x ok %v, want id %#x", gotID, ok, id)
			}
			// One flipped payload bit must fail (IPv6) or recover a wrong ID or none (IPv4).
			bad := append([]byte(nil), roce...)
			bad[len(bad)-ICRCSize-1] ^= 0x10
			if gotID, ok := VerifyICRC(bad, src, dst); ok && gotID == id {
				t.Errorf("corrupted packet verified with the true ID")
			}
		})
	}
}

func TestRecoverIPv4IDEveryID(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.2:49152")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{12, 28, 100, 4096 + 12, 65000} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(r.Uint32())
		}
		for _, id := range []uint16{0, 1, 2, 0x00ff, 0xff00, 0x8000, 0xffff, uint16(r.Uint32())} {
			c := ICRC(src, dst, id, body)
			got, ok := RecoverIPv4ID(c^ICRC(src, dst, 0, body), len(body))
			if !ok || got != id {
				t.Fatalf("size %d id %#x: recovered %#x ok=%v", size, id, got, ok)
			}
		}
	}
	// Random differences are explained by some ID only about 2^-16 of the time.
	explained := 0
	for i := 0; i < 20000; i++ {
		if _, ok := RecoverIPv4ID(r.Uint32()|1, 4108); ok {
			explained++
		}
	}
	if explained > 10 {
		t.Errorf("%d of 20000 random ICRC differences were explained by an IP ID; want about 0", explained)
	}
}

func TestICRCNoAllocs(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.2:49152")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	pkt := make([]byte, 12+4096+4)
	if n := testing.AllocsPerRun(100, func() {
		PutICRC(pkt, src, dst, 7)
		VerifyICRC(pkt, src, dst)
	}); n != 0 {
		t.Errorf("allocs = %v, want 0", n)
	}
}

// PutICRCParts over any split of a packet gives PutICRC's trailer.
func TestPutICRCParts(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.2:49152")
	dst := netip.MustParseAddrPort("[2001:db8::1]:4791")
	for _, s := range []netip.AddrPort{src, netip.MustParseAddrPort("[2001:db8::2]:4791")} {
		d := netip.MustParseAddrPort("198.18.0.3:4791")
		if s.Addr().Is6() {
			d = dst
		}
		h := Headers{BTH: BTHFields{Opcode: WriteOnly, PKey: PKeyDefault, DestQP: 0x11, PSN: 5},
			RETH: RETHFields{VA: 0x1000, RKey: 7, DMALen: 1001}}
		payload := make([]byte, 1001)
		for i := range payload {
			payload[i] = byte(i * 13)
		}
		whole := AppendPacket(nil, &h, payload)
		PutICRC(whole, s, d, 3)
		hl := h.Len()
		tail := bytes.Clone(whole[hl+len(payload):])
		clear(tail[len(tail)-ICRCSize:])
		PutICRCParts(whole[:hl], payload, tail, s, d, 3)
		if !bytes.Equal(tail, whole[hl+len(payload):]) {
			t.Fatalf("%v: parts trailer %x, whole %x", s, tail, whole[hl+len(payload):])
		}
	}
}
