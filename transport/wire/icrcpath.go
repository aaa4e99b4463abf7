package wire

import (
	"encoding/binary"
	"net/netip"
)

// ICRCPath is the share of the ICRC that every packet from one endpoint to
// another has in common, so that a sender pays per packet only for what
// differs: the lengths, the IPv4 identification and the BTH.
//
// The CRC register is linear in its input, so the register after the
// seed and the masked IP and UDP headers is the register after the same
// headers with their lengths and identification zero (fixed for the path,
// computed once), XORed with the register that those fields alone give
// from zero (one for each packet length, kept for the last two lengths,
// and a table for the identifications a GSO send uses). The BTH comes last
// in the masked headers, so the CRC simply continues over it, the rest of
// the headers and the payload. A profile of a WRITE stream at the 4096-byte
// MTU had the masked headers' CRC at about 5 % of the sender (the
// docs/performance.md section of issue 18, session 12).
//
// The zero value matches no path; For reports whether p is for src and
// dst and Reset makes it so. An ICRCPath is not safe for concurrent use.
type ICRCPath struct {
	src, dst netip.AddrPort
	set      bool
	is4      bool
	mixed    bool   // src and dst not valid addresses of one family: Verify fails
	base     uint32 // raw register after the seed and the zeroed IP and UDP headers
	lenOf    [2]int // UDP payload lengths (without the trailer) of lenTerm
	lenTerm  [2]uint32
	lenNext  int
}

// For reports whether p holds the path from src to dst.
func (p *ICRCPath) For(src, dst netip.AddrPort) bool {
	return p.set && p.src == src && p.dst == dst
}

// Reset makes p the path from src to dst (of one address family, as
// ICRC's arguments).
func (p *ICRCPath) Reset(src, dst netip.AddrPort) {
	var h [ipv6HdrLen + udpHdrLen + BTHSize]byte
	var bth [BTHSize]byte
	n := maskedHeadersLen(&h, src, dst, 0, bth[:], 0) - BTHSize
	is4 := n == ipv4HdrLen+udpHdrLen
	for _, i := range lengthOffsets(is4) {
		h[i], h[i+1] = 0, 0
	}
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	*p = ICRCPath{src: src, dst: dst, set: true, is4: is4, base: rawUpdate(^icrcSeed, h[:n]), lenOf: [2]int{-1, -1},
		mixed: !sa.IsValid() || !da.IsValid() || sa.Is4() != da.Is4()}
}

// lengthOffsets are the offsets of the length fields in the masked IP and
// UDP headers.
func lengthOffsets(is4 bool) [2]int {
	if is4 {
		return [2]int{2, ipv4HdrLen + 4} // total length, UDP length
	}
	return [2]int{4, ipv6HdrLen + 4} // payload length, UDP length
}

// lengthTerm is the register that the IP and UDP length fields of a packet
// of roceLen bytes (the UDP payload without its trailer) give from zero.
func (p *ICRCPath) lengthTerm(roceLen int) uint32 {
	if p.lenOf[0] == roceLen {
		return p.lenTerm[0]
	}
	if p.lenOf[1] == roceLen {
		return p.lenTerm[1]
	}
	var h [ipv6HdrLen + udpHdrLen]byte
	n, udpLen := ipv6HdrLen+udpHdrLen, udpHdrLen+roceLen+ICRCSize
	off := lengthOffsets(p.is4)
	if p.is4 {
		n = ipv4HdrLen + udpHdrLen
		binary.BigEndian.PutUint16(h[off[0]:], uint16(ipv4HdrLen+udpLen))
	} else {
		binary.BigEndian.PutUint16(h[off[0]:], uint16(udpLen))
	}
	binary.BigEndian.PutUint16(h[off[1]:], uint16(udpLen))
	t := rawUpdate(0, h[:n])
	k := p.lenNext
	p.lenOf[k], p.lenTerm[k], p.lenNext = roceLen, t, k^1
	return t
}

// idTerms[id] is the register that IPv4 identification id gives from zero
// at its place in the masked IP and UDP headers: the identifications of
// the segments of a GSO send (docs/wire-format.md).
var idTerms = func() (t [64]uint32) {
	for id := range t {
		t[id] = idTerm(uint16(id))
	}
	return t
}()

func idTerm(id uint16) uint32 {
	var h [ipv4HdrLen + udpHdrLen]byte
	binary.BigEndian.PutUint16(h[4:], id)
	return rawUpdate(0, h[:])
}

// start returns the raw register after the seed and the masked IP and UDP
// headers of a packet of roceLen bytes with IPv4 identification ipID.
func (p *ICRCPath) start(roceLen int, ipID uint16) uint32 {
	r := p.base ^ p.lengthTerm(roceLen)
	if p.is4 && ipID != 0 {
		if int(ipID) < len(idTerms) {
			r ^= idTerms[ipID]
		} else {
			r ^= idTerm(ipID)
		}
	}
	return r
}

// PutParts is PutICRCParts for this path: hdr holds the headers, BTH
// first, payload the payload, and tail the pad bytes and then the four
// trailer bytes, which it fills.
func (p *ICRCPath) PutParts(hdr, payload, tail []byte, ipID uint16) {
	t := len(tail) - ICRCSize
	r := p.start(len(hdr)+len(payload)+t, ipID)
	r = rawBTH(r, hdr)
	crc := ^r
	if len(payload) > 0 {
		crc = crcUpdate(crc, payload)
	}
	binary.LittleEndian.PutUint32(tail[t:], ^rawUpdate(^crc, tail[:t]))
}

// Put is PutICRC for this path: pkt is a whole UDP payload whose last four
// bytes are the trailer to fill.
func (p *ICRCPath) Put(pkt []byte, ipID uint16) {
	n := len(pkt) - ICRCSize
	binary.LittleEndian.PutUint32(pkt[n:], p.sum(pkt[:n], ipID))
}

// Verify is VerifyICRC for a packet that came this path (p's source is
// the sender, its destination the receiver).
func (p *ICRCPath) Verify(pkt []byte) (ipID uint16, ok bool) {
	return p.VerifyExpect(pkt, 0)
}

// VerifyExpect is Verify for a packet whose IPv4 identification is
// probably guess: the ICRC is computed with guess in the header (at no
// cost; a guess of 64 or more counts as 0), so that a right guess needs no
// RecoverIPv4ID (~30 ns for a 4096-byte packet, 20 % of its check) and a
// wrong one costs what Verify costs a packet whose ID is not 0. The result
// does not depend on guess. The receiver of a GRO datagram guesses a
// segment's index in it: a GSO send numbers its segments from 0
// (docs/wire-format.md), and GRO on a veth, or on the link that segmented
// them, hands them on as they were sent. IPv6 has no ID: guess is ignored.
func (p *ICRCPath) VerifyExpect(pkt []byte, guess uint16) (ipID uint16, ok bool) {
	if len(pkt) < BTHSize+ICRCSize || p.mixed {
		return 0, false
	}
	if !p.is4 || int(guess) >= len(idTerms) {
		guess = 0 // a guess with no precomputed term would cost more than it saves
	}
	n := len(pkt) - ICRCSize
	want, got := p.sum(pkt[:n], guess), Trailer(pkt)
	if want == got {
		return guess, true
	}
	if !p.is4 {
		return 0, false // IPv6: every covered field is known, no second chance
	}
	// want^got is the difference the two IDs make (the CRC is affine in
	// the ID's bits): RecoverIPv4ID finds guess XOR the real ID.
	d, ok := RecoverIPv4ID(want^got, n)
	if !ok {
		return 0, false
	}
	return d ^ guess, true
}

// sum is the ICRC of roce, a UDP payload without its trailer (BTH first).
func (p *ICRCPath) sum(roce []byte, ipID uint16) uint32 {
	r := rawBTH(p.start(len(roce), ipID), roce[:BTHSize])
	if rest := roce[BTHSize:]; len(rest) >= shortCRC {
		return crcUpdate(^r, rest)
	}
	return ^rawUpdate(r, roce[BTHSize:])
}

// rawBTH continues the raw register r over hdr (at least a BTH, then any
// further headers) with BTH byte 4 masked.
func rawBTH(r uint32, hdr []byte) uint32 {
	w := binary.LittleEndian.Uint64(hdr) | 0xff<<32 // FECN, BECN, reserved masked
	r = slicing8Step(r, uint32(w), uint32(w>>32))
	return rawUpdate(r, hdr[8:])
}

// rawUpdate continues the raw (not inverted) CRC-32 register r over p,
// eight bytes at a time (slicing-by-8). For the short pieces of a packet
// it is cheaper than hash/crc32, whose every call goes through a
// sync.Once and a function pointer; p does not escape.
func rawUpdate(r uint32, p []byte) uint32 {
	for len(p) >= 8 {
		r = slicing8Step(r, binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint32(p[4:]))
		p = p[8:]
	}
	for _, c := range p {
		r = slicing8[0][byte(r)^c] ^ r>>8
	}
	return r
}

// slicing8Step advances the raw register r over eight bytes, lo the first
// four (little-endian) and hi the next four.
func slicing8Step(r, lo, hi uint32) uint32 {
	r ^= lo
	t := &slicing8
	return t[0][hi>>24] ^ t[1][(hi>>16)&0xff] ^ t[2][(hi>>8)&0xff] ^ t[3][hi&0xff] ^
		t[4][r>>24] ^ t[5][(r>>16)&0xff] ^ t[6][(r>>8)&0xff] ^ t[7][r&0xff]
}
