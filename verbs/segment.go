package verbs

import (
	"fmt"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// Large segments: a tbrdma extension (docs/wire-format.md, "Large-segment
// mode"). An RC or UC QP whose INIT→RTR transition sets QPAttrSegmentSize
// sends and accepts packets of up to SegmentSize payload bytes instead of
// the path MTU's at most 4096. Nothing on the wire changes except the
// payload length: the opcodes, headers and ICRC are those of RoCEv2, and
// the size rules of the path MTU (every FIRST and MIDDLE packet exactly
// one MTU, ONLY and LAST at most one) apply with SegmentSize as the MTU.
// A stock peer (rdma_rxe) drops such packets as too long, so both ends
// must agree on it out of band (the CLI's --large-segments, the CM private
// data trailer of package rdmacm); a QP never uses it on its own.

// Segment size limits of the extension.
const (
	// MinSegmentSize is the smallest segment size: larger than the largest
	// IB MTU, or the extension would mean nothing.
	MinSegmentSize = 8192
	// SegmentSizeLimit is the largest segment size: 15 × 4096 bytes. The
	// largest packet (48 header bytes, 3 pad bytes, 4 ICRC bytes) is then
	// 61495 bytes of UDP payload, which fits one IPv4 or IPv6 UDP
	// datagram (65507 / 65527 bytes) and a 65520-byte link MTU such as
	// thunderbolt-net's.
	SegmentSizeLimit = 15 * 4096
	// segmentOverhead is what a packet adds to its payload on the link:
	// IPv6 and UDP headers, the largest RoCE header, pad and ICRC.
	segmentOverhead = 40 + 8 + wire.MaxHeaderRoom + 3 + wire.ICRCSize
)

// SegmentSizeForLink returns the largest segment size whose packets fit a
// link MTU (a multiple of 4096, at most SegmentSizeLimit), or 0 when the
// link cannot carry any segment larger than an IB MTU. For
// thunderbolt-net's 65520 bytes it is 61440; for a 9000-byte jumbo link
// 8192.
func SegmentSizeForLink(linkMTU int) int {
	n := (linkMTU - segmentOverhead) / 4096 * 4096
	n = min(n, SegmentSizeLimit)
	if n < MinSegmentSize {
		return 0
	}
	return n
}

// ValidSegmentSize reports whether n is a segment size the extension
// allows: a multiple of 4096 from MinSegmentSize to SegmentSizeLimit.
func ValidSegmentSize(n int) bool {
	return n >= MinSegmentSize && n <= SegmentSizeLimit && n%4096 == 0
}

// SetMaxSegmentSize enables the large-segment extension on the context:
// QPs may then be given a SegmentSize up to n (0 turns it off for QPs
// configured later). The context's packet buffers grow to hold such
// packets, and its endpoint must be able to receive them: a UDP endpoint
// with GRO receives any datagram, one without GRO only up to its
// transport.Options.MaxPacketSize.
func (c *Context) SetMaxSegmentSize(n int) error {
	if n != 0 && !ValidSegmentSize(n) {
		return fmt.Errorf("verbs: segment size %d: want a multiple of 4096 from %d to %d (verbs.SegmentSizeForLink gives the largest for a link MTU): %w", n, MinSegmentSize, SegmentSizeLimit, ErrInvalidArgument)
	}
	if n != 0 {
		if lim, ok := hooks.MaxPacketSizeOf(c.conn); ok && lim < n+wire.MaxHeaderRoom+3+wire.ICRCSize {
			return fmt.Errorf("verbs: segment size %d: the endpoint receives datagrams of at most %d bytes (no UDP GRO here): open the context with Options.MaxSegmentSize set, or use a smaller segment size: %w", n, lim, ErrInvalidArgument)
		}
	}
	c.maxSeg.Store(int32(n))
	if b := int64(wire.MaxHeaderRoom + max(n, 4096) + 8); b > c.bufCap.Load() {
		c.bufCap.Store(b)
	}
	return nil
}

// MaxSegmentSize returns the largest segment size QPs of the context may
// use, or 0 when the large-segment extension is off (the default).
func (c *Context) MaxSegmentSize() int { return int(c.maxSeg.Load()) }
