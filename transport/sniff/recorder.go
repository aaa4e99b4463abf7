package sniff

import (
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"
)

// Recorder writes UDP datagrams seen by a user-space endpoint to a pcap
// stream of link type [LinkTypeRaw], synthesising the IP and UDP headers
// with [AppendUDPFrame]. It is safe for concurrent use; records are written
// whole, one at a time. It does not buffer or close the underlying writer:
// wrap it in a bufio.Writer and flush it if needed.
type Recorder struct {
	mu  sync.Mutex
	w   *Writer
	buf []byte
}

// NewRecorder writes a pcap file header for [LinkTypeRaw] to w and returns
// a Recorder writing to it.
func NewRecorder(w io.Writer) (*Recorder, error) {
	pw, err := NewWriter(w, LinkTypeRaw)
	if err != nil {
		return nil, err
	}
	return &Recorder{w: pw, buf: make([]byte, 0, 2048)}, nil
}

// Record writes one UDP datagram from src to dst seen at ts. ipID is the
// IPv4 Identification to show (ignored for IPv6). udpPayload is not
// retained. Once its internal buffer has grown to the largest datagram
// seen, Record does not allocate.
func (r *Recorder) Record(ts time.Time, src, dst netip.AddrPort, ipID uint16, udpPayload []byte) error {
	limit := MaxUDPPayloadIPv6
	if src.Addr().Unmap().Is4() && dst.Addr().Unmap().Is4() {
		limit = MaxUDPPayloadIPv4
	}
	if len(udpPayload) > limit {
		return fmt.Errorf("sniff: UDP payload of %d bytes exceeds %d", len(udpPayload), limit)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = AppendUDPFrame(r.buf[:0], src, dst, ipID, udpPayload)
	return r.w.WritePacket(ts, r.buf)
}
