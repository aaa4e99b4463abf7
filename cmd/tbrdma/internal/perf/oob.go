package perf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Version is the perftest version tbrdma announces in the version exchange.
// It is what Debian 12's perftest 4.5 sends ("6.06"): old enough that a
// newer perftest (≥ 6.28) skips its negotiation blob, which tbrdma does not
// speak, and new enough for the 8-byte iteration count and 2-byte MTU
// messages.
const Version = "6.06"

// Message sizes of perftest's TCP exchange.
const (
	versionLen = 16
	keyLen     = 108 // the GID variant of the key message, with its NUL
)

// Comm is one end of perftest's out-of-band TCP exchange (ethernet mode, no
// rdma_cm). There is no framing: every exchange has a size both sides know.
// The client writes first and then reads; the server reads and then writes.
type Comm struct {
	rw     io.ReadWriter
	server bool
	// RemoteVersion is the peer's version string, after ExchangeVersions.
	RemoteVersion string
}

// NewComm returns a Comm on an established connection.
func NewComm(rw io.ReadWriter, server bool) *Comm { return &Comm{rw: rw, server: server} }

// Server reports whether this end is the server.
func (c *Comm) Server() bool { return c.server }

// xchg sends out and receives len(in) bytes, in the order of this end's role.
func (c *Comm) xchg(out, in []byte) error {
	if c.server {
		if _, err := io.ReadFull(c.rw, in); err != nil {
			return err
		}
		_, err := c.rw.Write(out)
		return err
	}
	if _, err := c.rw.Write(out); err != nil {
		return err
	}
	_, err := io.ReadFull(c.rw, in)
	return err
}

// ExchangeVersions sends Version and reads the peer's version string.
func (c *Comm) ExchangeVersions() (string, error) {
	out := make([]byte, versionLen)
	copy(out, Version)
	in := make([]byte, versionLen)
	if err := c.xchg(out, in); err != nil {
		return "", fmt.Errorf("version exchange: %w", err)
	}
	if i := bytes.IndexByte(in, 0); i >= 0 {
		in = in[:i]
	}
	c.RemoteVersion = string(in)
	v, err := strconv.ParseFloat(c.RemoteVersion, 64)
	if err != nil {
		return c.RemoteVersion, fmt.Errorf("version exchange: peer sent %q, not a perftest version", c.RemoteVersion)
	}
	if v < 5.70 {
		return c.RemoteVersion, fmt.Errorf("version exchange: peer perftest %s is older than 5.70, which is not supported", c.RemoteVersion)
	}
	return c.RemoteVersion, nil
}

// ExchangeSysData exchanges page size and cache line size (4-byte
// big-endian each) and returns the larger of each pair.
func (c *Comm) ExchangeSysData(pageSize, cacheLine int) (int, int, error) {
	vals := [2]int{pageSize, cacheLine}
	for i, v := range vals {
		out := binary.BigEndian.AppendUint32(nil, uint32(v))
		in := make([]byte, 4)
		if err := c.xchg(out, in); err != nil {
			return 0, 0, fmt.Errorf("system data exchange: %w", err)
		}
		vals[i] = max(v, int(binary.BigEndian.Uint32(in)))
	}
	return vals[0], vals[1], nil
}

// ExchangeMTU exchanges the active MTU as the ASCII digit of its ibverbs
// enum (1=256 … 5=4096) and a NUL, and returns the smaller one.
func (c *Comm) ExchangeMTU(mtu int) (int, error) {
	out := []byte{byte('0' + mtu), 0}
	in := make([]byte, 2)
	if err := c.xchg(out, in); err != nil {
		return 0, fmt.Errorf("MTU exchange: %w", err)
	}
	rem := int(in[0]) - '0'
	if rem < 1 || rem > 5 {
		return 0, fmt.Errorf("MTU exchange: peer sent %q, not an MTU", in)
	}
	return min(mtu, rem), nil
}

// Dest is perftest's description of a QP and its buffer (struct
// pingpong_dest), as the key message carries it.
type Dest struct {
	LID      uint16
	OutReads uint16
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// MarshalKey returns the 108-byte key message of the GID variant:
// "LID:OUT:QPN:PSN:RKEY:VADDR:" + 16 GID bytes as "xx:" + "SRQN:" + NUL.
func (d Dest) MarshalKey() []byte {
	b := make([]byte, 0, keyLen)
	b = fmt.Appendf(b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xFFFFFF, d.PSN&0xFFFFFF, d.RKey, d.VAddr)
	for _, x := range d.GID {
		b = fmt.Appendf(b, "%02x:", x)
	}
	b = fmt.Appendf(b, "%08x:", d.SRQN)
	return append(b, 0)
}

// ParseKey parses a key message of either variant (59 or 108 bytes).
func ParseKey(b []byte) (Dest, error) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	f := strings.Split(strings.TrimSuffix(string(b), ":"), ":")
	if len(f) != 7 && len(f) != 23 {
		return Dest{}, fmt.Errorf("malformed perftest key message %q", b)
	}
	var v [7]uint64
	widths := [...]int{16, 16, 24, 24, 32, 64, 32}
	idx := [...]int{0, 1, 2, 3, 4, 5, len(f) - 1}
	for i, w := range widths {
		x, err := strconv.ParseUint(f[idx[i]], 16, w)
		if err != nil {
			return Dest{}, fmt.Errorf("malformed perftest key message %q: field %d: %w", b, idx[i]+1, err)
		}
		v[i] = x
	}
	d := Dest{LID: uint16(v[0]), OutReads: uint16(v[1]), QPN: uint32(v[2]), PSN: uint32(v[3]), RKey: uint32(v[4]), VAddr: v[5], SRQN: uint32(v[6])}
	if len(f) == 23 {
		for i := range d.GID {
			x, err := strconv.ParseUint(f[6+i], 16, 8)
			if err != nil {
				return Dest{}, fmt.Errorf("malformed perftest key message %q: GID: %w", b, err)
			}
			d.GID[i] = byte(x)
		}
	}
	return d, nil
}

// HandShake exchanges key messages (GID variant): the real exchange of QP
// descriptions and, with the same content, every later synchronisation.
func (c *Comm) HandShake(my Dest) (Dest, error) {
	in := make([]byte, keyLen)
	if err := c.xchg(my.MarshalKey(), in); err != nil {
		return Dest{}, fmt.Errorf("key exchange: %w", err)
	}
	return ParseKey(in)
}

// BWReport is what perftest's bandwidth tests exchange at the end.
type BWReport struct {
	Size    uint64
	Iters   uint64
	Peak    float64 // MiB/s (or Gb/s with --report_gbits)
	Average float64
	MsgRate float64 // Mpps
}

// ExchangeBWReport exchanges reports field by field (8 bytes each,
// big-endian; floats as their IEEE-754 bits).
func (c *Comm) ExchangeBWReport(my BWReport) (BWReport, error) {
	out := [5]uint64{my.Size, my.Iters, math.Float64bits(my.Peak), math.Float64bits(my.Average), math.Float64bits(my.MsgRate)}
	var in [5]uint64
	for i := range out {
		b := make([]byte, 8)
		if err := c.xchg(binary.BigEndian.AppendUint64(nil, out[i]), b); err != nil {
			return BWReport{}, fmt.Errorf("report exchange: %w", err)
		}
		in[i] = binary.BigEndian.Uint64(b)
	}
	return BWReport{Size: in[0], Iters: in[1], Peak: math.Float64frombits(in[2]),
		Average: math.Float64frombits(in[3]), MsgRate: math.Float64frombits(in[4])}, nil
}

// Close is perftest's ctx_close_connection: one more key exchange, then
// both ends write "done" (with its NUL) and close without reading it.
func (c *Comm) Close(my Dest) error {
	if _, err := c.HandShake(my); err != nil {
		return fmt.Errorf("closing handshake: %w", err)
	}
	if _, err := c.rw.Write([]byte("done\x00")); err != nil {
		return fmt.Errorf("closing handshake: %w", err)
	}
	return nil
}
