package sniff

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestAppendUDPFrameIPv4(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.2:49152")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	payload := []byte("BTH+payload+ICRC")
	prefix := []byte("keep")
	f := AppendUDPFrame(bytes.Clone(prefix), src, dst, 0x1234, payload)
	if !bytes.Equal(f[:4], prefix) {
		t.Fatalf("prefix overwritten: %q", f[:4])
	}
	f = f[4:]
	want := []byte{
		0x45, 0x00, 0x00, 0x2c, // version 4, IHL 5, TOS 0, total length 44
		0x12, 0x34, 0x40, 0x00, // ID, DF
		0x40, 0x11, 0x00, 0x00, // TTL 64, UDP, checksum (filled below)
		198, 18, 0, 2,
		198, 18, 0, 3,
		0xc0, 0x00, 0x12, 0xb7, // ports 49152 -> 4791
		0x00, 0x18, 0x00, 0x00, // length 24, checksum 0
	}
	want = append(want, payload...)
	binary.BigEndian.PutUint16(want[10:], ipv4Checksum(want[:20]))
	if !bytes.Equal(f, want) {
		t.Fatalf("frame\n got % x\nwant % x", f, want)
	}
	if c := ipv4Checksum(f[:20]); c != 0 {
		t.Errorf("header checksum does not verify: residue %#04x", c)
	}

	// IPv4-mapped IPv6 addresses give the same IPv4 frame.
	mapped := AppendUDPFrame(nil,
		netip.AddrPortFrom(netip.AddrFrom16(src.Addr().As16()), src.Port()),
		netip.AddrPortFrom(netip.AddrFrom16(dst.Addr().As16()), dst.Port()), 0x1234, payload)
	if !bytes.Equal(mapped, want) {
		t.Errorf("IPv4-mapped addresses: got % x, want % x", mapped, want)
	}
}

func TestAppendUDPFrameIPv6(t *testing.T) {
	src := netip.MustParseAddrPort("[fd00::2]:49152")
	dst := netip.MustParseAddrPort("[fd00::3]:4791")
	payload := []byte{1, 2, 3}
	f := AppendUDPFrame(nil, src, dst, 99, payload)
	want := []byte{
		0x60, 0, 0, 0, // version 6, traffic class 0, flow label 0
		0x00, 0x0b, 0x11, 0x40, // payload length 11, next header UDP, hop limit 64
	}
	s, d := src.Addr().As16(), dst.Addr().As16()
	want = append(want, s[:]...)
	want = append(want, d[:]...)
	want = append(want, 0xc0, 0x00, 0x12, 0xb7, 0x00, 0x0b, 0x00, 0x00)
	want = append(want, payload...)
	if !bytes.Equal(f, want) {
		t.Fatalf("frame\n got % x\nwant % x", f, want)
	}
	// Mixed families fall back to IPv6 with the IPv4 address mapped.
	mixed := AppendUDPFrame(nil, netip.MustParseAddrPort("10.0.0.1:1"), dst, 0, nil)
	if len(mixed) != ipv6HeaderLen+udpHeaderLen || mixed[0]>>4 != 6 {
		t.Fatalf("mixed families: got % x", mixed)
	}
	if got := netip.AddrFrom16([16]byte(mixed[8:24])); got != netip.MustParseAddr("::ffff:10.0.0.1") {
		t.Errorf("mixed families: source %v", got)
	}
}

// frames returns one valid frame per supported encapsulation, all carrying
// the same datagram, plus its expected decoding.
func frames(t *testing.T) (cases []struct {
	name     string
	linktype int
	frame    []byte
	ipLen    int
}, src, dst netip.AddrPort, payload []byte) {
	t.Helper()
	src = netip.MustParseAddrPort("198.18.0.2:49152")
	dst = netip.MustParseAddrPort("198.18.0.3:4791")
	payload = []byte("0123456789abcdef")
	raw4 := AppendUDPFrame(nil, src, dst, 5, payload)
	src6 := netip.MustParseAddrPort("[fd00::2]:49152")
	dst6 := netip.MustParseAddrPort("[fd00::3]:4791")
	raw6 := AppendUDPFrame(nil, src6, dst6, 0, payload)

	eth := func(tags []uint16, et uint16, pkt []byte) []byte {
		b := []byte{0x52, 0x54, 0, 0x12, 0, 3, 0x52, 0x54, 0, 0x12, 0, 2}
		for _, tpid := range tags {
			b = binary.BigEndian.AppendUint16(b, tpid)
			b = binary.BigEndian.AppendUint16(b, 100) // VLAN ID
		}
		b = binary.BigEndian.AppendUint16(b, et)
		b = append(b, pkt...)
		for len(b) < 60 { // Ethernet minimum frame size: padding after IP
			b = append(b, 0xee)
		}
		return b
	}
	sll := func(et uint16, pkt []byte) []byte {
		b := []byte{0, 0, 0, 1, 0, 6, 0x52, 0x54, 0, 0x12, 0, 2, 0, 0}
		b = binary.BigEndian.AppendUint16(b, et)
		return append(b, pkt...)
	}
	type c = struct {
		name     string
		linktype int
		frame    []byte
		ipLen    int
	}
	cases = []c{
		{"raw/IPv4", LinkTypeRaw, raw4, 20},
		{"raw/IPv6", LinkTypeRaw, raw6, 40},
		{"ethernet/IPv4", LinkTypeEthernet, eth(nil, etherTypeIPv4, raw4), 20},
		{"ethernet/IPv6", LinkTypeEthernet, eth(nil, etherTypeIPv6, raw6), 40},
		{"ethernet/802.1Q/IPv4", LinkTypeEthernet, eth([]uint16{etherTypeVLAN}, etherTypeIPv4, raw4), 20},
		{"ethernet/802.1ad+802.1Q/IPv6", LinkTypeEthernet, eth([]uint16{etherTypeQinQ, etherTypeVLAN}, etherTypeIPv6, raw6), 40},
		{"sll/IPv4", LinkTypeLinuxSLL, sll(etherTypeIPv4, raw4), 20},
		{"sll/IPv6", LinkTypeLinuxSLL, sll(etherTypeIPv6, raw6), 40},
	}
	// IPv4 with options (IHL 6): options are part of the returned header.
	opt := make([]byte, 0, 64)
	opt = append(opt, raw4[:20]...)
	opt[0] = 0x46
	opt = append(opt, 1, 1, 1, 0) // NOP NOP NOP EOL
	opt = append(opt, raw4[20:]...)
	binary.BigEndian.PutUint16(opt[2:], uint16(len(opt)))
	binary.BigEndian.PutUint16(opt[10:], 0)
	binary.BigEndian.PutUint16(opt[10:], ipv4Checksum(opt[:24]))
	cases = append(cases, c{"raw/IPv4 with options", LinkTypeRaw, opt, 24})
	return cases, src, dst, payload
}

func TestDecodeUDP(t *testing.T) {
	cases, src4, dst4, payload := frames(t)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			ip, udp, pl, src, dst, ok := DecodeUDP(tt.linktype, tt.frame)
			if !ok {
				t.Fatal("not decoded")
			}
			if len(ip) != tt.ipLen || len(udp) != udpHeaderLen || !bytes.Equal(pl, payload) {
				t.Errorf("got ip %d bytes, udp %d bytes, payload %q", len(ip), len(udp), pl)
			}
			if src.Port() != src4.Port() || dst.Port() != dst4.Port() {
				t.Errorf("ports %v -> %v", src, dst)
			}
			if tt.ipLen != 40 && (src != src4 || dst != dst4) {
				t.Errorf("addresses %v -> %v, want %v -> %v", src, dst, src4, dst4)
			}
			// Every truncation of the frame is rejected.
			for n := range len(tt.frame) {
				if _, _, pl, _, _, ok := DecodeUDP(tt.linktype, tt.frame[:n]); ok && len(pl) == len(payload) {
					// Only link-layer padding may be cut.
					continue
				} else if ok {
					t.Fatalf("prefix of %d bytes decoded with %d-byte payload", n, len(pl))
				}
			}
		})
	}
}

func TestDecodeUDPRejects(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.2:49152")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	raw4 := AppendUDPFrame(nil, src, dst, 5, []byte("payload"))
	raw6 := AppendUDPFrame(nil, netip.MustParseAddrPort("[fd00::2]:1"), netip.MustParseAddrPort("[fd00::3]:4791"), 0, []byte("payload"))
	mod := func(b []byte, f func(b []byte)) []byte { b = bytes.Clone(b); f(b); return b }
	tests := []struct {
		name     string
		linktype int
		frame    []byte
	}{
		{"unknown link type", 12345, raw4},
		{"empty", LinkTypeRaw, nil},
		{"IP version 5", LinkTypeRaw, mod(raw4, func(b []byte) { b[0] = 0x55 })},
		{"IHL 4", LinkTypeRaw, mod(raw4, func(b []byte) { b[0] = 0x44 })},
		{"more fragments", LinkTypeRaw, mod(raw4, func(b []byte) { b[6] |= 0x20 })},
		{"fragment offset", LinkTypeRaw, mod(raw4, func(b []byte) { b[7] = 1 })},
		{"TCP", LinkTypeRaw, mod(raw4, func(b []byte) { b[9] = 6 })},
		{"IPv4 total length too long", LinkTypeRaw, mod(raw4, func(b []byte) { b[3]++ })},
		{"IPv4 total length below IHL", LinkTypeRaw, mod(raw4, func(b []byte) { b[2], b[3] = 0, 19 })},
		{"UDP length too long", LinkTypeRaw, mod(raw4, func(b []byte) { b[25]++ })},
		{"UDP length below 8", LinkTypeRaw, mod(raw4, func(b []byte) { b[24], b[25] = 0, 7 })},
		{"IPv6 extension header", LinkTypeRaw, mod(raw6, func(b []byte) { b[6] = 0 })},
		{"IPv6 jumbogram", LinkTypeRaw, mod(raw6, func(b []byte) { b[4], b[5] = 0, 0 })},
		{"IPv6 payload length too long", LinkTypeRaw, mod(raw6, func(b []byte) { b[5]++ })},
		{"ethernet ARP", LinkTypeEthernet, append(make([]byte, 12), 0x08, 0x06, 0, 1)},
		{"ethernet short", LinkTypeEthernet, make([]byte, 13)},
		{"ethernet truncated tag", LinkTypeEthernet, append(make([]byte, 12), 0x81, 0x00, 0)},
		{"ethernet three tags", LinkTypeEthernet, append(append(make([]byte, 12),
			0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 1, 0x81, 0x00, 0, 1, 0x08, 0x00), raw4...)},
		{"sll short", LinkTypeLinuxSLL, make([]byte, 15)},
		{"sll non-IP", LinkTypeLinuxSLL, append(make([]byte, 14), 0x08, 0x06)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, _, _, _, ok := DecodeUDP(tt.linktype, tt.frame); ok {
				t.Error("decoded, want rejection")
			}
		})
	}
}
