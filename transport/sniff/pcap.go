package sniff

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Link types (the pcap "network" field) understood by this package. See
// https://www.tcpdump.org/linktypes.html.
const (
	LinkTypeEthernet = 1   // LINKTYPE_ETHERNET: IEEE 802.3 frame without FCS
	LinkTypeRaw      = 101 // LINKTYPE_RAW: bare IPv4 or IPv6 packet
	LinkTypeLinuxSLL = 113 // LINKTYPE_LINUX_SLL: Linux cooked capture v1
)

// File-format constants of classic pcap.
const (
	magicMicro = 0xa1b2c3d4 // microsecond timestamps
	magicNano  = 0xa1b23c4d // nanosecond timestamps

	versionMajor = 2
	versionMinor = 4

	fileHeaderLen   = 24
	recordHeaderLen = 16

	// Snaplen is the snapshot length written in the file header; it is
	// libpcap's MAXIMUM_SNAPLEN. Longer packets are truncated in the file.
	Snaplen = 262144
)

// ErrFormat reports a stream that is not a well-formed classic pcap file.
// Errors returned by [NewReader] and [Reader.Next] wrap it.
var ErrFormat = errors.New("sniff: malformed pcap")

// Writer writes a classic pcap stream with microsecond timestamps in the
// machine-independent little-endian byte order. A Writer is not safe for
// concurrent use; see [Recorder].
type Writer struct {
	w   io.Writer
	hdr [recordHeaderLen]byte
}

// NewWriter writes the pcap file header for linktype (for example
// [LinkTypeRaw]) to w and returns a Writer for the packet records.
func NewWriter(w io.Writer, linktype int) (*Writer, error) {
	if linktype < 0 || linktype > 0xffff {
		return nil, fmt.Errorf("sniff: link type %d out of range", linktype)
	}
	var h [fileHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], magicMicro)
	binary.LittleEndian.PutUint16(h[4:], versionMajor)
	binary.LittleEndian.PutUint16(h[6:], versionMinor)
	// thiszone (8:12) and sigfigs (12:16) are zero.
	binary.LittleEndian.PutUint32(h[16:], Snaplen)
	binary.LittleEndian.PutUint32(h[20:], uint32(linktype))
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("sniff: write file header: %w", err)
	}
	return &Writer{w: w}, nil
}

// WritePacket writes one packet record captured at ts. The timestamp is
// stored with microsecond precision as an unsigned 32-bit Unix time, so it
// must lie between 1970 and 2106. Packets longer than [Snaplen] are
// truncated, with their original length recorded. data is not retained.
// WritePacket does not allocate.
func (w *Writer) WritePacket(ts time.Time, data []byte) error {
	orig := len(data)
	if len(data) > Snaplen {
		data = data[:Snaplen]
	}
	binary.LittleEndian.PutUint32(w.hdr[0:], uint32(ts.Unix()))
	binary.LittleEndian.PutUint32(w.hdr[4:], uint32(ts.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(w.hdr[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(w.hdr[12:], uint32(orig))
	if _, err := w.w.Write(w.hdr[:]); err != nil {
		return fmt.Errorf("sniff: write record header: %w", err)
	}
	if _, err := w.w.Write(data); err != nil {
		return fmt.Errorf("sniff: write packet: %w", err)
	}
	return nil
}

// Packet is one record read by [Reader.Next].
type Packet struct {
	Timestamp time.Time
	LinkType  int
	// Data holds the captured bytes. It is valid until the next call to
	// [Reader.Next].
	Data []byte
	// OrigLen is the length of the packet on the wire; it exceeds len(Data)
	// when the capture truncated the packet.
	OrigLen int
}

// Reader reads a classic pcap stream (not pcapng). It accepts both byte
// orders and both microsecond and nanosecond timestamp magics. A Reader is
// not safe for concurrent use.
type Reader struct {
	r        io.Reader
	order    binary.ByteOrder
	nano     bool
	linktype int
	hdr      [recordHeaderLen]byte
	buf      []byte
}

// NewReader reads and checks the pcap file header from r.
func NewReader(r io.Reader) (*Reader, error) {
	var h [fileHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: file header: %w", ErrFormat, err)
	}
	rd := &Reader{r: r}
	switch le, be := binary.LittleEndian.Uint32(h[0:]), binary.BigEndian.Uint32(h[0:]); {
	case le == magicMicro:
		rd.order = binary.LittleEndian
	case le == magicNano:
		rd.order, rd.nano = binary.LittleEndian, true
	case be == magicMicro:
		rd.order = binary.BigEndian
	case be == magicNano:
		rd.order, rd.nano = binary.BigEndian, true
	case be == 0x0a0d0d0a:
		return nil, fmt.Errorf("%w: pcapng is not supported (convert with editcap -F pcap)", ErrFormat)
	default:
		return nil, fmt.Errorf("%w: bad magic %#08x", ErrFormat, be)
	}
	if major := rd.order.Uint16(h[4:]); major != versionMajor {
		return nil, fmt.Errorf("%w: unsupported version %d.%d", ErrFormat, major, rd.order.Uint16(h[6:]))
	}
	// The low 16 bits are the link type; the upper bits may carry FCS
	// information, which is ignored.
	rd.linktype = int(rd.order.Uint32(h[20:]) & 0xffff)
	return rd, nil
}

// LinkType returns the link type from the file header.
func (r *Reader) LinkType() int { return r.linktype }

// Next returns the next packet record. At the clean end of the stream it
// returns io.EOF; a record cut short returns an error wrapping both
// [ErrFormat] and io.ErrUnexpectedEOF. Records claiming more than [Snaplen]
// bytes (libpcap's own limit) are rejected with [ErrFormat], whatever the
// file header's snaplen says, so garbage cannot cause a huge allocation.
func (r *Reader) Next() (Packet, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.EOF {
			return Packet{}, io.EOF
		}
		return Packet{}, fmt.Errorf("%w: record header: %w", ErrFormat, err)
	}
	sec := r.order.Uint32(r.hdr[0:])
	frac := r.order.Uint32(r.hdr[4:])
	incl := r.order.Uint32(r.hdr[8:])
	orig := r.order.Uint32(r.hdr[12:])
	if incl > Snaplen {
		return Packet{}, fmt.Errorf("%w: record length %d exceeds %d", ErrFormat, incl, Snaplen)
	}
	if cap(r.buf) < int(incl) {
		r.buf = make([]byte, incl)
	}
	data := r.buf[:incl]
	if _, err := io.ReadFull(r.r, data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Packet{}, fmt.Errorf("%w: record data: %w", ErrFormat, err)
	}
	nsec := int64(frac)
	if !r.nano {
		nsec *= 1000
	}
	return Packet{
		Timestamp: time.Unix(int64(sec), nsec),
		LinkType:  r.linktype,
		Data:      data,
		OrigLen:   int(orig),
	}, nil
}
