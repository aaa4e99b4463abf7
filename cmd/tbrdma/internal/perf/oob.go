package perf

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// Comm is one end of perftest's out-of-band exchange: over TCP (ethernet
// mode, NewComm) or, with -R, in SENDs on an rdma_cm-connected RC QP
// (NewMsgComm). There is no framing: every exchange has a size both sides
// know. The client writes first and then reads; the server reads and then
// writes.
type Comm struct {
	conn   msgConn
	server bool
	// rdmaCM: the key messages are perftest's binary struct (BinaryKeyLen
	// bytes) and the closing handshake has no "done".
	rdmaCM bool
	// RemoteVersion is the peer's version string, after ExchangeVersions.
	RemoteVersion string
	// OfferSegment, when set before ExchangeVersions, is the large-segment
	// size in bytes (a multiple of 4096, 8192 … 61440) this end offers;
	// PeerSegment is then the size both agreed on, or 0 when the peer
	// made no offer (a stock perftest, or a tbrdma without the option).
	OfferSegment, PeerSegment int
	// OfferWindow, when set before ExchangeVersions, says that this end is
	// a tbrdma whose requester would use a wider send window toward a
	// tbrdma peer (TbrdmaWindow); PeerWindow is then whether the peer said
	// the same (a stock perftest never does).
	OfferWindow, PeerWindow bool
	// OfferSelective, when set with OfferWindow before ExchangeVersions,
	// says that this end's RC QPs do selective retransmission toward a
	// tbrdma peer that does too (verbs.QP.SetSelectiveRetransmit);
	// PeerSelective is then whether both ends do.
	OfferSelective, PeerSelective bool
	// Hint is tbrdma's test hint (docs/wire-format.md): a client sets it
	// before ExchangeVersions and sends it only when the server asks for
	// it, which only a tbrdma server does ("tbrdma serve", and a one-test
	// server, which checks it); on a server with AskHint set it
	// is, after ExchangeVersions, the hint the client sent ("" when the
	// client made none: a stock perftest).
	Hint    string
	AskHint bool
}

// The test-hint markers: a client with a hint puts hintOffer in the last
// two bytes of its version message, a tbrdma server answers with hintAsk
// there, and the client then sends the hint as a 2-byte big-endian length
// and that many bytes of text. A stock perftest sends and reads nothing
// else, and never sends hintAsk (its version string ends in a NUL well
// before byte 14).
const (
	hintOffer = "tq"
	hintAsk   = "th"
	// MaxHintLen bounds the hint a server accepts.
	MaxHintLen = 512
)

// hasMarker reports whether a version message carries marker m.
func hasMarker(b []byte, m string) bool {
	return len(b) == versionLen && string(b[versionLen-len(m):]) == m
}

// msgConn carries one exchange's messages.
type msgConn interface {
	send(b []byte) error
	// recv fills b with the next message, which must be len(b) bytes.
	recv(b []byte) error
}

// streamConn is a TCP connection: a message is its bytes, unframed.
type streamConn struct{ rw io.ReadWriter }

func (s streamConn) send(b []byte) error { _, err := s.rw.Write(b); return err }
func (s streamConn) recv(b []byte) error { return readFull(s.rw, b) }

// MsgConn carries whole messages, one per SEND, as perftest's rdma_cm mode
// does (QPChannel).
type MsgConn interface {
	// Send sends b as one message and returns once it is delivered.
	Send(b []byte) error
	// Recv returns the next message received.
	Recv() ([]byte, error)
}

type msgAdapter struct{ m MsgConn }

func (a msgAdapter) send(b []byte) error { return a.m.Send(b) }

func (a msgAdapter) recv(b []byte) error {
	m, err := a.m.Recv()
	if err != nil {
		return err
	}
	if len(m) != len(b) {
		return fmt.Errorf("the peer sent a %d-byte message where perftest %s sends %d (a different perftest version?)", len(m), Version, len(b))
	}
	copy(b, m)
	return nil
}

// NewComm returns a Comm on an established TCP connection.
func NewComm(rw io.ReadWriter, server bool) *Comm { return &Comm{conn: streamConn{rw}, server: server} }

// NewMsgComm returns a Comm for perftest's rdma_cm mode (-R): each message
// is one SEND on the connected "comm" QP, the key messages are binary.
func NewMsgComm(m MsgConn, server bool) *Comm {
	return &Comm{conn: msgAdapter{m}, server: server, rdmaCM: true}
}

// Server reports whether this end is the server.
func (c *Comm) Server() bool { return c.server }

// xchg sends out and receives len(in) bytes, in the order of this end's role.
func (c *Comm) xchg(out, in []byte) error {
	if c.server {
		if err := c.conn.recv(in); err != nil {
			return err
		}
		return c.conn.send(out)
	}
	if err := c.conn.send(out); err != nil {
		return err
	}
	return c.conn.recv(in)
}

// ExchangeVersions sends Version and reads the peer's version string.
//
// With OfferSegment set it also carries tbrdma's large-segment offer
// (docs/wire-format.md): after the version string's NUL, inside the same
// 16 bytes, "tbseg=" and the segment size in KiB, NUL-terminated. perftest
// reads the version up to its NUL, so a stock peer ignores the offer. A
// client offers; a server answers with its own offer only when the client
// offered one; the agreed size (PeerSegment) is the smaller of the two.
func (c *Comm) ExchangeVersions() (string, error) {
	out := make([]byte, versionLen)
	copy(out, Version)
	in := make([]byte, versionLen)
	put := func() {
		sr := c.OfferSelective && (c.OfferWindow || c.OfferSegment > 0)
		switch {
		case c.OfferSegment > 0 && sr: // implies the window offer
			copy(out[len(Version)+1:], fmt.Sprintf("%s=%d", selectiveOffer, c.OfferSegment/1024))
		case c.OfferSegment > 0:
			copy(out[len(Version)+1:], fmt.Sprintf("%s%d", segOffer, c.OfferSegment/1024))
		case c.OfferWindow && sr:
			copy(out[len(Version)+1:], selectiveOffer)
		case c.OfferWindow:
			copy(out[len(Version)+1:], windowOffer)
		}
	}
	var err error
	if c.server {
		if err = c.conn.recv(in); err == nil && LooksLikePingpong(in) {
			// Answered with a version, the client would read it as
			// the start of an address: the caller refuses it.
			err = ErrPingpongClient
		} else if err == nil {
			// Never offer what the client did not.
			seg, win, sr := parseOffer(in)
			if seg == 0 {
				c.OfferSegment = 0
			}
			c.OfferWindow = c.OfferWindow && win
			c.OfferSelective = c.OfferSelective && sr
			put()
			ask := c.AskHint && hasMarker(in, hintOffer)
			if ask {
				copy(out[versionLen-len(hintAsk):], hintAsk)
			}
			if err = c.conn.send(out); err == nil && ask {
				c.Hint, err = c.recvHint()
			}
		}
	} else {
		put()
		if c.Hint != "" {
			copy(out[versionLen-len(hintOffer):], hintOffer)
		}
		if err = c.xchg(out, in); err == nil && c.Hint != "" && hasMarker(in, hintAsk) {
			err = c.sendHint()
		}
	}
	if err != nil {
		return "", fmt.Errorf("version exchange: %w", err)
	}
	seg, win, sr := parseOffer(in)
	if c.OfferSegment > 0 && seg > 0 {
		c.PeerSegment = min(seg, c.OfferSegment)
	}
	c.PeerWindow = c.OfferWindow && win
	c.PeerSelective = c.PeerWindow && c.OfferSelective && sr
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

// ErrPingpongClient is a server's version exchange's error when the client
// sent an ibv_rc_pingpong address instead of a version message; nothing
// has been answered (a server answers it with Refuse).
var ErrPingpongClient = errors.New("the client sent a pingpong address, not a perftest version")

// sendHint sends c.Hint: its length (2 bytes, big-endian), then the text.
func (c *Comm) sendHint() error {
	if len(c.Hint) > MaxHintLen {
		return fmt.Errorf("test hint of %d bytes, more than %d", len(c.Hint), MaxHintLen)
	}
	b := binary.BigEndian.AppendUint16(nil, uint16(len(c.Hint)))
	return c.conn.send(append(b, c.Hint...))
}

// recvHint reads a hint sendHint sent.
func (c *Comm) recvHint() (string, error) {
	n := make([]byte, 2)
	if err := c.conn.recv(n); err != nil {
		return "", fmt.Errorf("test hint: %w", err)
	}
	l := int(binary.BigEndian.Uint16(n))
	if l == 0 || l > MaxHintLen {
		return "", fmt.Errorf("test hint of %d bytes: want 1..%d (not a tbrdma client?)", l, MaxHintLen)
	}
	b := make([]byte, l)
	if err := c.conn.recv(b); err != nil {
		return "", fmt.Errorf("test hint: %w", err)
	}
	return string(b), nil
}

// segOffer starts tbrdma's large-segment offer in the version message.
const segOffer = "tbseg="

// windowOffer, NUL-terminated right after the version string's NUL, says
// "a tbrdma, whose receiver takes TbrdmaWindow packets in flight" when
// there is no segment offer (which only a tbrdma makes, and which says the
// same).
const windowOffer = "tbw"

// TbrdmaWindow is the send window (in packets) a tbrdma requester uses
// toward a peer that made the window offer: rxe's 128 fills with two ACK
// intervals of 64 packets at 4096 bytes, 512 keeps eight in flight
// (docs/performance.md, docs/wire-format.md).
const TbrdmaWindow = 512

// SendWindow is the send window in packets of each of qps QPs toward a
// tbrdma peer that made the window offer, with packets of segment bytes
// (0: the path MTU): what one QP keeps in flight, TbrdmaWindow packets or
// with large segments segmentBudget bytes (the requester's own bound),
// shared among the QPs, and at least the 16 packets a window may be.
// Several QPs then keep no more in flight than one does; more overflowed
// the peer's socket buffer, and every loss costs a go-back-N resend
// (docs/performance.md, "Several QPs").
func SendWindow(qps, segment int) int {
	w := TbrdmaWindow
	if segment > 0 {
		w = min(w, segmentBudget/segment)
	}
	return max(w/max(qps, 1), 16)
}

// segmentBudget is how many bytes a QP with large segments keeps in
// flight at most (verbs bounds its requester so).
const segmentBudget = 6 << 20

// selectiveOffer, NUL-terminated right after the version string's NUL,
// says what windowOffer says and that the end's RC QPs do selective
// retransmission (docs/wire-format.md); "tbsr=N" says that and offers
// segments of N KiB, as segOffer does.
const selectiveOffer = "tbsr"

// parseOffer reads tbrdma's offer after the version string's NUL:
// windowOffer, selectiveOffer, segOffer+N or selectiveOffer+"="+N
// (NUL-terminated). It returns the segment size offered in bytes (0: none,
// or not a multiple of 4 KiB from 8 KiB to 60 KiB, which voids the whole
// offer), whether the window offer is made, and whether selective
// retransmission is.
func parseOffer(b []byte) (seg int, window, sr bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return 0, false, false
	}
	tok := b[i+1:]
	j := bytes.IndexByte(tok, 0)
	if j >= 0 {
		tok = tok[:j]
	}
	switch string(tok) {
	case windowOffer, selectiveOffer:
		if j < 0 {
			return 0, false, false // the bare words only NUL-terminated
		}
		return 0, true, string(tok) == selectiveOffer
	}
	rest, ok := bytes.CutPrefix(tok, []byte(segOffer))
	if !ok {
		if rest, ok = bytes.CutPrefix(tok, []byte(selectiveOffer+"=")); !ok {
			return 0, false, false
		}
		sr = true
	}
	if seg = parseKiB(rest); seg == 0 {
		return 0, false, false
	}
	return seg, true, sr
}

// parseKiB reads a segment size in KiB: 8 to 60, a multiple of 4; it
// returns the size in bytes, or 0.
func parseKiB(rest []byte) int {
	if len(rest) == 0 || len(rest) > 3 {
		return 0
	}
	kib := 0
	for _, d := range rest {
		if d < '0' || d > '9' {
			return 0
		}
		kib = kib*10 + int(d-'0')
	}
	if kib < 8 || kib > 60 || kib%4 != 0 {
		return 0
	}
	return kib * 1024
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
	// GIDIndex travels in the rdma_cm mode's binary key only.
	GIDIndex uint32
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

// BinaryKeyLen is the size of the key message in perftest 4.5's rdma_cm
// mode: its struct pingpong_dest as it lies in memory on LP64 (see
// MarshalBinaryKey).
const BinaryKeyLen = 56

// MarshalBinaryKey returns the key message of perftest's rdma_cm mode: the
// struct itself, integers big-endian (perftest converts each with htobe32
// or htobe64 before the SEND): lid, out_reads, qpn, psn, rkey (4 bytes
// each), 4 bytes of alignment padding, vaddr (8), the 16 GID bytes, srqn
// and gid_index (4 each). perftest 4.5 reads back lid … gid only.
func (d Dest) MarshalBinaryKey() []byte {
	b := make([]byte, 0, BinaryKeyLen)
	for _, v := range [...]uint32{uint32(d.LID), uint32(d.OutReads), d.QPN, d.PSN, d.RKey, 0} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = binary.BigEndian.AppendUint64(b, d.VAddr)
	b = append(b, d.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.SRQN)
	return binary.BigEndian.AppendUint32(b, d.GIDIndex)
}

// ParseBinaryKey parses a BinaryKeyLen-byte key message of the rdma_cm
// mode. The padding is ignored (perftest leaves it uninitialised).
func ParseBinaryKey(b []byte) (Dest, error) {
	if len(b) != BinaryKeyLen {
		return Dest{}, fmt.Errorf("malformed perftest rdma_cm key message: %d bytes, want %d", len(b), BinaryKeyLen)
	}
	u := func(off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
	if u(0) > 0xFFFF || u(4) > 0xFFFF || u(8) > 0xFFFFFF || u(12) > 0xFFFFFF {
		return Dest{}, fmt.Errorf("malformed perftest rdma_cm key message: LID %#x, out_reads %#x, QPN %#x, PSN %#x out of range", u(0), u(4), u(8), u(12))
	}
	d := Dest{LID: uint16(u(0)), OutReads: uint16(u(4)), QPN: u(8), PSN: u(12), RKey: u(16),
		VAddr: binary.BigEndian.Uint64(b[24:]), SRQN: u(48), GIDIndex: u(52)}
	copy(d.GID[:], b[32:48])
	return d, nil
}

// HandShake exchanges key messages (the GID variant over TCP, the binary
// struct with rdma_cm): the real exchange of QP descriptions and, with the
// same content, every later synchronisation.
func (c *Comm) HandShake(my Dest) (Dest, error) {
	if c.rdmaCM {
		in := make([]byte, BinaryKeyLen)
		if err := c.xchg(my.MarshalBinaryKey(), in); err != nil {
			return Dest{}, fmt.Errorf("key exchange: %w", err)
		}
		return ParseBinaryKey(in)
	}
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

// Plus is the row of a bidirectional test (-b), as perftest prints it on
// both sides: this side's size and iterations, the rates of both sides
// added up.
func (r BWReport) Plus(peer BWReport) BWReport {
	r.Peak += peer.Peak
	r.Average += peer.Average
	r.MsgRate += peer.MsgRate
	return r
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
	r := BWReport{Size: in[0], Iters: in[1], Peak: math.Float64frombits(in[2]),
		Average: math.Float64frombits(in[3]), MsgRate: math.Float64frombits(in[4])}
	// A client that runs another test sends something else here (a key
	// message: ASCII hex, a size of 0x30303030…); reading on would leave
	// both ends waiting for each other. (A server's report, which a
	// client ignores, may be all zeros: tbrdma's is.)
	if c.server && (r.Size == 0 || r.Size > maxReportSize) {
		return BWReport{}, fmt.Errorf("report exchange: the peer sent %q, not a bandwidth report (does it run another test? start both ends with the same command and flags)", binary.BigEndian.AppendUint64(nil, r.Size))
	}
	return r, nil
}

// maxReportSize bounds the message size of a plausible report (perftest's
// largest, 2^31 bytes).
const maxReportSize = 1 << 31

// Close is perftest's ctx_close_connection: one more key exchange, then
// over TCP both ends write "done" (with its NUL) and close without reading
// it; with rdma_cm nothing follows the key exchange.
func (c *Comm) Close(my Dest) error {
	if _, err := c.HandShake(my); err != nil {
		return fmt.Errorf("closing handshake: %w", err)
	}
	if c.rdmaCM {
		return nil
	}
	if err := c.conn.send([]byte("done\x00")); err != nil {
		return fmt.Errorf("closing handshake: %w", err)
	}
	return nil
}
