package cmwire

// The CMA header (struct cma_hdr in the kernel's cma.c, roce-wire.md
// §7.2): the first 36 bytes of the private data of a REQ or SIDR_REQ whose
// service ID is IP-based (IsCMAServiceID).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  CMA version  |IPVer 4| rsv 4 |        Source port            |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Source address (128) ...                      |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Destination address (128) ...                   | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The version is 0. The port is the active side's (source) port; the
// destination port is in the service ID. An IPv4 address is 12 zero bytes
// and then the 4 address bytes (not the ::ffff: form of a GID).
//
// The kernel checks the version byte and the IP version nibble and ignores
// the reserved nibble and the IPv4 padding. ParseCMAHeader also rejects a
// non-zero reserved nibble (ReasonCMAIPVersion) and non-zero IPv4 padding
// (ReasonCMAAddress), so that every header it accepts re-encodes to the
// same bytes; neither librdmacm nor the kernel sets them.

import (
	"encoding/binary"
	"net/netip"
)

// CMAHeaderSize is the size of the CMA header.
const CMAHeaderSize = 36

// CMAVersion is the only CMA header version (CMA_VERSION).
const CMAVersion = 0

// CMAHeader is a view of a CMA header that ParseCMAHeader has checked.
type CMAHeader []byte

// ParseCMAHeader returns the CMA header at the start of b (the private
// data of a REQ or SIDR_REQ) and its length.
func ParseCMAHeader(b []byte) (CMAHeader, int, error) {
	if len(b) < CMAHeaderSize {
		return nil, 0, errShortCMA
	}
	if b[0] != CMAVersion {
		return nil, 0, errCMAVersion
	}
	switch b[1] {
	case 0x40:
		var zero [12]byte
		if [12]byte(b[4:16]) != zero || [12]byte(b[20:32]) != zero {
			return nil, 0, errCMAAddress
		}
	case 0x60:
	default:
		return nil, 0, errCMAIPVersion
	}
	return CMAHeader(b[:CMAHeaderSize]), CMAHeaderSize, nil
}

func (h CMAHeader) IsValid() bool    { return len(h) >= CMAHeaderSize }
func (h CMAHeader) Version() uint8   { return h[0] }
func (h CMAHeader) IPVersion() uint8 { return h[1] >> 4 }
func (h CMAHeader) Port() uint16     { return binary.BigEndian.Uint16(h[2:]) }

// Src returns the source (active side) address.
func (h CMAHeader) Src() netip.Addr { return h.addr(h[4:20]) }

// Dst returns the destination (passive side) address.
func (h CMAHeader) Dst() netip.Addr { return h.addr(h[20:36]) }

func (h CMAHeader) addr(b []byte) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	return netip.AddrFrom16([16]byte(b))
}

// Src returns the source address and port.
func (h CMAHeader) SrcAddrPort() netip.AddrPort { return netip.AddrPortFrom(h.Src(), h.Port()) }

// Fields returns the fields of h.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{Version: h.Version(), IPVersion: h.IPVersion(), Port: h.Port(), Src: h.Src(), Dst: h.Dst()}
}

// CMAHeaderFields holds the fields of a CMA header.
type CMAHeaderFields struct {
	Version   uint8  // CMAVersion
	IPVersion uint8  // 4 or 6
	Port      uint16 // the active side's port
	Src, Dst  netip.Addr
}

// NewCMAHeader returns the header rdma_cm's active side sends from src
// (bound to port) to dst: IPv4 when src is IPv4 or IPv4-mapped, else IPv6.
func NewCMAHeader(port uint16, src, dst netip.Addr) CMAHeaderFields {
	v := uint8(6)
	if src.Unmap().Is4() {
		v = 4
		src, dst = src.Unmap(), dst.Unmap()
	}
	return CMAHeaderFields{Version: CMAVersion, IPVersion: v, Port: port, Src: src, Dst: dst}
}

// Len returns CMAHeaderSize.
func (CMAHeaderFields) Len() int { return CMAHeaderSize }

// Append appends the 36-byte header to b. With IPVersion 4 each address
// is written as 12 zero bytes and its last 4 bytes (an IPv4 or
// IPv4-mapped address gives its IPv4 bytes); otherwise as its 16-byte form.
// An invalid (zero) netip.Addr is written as zeros.
func (f CMAHeaderFields) Append(b []byte) []byte {
	b = append(b, f.Version, f.IPVersion<<4)
	b = binary.BigEndian.AppendUint16(b, f.Port)
	for _, a := range [2]netip.Addr{f.Src, f.Dst} {
		a16 := a.As16()
		if f.IPVersion == 4 {
			clear(a16[:12])
		}
		b = append(b, a16[:]...)
	}
	return b
}
