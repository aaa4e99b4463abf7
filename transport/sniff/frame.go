package sniff

import (
	"encoding/binary"
	"net/netip"
)

// Header sizes and protocol numbers used by the frame builder and decoder.
const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	ethHeaderLen  = 14
	vlanTagLen    = 4
	sllHeaderLen  = 16

	protoUDP = 17

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100 // IEEE 802.1Q
	etherTypeQinQ = 0x88a8 // IEEE 802.1ad service tag

	// MaxUDPPayloadIPv4 and MaxUDPPayloadIPv6 are the largest UDP payloads
	// whose lengths fit the IPv4 total-length and IPv6 payload-length
	// fields.
	MaxUDPPayloadIPv4 = 0xffff - ipv4HeaderLen - udpHeaderLen
	MaxUDPPayloadIPv6 = 0xffff - udpHeaderLen

	defaultTTL = 64
)

// AppendUDPFrame appends to b a raw IP packet (LINKTYPE_RAW) carrying
// payload in a UDP datagram from src to dst, and returns the extended slice.
//
// If both addresses are IPv4 (or IPv4-mapped IPv6) the packet is IPv4: IHL 5,
// TOS 0, the given ipID, DF set, TTL 64 and a correct header checksum;
// this is the header rdma_rxe sends. Otherwise it is IPv6 with traffic class
// and flow label 0, hop limit 64, and addresses in their 16-byte form
// (ipID is unused). The UDP checksum is 0 in both cases, as rdma_rxe sends
// it. The payload must not exceed [MaxUDPPayloadIPv4] or
// [MaxUDPPayloadIPv6]; longer payloads get wrapped length fields.
//
// AppendUDPFrame does not allocate when b has enough spare capacity:
// 28 bytes (IPv4) or 48 bytes (IPv6) plus len(payload).
func AppendUDPFrame(b []byte, src, dst netip.AddrPort, ipID uint16, payload []byte) []byte {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	udpLen := udpHeaderLen + len(payload)
	var off int
	if sa.Is4() && da.Is4() {
		b, off = grow(b, ipv4HeaderLen+udpLen)
		h := b[off : off+ipv4HeaderLen]
		h[0] = 4<<4 | ipv4HeaderLen/4
		h[1] = 0 // TOS
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], ipID)
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF, fragment offset 0
		h[8] = defaultTTL
		h[9] = protoUDP
		h[10], h[11] = 0, 0
		s4, d4 := sa.As4(), da.As4()
		copy(h[12:16], s4[:])
		copy(h[16:20], d4[:])
		binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
		off += ipv4HeaderLen
	} else {
		b, off = grow(b, ipv6HeaderLen+udpLen)
		h := b[off : off+ipv6HeaderLen]
		binary.BigEndian.PutUint32(h[0:], 6<<28) // traffic class 0, flow label 0
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = protoUDP
		h[7] = defaultTTL
		s16, d16 := src.Addr().As16(), dst.Addr().As16()
		copy(h[8:24], s16[:])
		copy(h[24:40], d16[:])
		off += ipv6HeaderLen
	}
	u := b[off : off+udpHeaderLen]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0 // no checksum
	copy(b[off+udpHeaderLen:], payload)
	return b
}

// grow extends b by n bytes and returns the new slice and the offset of
// the added bytes. The added bytes are not zeroed.
func grow(b []byte, n int) ([]byte, int) {
	off := len(b)
	if cap(b)-off < n {
		nb := make([]byte, off, 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:off+n], off
}

// ipv4Checksum returns the Internet checksum (RFC 1071) of h. With the
// checksum field zeroed it is the value to store; over a header carrying
// a correct checksum it is 0.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	if len(h)%2 == 1 {
		sum += uint32(h[len(h)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// DecodeUDP extracts a UDP datagram from a captured frame of the given link
// type: [LinkTypeEthernet] (optionally with one or two 802.1Q/802.1ad
// tags), [LinkTypeRaw] or [LinkTypeLinuxSLL]. It supports unfragmented IPv4
// (with or without options) and IPv6 without extension headers.
//
// On success ip holds the IP header, udp the 8-byte UDP header and payload
// the UDP payload as given by the UDP length field (link-layer padding is
// excluded); all three alias frame. ok is false for anything else,
// including truncated frames; DecodeUDP never panics and does not allocate.
func DecodeUDP(linktype int, frame []byte) (ip, udp, payload []byte, src, dst netip.AddrPort, ok bool) {
	var pkt []byte
	switch linktype {
	case LinkTypeEthernet:
		if len(frame) < ethHeaderLen {
			return
		}
		et := binary.BigEndian.Uint16(frame[12:])
		pkt = frame[ethHeaderLen:]
		for range 2 {
			if et != etherTypeVLAN && et != etherTypeQinQ {
				break
			}
			if len(pkt) < vlanTagLen {
				return
			}
			et = binary.BigEndian.Uint16(pkt[2:])
			pkt = pkt[vlanTagLen:]
		}
		if et != etherTypeIPv4 && et != etherTypeIPv6 {
			return
		}
	case LinkTypeRaw:
		pkt = frame
	case LinkTypeLinuxSLL:
		if len(frame) < sllHeaderLen {
			return
		}
		et := binary.BigEndian.Uint16(frame[14:])
		if et != etherTypeIPv4 && et != etherTypeIPv6 {
			return
		}
		pkt = frame[sllHeaderLen:]
	default:
		return
	}
	if len(pkt) < 1 {
		return
	}
	var seg []byte // UDP header + payload, as bounded by the IP length
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < ipv4HeaderLen {
			return
		}
		ihl := int(pkt[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(pkt[2:]))
		flags := binary.BigEndian.Uint16(pkt[6:])
		if ihl < ipv4HeaderLen || total < ihl || total > len(pkt) ||
			flags&0x3fff != 0 || // MF set or non-zero fragment offset
			pkt[9] != protoUDP {
			return
		}
		ip = pkt[:ihl:ihl]
		seg = pkt[ihl:total]
		src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(pkt[12:16])), 0)
		dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(pkt[16:20])), 0)
	case 6:
		if len(pkt) < ipv6HeaderLen {
			return
		}
		plen := int(binary.BigEndian.Uint16(pkt[4:]))
		if pkt[6] != protoUDP || plen == 0 || ipv6HeaderLen+plen > len(pkt) {
			return
		}
		ip = pkt[:ipv6HeaderLen:ipv6HeaderLen]
		seg = pkt[ipv6HeaderLen : ipv6HeaderLen+plen]
		src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(pkt[8:24])), 0)
		dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(pkt[24:40])), 0)
	default:
		return
	}
	if len(seg) < udpHeaderLen {
		return nil, nil, nil, netip.AddrPort{}, netip.AddrPort{}, false
	}
	ulen := int(binary.BigEndian.Uint16(seg[4:]))
	if ulen < udpHeaderLen || ulen > len(seg) {
		return nil, nil, nil, netip.AddrPort{}, netip.AddrPort{}, false
	}
	udp = seg[:udpHeaderLen:udpHeaderLen]
	payload = seg[udpHeaderLen:ulen:ulen]
	src = netip.AddrPortFrom(src.Addr(), binary.BigEndian.Uint16(seg[0:]))
	dst = netip.AddrPortFrom(dst.Addr(), binary.BigEndian.Uint16(seg[2:]))
	return ip, udp, payload, src, dst, true
}
