package wire

// The RoCEv2 invariant CRC (IBTA Annex A17.4.1, as rdma_rxe computes it in
// rxe_icrc.c).
//
// The ICRC is CRC-32 (IEEE 802.3, reflected, zlib's crc32) over
//
//	0xFF ×8 (stand-in for the LRH) ‖ IP header ‖ UDP header ‖ BTH ‖ rest of packet
//
// with the variant fields replaced by ones: IPv4 TOS, TTL and header
// checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum;
// BTH byte 4 (FECN, BECN, reserved). The trailer is the CRC value written
// least-significant byte first.
//
// Everything else in the IP header is covered, including the IPv4
// identification and flags. A sender on an unconnected Linux UDP socket with
// IP_PMTUDISC_DO gets ID 0 and DF; segment k of a UDP GSO send gets ID k.
// A receiver on a UDP socket cannot see the ID at all, so for IPv4 it
// recovers the ID from the CRC instead (RecoverIPv4ID): the CRC is affine in
// the ID bits, so exactly one 16-bit ID explains a trailer, or none does.

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"sync/atomic"
)

// ICRCSize is the length of the ICRC trailer.
const ICRCSize = 4

const (
	ipv4HdrLen = 20
	ipv6HdrLen = 40
	udpHdrLen  = 8
	ipv4DF     = 0x4000
	protoUDP   = 17
)

// icrcSeed is the finalized CRC-32 of eight 0xFF bytes: the masked LRH.
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// ICRC returns the invariant CRC of a RoCEv2 packet that travels in a UDP
// datagram from src to dst. roce is the UDP payload without its 4-byte ICRC
// trailer (BTH first); it must hold at least a BTH. For IPv4, ipID is the IP
// identification the datagram carries and DF is taken to be set, as it must
// be for RoCE. src and dst must be of the same family (IPv4-mapped IPv6
// addresses count as IPv4); if they are not, the result is meaningless but
// ICRC does not panic.
func ICRC(src, dst netip.AddrPort, ipID uint16, roce []byte) uint32 {
	var hdr [ipv6HdrLen + udpHdrLen + BTHSize]byte
	n := maskedHeaders(&hdr, src, dst, ipID, roce)
	crc := ^rawUpdate(^icrcSeed, hdr[:n])
	return crcUpdate(crc, roce[BTHSize:])
}

// PutICRCParts is PutICRC for a packet in three parts, as a gathering
// send carries it: hdr (the headers, BTH first), payload, and tail (pad
// bytes, then the four trailer bytes, which it fills).
func PutICRCParts(hdr, payload, tail []byte, src, dst netip.AddrPort, ipID uint16) {
	var m [ipv6HdrLen + udpHdrLen + BTHSize]byte
	n := maskedHeadersLen(&m, src, dst, ipID, hdr, len(hdr)+len(payload)+len(tail)-ICRCSize)
	crc := ^rawUpdate(^icrcSeed, m[:n])
	crc = crcUpdate(crc, hdr[BTHSize:])
	crc = crcUpdate(crc, payload)
	t := len(tail) - ICRCSize
	crc = crcUpdate(crc, tail[:t])
	binary.LittleEndian.PutUint32(tail[t:], crc)
}

// maskedHeaders writes the masked IP, UDP and BTH headers of the ICRC input
// into hdr and returns their length. roce must hold a BTH.
func maskedHeaders(hdr *[ipv6HdrLen + udpHdrLen + BTHSize]byte, src, dst netip.AddrPort, ipID uint16, roce []byte) int {
	return maskedHeadersLen(hdr, src, dst, ipID, roce, len(roce))
}

// maskedHeadersLen is maskedHeaders for a packet of roceLen bytes (without
// the trailer) whose BTH is at the start of roce.
func maskedHeadersLen(hdr *[ipv6HdrLen + udpHdrLen + BTHSize]byte, src, dst netip.AddrPort, ipID uint16, roce []byte, roceLen int) int {
	udpLen := udpHdrLen + roceLen + ICRCSize
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	var n int
	if sa.Is4() && da.Is4() { // As4 panics on anything else
		h := hdr[:ipv4HdrLen]
		h[0] = 0x45
		h[1] = 0xff // TOS masked
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HdrLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], ipID)
		binary.BigEndian.PutUint16(h[6:], ipv4DF)
		h[8] = 0xff // TTL masked
		h[9] = protoUDP
		h[10], h[11] = 0xff, 0xff // checksum masked
		s4, d4 := sa.As4(), da.As4()
		copy(h[12:16], s4[:])
		copy(h[16:20], d4[:])
		n = ipv4HdrLen
	} else {
		h := hdr[:ipv6HdrLen]
		h[0], h[1], h[2], h[3] = 0x6f, 0xff, 0xff, 0xff // version 6, TC and flow label masked
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = protoUDP
		h[7] = 0xff // hop limit masked
		s16, d16 := sa.As16(), da.As16()
		copy(h[8:24], s16[:])
		copy(h[24:40], d16[:])
		n = ipv6HdrLen
	}
	u := hdr[n : n+udpHdrLen]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xff, 0xff // checksum masked
	n += udpHdrLen
	copy(hdr[n:n+BTHSize], roce[:BTHSize])
	hdr[n+4] = 0xff // FECN, BECN, reserved masked
	return n + BTHSize
}

// ICRCFromHeaders computes the ICRC from the IP and UDP headers exactly as
// they travelled (for example in a capture). ip is the IP header (IPv4
// without options, or IPv6 without extension headers), udp the 8-byte UDP
// header and roce the UDP payload without the ICRC trailer. ok is false when
// the headers are not of that form.
func ICRCFromHeaders(ip, udp, roce []byte) (icrc uint32, ok bool) {
	if len(udp) != udpHdrLen || len(roce) < BTHSize || len(ip) == 0 {
		return 0, false
	}
	var buf [ipv6HdrLen + udpHdrLen + BTHSize]byte
	n := 0
	switch ip[0] >> 4 {
	case 4:
		if len(ip) != ipv4HdrLen || ip[0] != 0x45 {
			return 0, false
		}
		copy(buf[:], ip)
		buf[1], buf[8], buf[10], buf[11] = 0xff, 0xff, 0xff, 0xff
		n = ipv4HdrLen
	case 6:
		if len(ip) != ipv6HdrLen {
			return 0, false
		}
		copy(buf[:], ip)
		buf[0] |= 0x0f
		buf[1], buf[2], buf[3], buf[7] = 0xff, 0xff, 0xff, 0xff
		n = ipv6HdrLen
	default:
		return 0, false
	}
	copy(buf[n:], udp)
	buf[n+6], buf[n+7] = 0xff, 0xff
	n += udpHdrLen
	copy(buf[n:], roce[:BTHSize])
	buf[n+4] = 0xff
	n += BTHSize
	crc := ^rawUpdate(^icrcSeed, buf[:n])
	return crcUpdate(crc, roce[BTHSize:]), true
}

// slicing8[k][b] is the CRC register after byte b followed by k zero bytes.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xff] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// AppendICRC appends the little-endian ICRC trailer to b.
func AppendICRC(b []byte, icrc uint32) []byte {
	return binary.LittleEndian.AppendUint32(b, icrc)
}

// PutICRC computes the ICRC of pkt (a whole UDP payload whose last four
// bytes are the trailer to fill) and writes it in place.
func PutICRC(pkt []byte, src, dst netip.AddrPort, ipID uint16) {
	n := len(pkt) - ICRCSize
	binary.LittleEndian.PutUint32(pkt[n:], ICRC(src, dst, ipID, pkt[:n]))
}

// Trailer returns the ICRC stored in the last four bytes of pkt.
func Trailer(pkt []byte) uint32 { return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCSize:]) }

// VerifyICRC checks the ICRC trailer of pkt, a whole UDP payload received
// from src at dst. For IPv6 every covered field is known and the check is
// exact. For IPv4 the IP identification is not visible to a UDP socket: the
// ID that makes the trailer match is recovered and returned, and the check
// fails only if no 16-bit ID can explain the trailer (a corrupted packet
// escapes with probability 2^-16). A packet shorter than BTH+ICRC fails, and
// so do addresses that are invalid or of different families.
func VerifyICRC(pkt []byte, src, dst netip.AddrPort) (ipID uint16, ok bool) {
	if len(pkt) < BTHSize+ICRCSize {
		return 0, false
	}
	if sa, da := src.Addr().Unmap(), dst.Addr().Unmap(); !sa.IsValid() || !da.IsValid() || sa.Is4() != da.Is4() {
		return 0, false
	}
	n := len(pkt) - ICRCSize
	got := Trailer(pkt)
	want := ICRC(src, dst, 0, pkt[:n])
	if want == got {
		return 0, true
	}
	if !src.Addr().Unmap().Is4() {
		return 0, false // IPv6: every covered field is known, no second chance
	}
	return RecoverIPv4ID(want^got, n)
}

// RecoverIPv4ID returns the IPv4 identification that explains an ICRC
// difference: diff is the ICRC computed with ID 0 XOR the trailer received,
// roceLen the length of the UDP payload without the trailer. ok is false
// when no ID explains diff.
//
// The CRC is affine, so diff is the zero-initialised CRC of a message that
// is zero except for the two ID bytes, followed by all the bytes after them:
// the rest of the IPv4 header (14 bytes), the UDP header and roceLen bytes.
// Undo the trailing zero bytes (multiply by x^-8k modulo the polynomial),
// then read the two bytes back out of the remaining register.
func RecoverIPv4ID(diff uint32, roceLen int) (id uint16, ok bool) {
	if roceLen < 0 || roceLen > 0xFFFF {
		return 0, false // no UDP datagram is that long
	}
	after := 14 + udpHdrLen + roceLen
	r := gfMul(diff, cachedXPowInv8(after))
	// r is now the zero-initialised CRC register after the two ID bytes.
	// Reflected table steps from zero: r1 = T[b0]; r2 = (r1>>8) ^ T[(r1^b1)&0xff].
	k := crcTopInv[r>>24]
	r1hi := r ^ crc32.IEEETable[k] // = r1>>8
	if r1hi>>24 != 0 {
		return 0, false
	}
	b0 := crcTopInv[(r1hi>>16)&0xff]
	r1 := crc32.IEEETable[b0]
	if r1>>8 != r1hi {
		return 0, false
	}
	b1 := (uint32(k) ^ r1) & 0xff
	return uint16(b0)<<8 | uint16(b1), true
}

// crcTopInv inverts the top byte of the reflected CRC-32 table: the top
// bytes of the 256 entries are all distinct.
var crcTopInv = func() (inv [256]uint8) {
	for i, v := range crc32.IEEETable {
		inv[v>>24] = uint8(i)
	}
	return inv
}()

// Polynomial arithmetic in the reflected representation of CRC-32: bit 31
// is the coefficient of x^0, bit 0 that of x^31.
const crcPoly = 0xedb88320

// gfMul returns a·b modulo the CRC-32 polynomial.
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		// b *= x
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xInv is x^-1 modulo the polynomial: since P = x·Q + 1, x·Q ≡ 1, so x^-1 = Q,
// which in reflected form is (P without its x^32 term) shifted down one
// degree, plus x^31.
var xInv = func() uint32 {
	// Find y with gfMul(y, x) == 1 by solving: x·y = 1. In reflected form
	// multiplying by x is a right shift with conditional XOR, so invert it.
	one := uint32(1) << 31
	// y·x = one: if y's x^31 coefficient (bit 0) was set, the result had the
	// polynomial XORed in; undo: y = (one ^ crcPoly)<<1 | 1.
	return (one^crcPoly)<<1 | 1
}()

// xInv8Pow2[i] is x^(-8·2^i) modulo the polynomial, so that xPowInv8 needs
// one multiplication per set bit of k.
var xInv8Pow2 = func() (t [64]uint32) {
	base := xInv
	for i := 0; i < 3; i++ { // x^-8
		base = gfMul(base, base)
	}
	for i := range t {
		t[i] = base
		base = gfMul(base, base)
	}
	return t
}()

// xPowCache holds recent xPowInv8 results, direct-mapped by k: a stream
// of equal-sized packets (every GSO segment after the first needs its ID
// recovered) then pays one multiplication per packet instead of one per
// set bit of k. An entry is k<<32 | value, so that a reader never sees
// half of one.
var xPowCache [64]atomic.Uint64

func cachedXPowInv8(k int) uint32 {
	e := &xPowCache[(k^k>>6)&63]
	if v := e.Load(); v>>32 == uint64(k) && v != 0 {
		return uint32(v)
	}
	r := xPowInv8(k)
	e.Store(uint64(k)<<32 | uint64(r))
	return r
}

// xPowInv8 returns x^(-8k) modulo the polynomial.
func xPowInv8(k int) uint32 {
	result := uint32(1) << 31 // 1
	for i, e := 0, uint(k); e != 0; i, e = i+1, e>>1 {
		if e&1 != 0 {
			result = gfMul(result, xInv8Pow2[i])
		}
	}
	return result
}
