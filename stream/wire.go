package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/tbrdma/tbrdma/verbs"
)

const (
	// magicV1 and magicV2 open the REQ's and the REP's private data: the
	// protocol version. "tbs2" is "tbs1" on QPs that both do selective
	// retransmission (verbs.QP.SetSelectiveRetransmit). A dialer offers
	// "tbs2"; the listener answers in the dialer's version, so an older
	// dialer ("tbs1") is still served, without it.
	magicV1 = "tbs1"
	magicV2 = "tbs2"
	// ringInfoSize is the private data: magic, ring address (u64), rkey
	// (u32), slot size (u32), slots (u32). 24 bytes fit a REQ even with a
	// pre-shared key (56 - 32).
	ringInfoSize = len(magicV1) + 8 + 4 + 4 + 4

	// MaxSlotSize is the largest slot (the immediate's length field).
	MaxSlotSize = 1<<24 - 1
	// MaxSlots is the largest ring.
	MaxSlots = 256

	// DefaultSlots and DefaultSlotSize are the receive ring a Dialer or
	// ListenConfig advertises when it names none.
	DefaultSlots    = 16
	DefaultSlotSize = 256 << 10

	msgSize = 28
	msgCred = 1
	msgFin  = 2
	msgAck  = 3

	ackOK       = 0
	ackMismatch = 1

	// Send WRIDs (receives use their buffer's index): data writes are
	// wridData + their sequence number.
	wridData  = 1 << 59
	wridProbe = 1 << 60
	wridCtrl  = 1 << 61
	wridFin   = 1 << 62
	wridAck   = 1<<62 | 1
)

// ringInfo is a receive ring as advertised in the REQ or REP, with the
// protocol version it came in.
type ringInfo struct {
	addr     uint64
	rkey     verbs.RKey
	slotSize int
	slots    int
	sr       bool // "tbs2": selective retransmission; else "tbs1"
}

func (r ringInfo) marshal() []byte {
	b := make([]byte, ringInfoSize)
	m := magicV1
	if r.sr {
		m = magicV2
	}
	n := copy(b, m)
	binary.BigEndian.PutUint64(b[n:], r.addr)
	binary.BigEndian.PutUint32(b[n+8:], uint32(r.rkey))
	binary.BigEndian.PutUint32(b[n+12:], uint32(r.slotSize))
	binary.BigEndian.PutUint32(b[n+16:], uint32(r.slots))
	return b
}

var errNotStream = errors.New("the peer is not a tbrdma stream endpoint (no " + magicV1 + " or " + magicV2 + " ring in its private data)")

func parseRingInfo(b []byte) (ringInfo, error) {
	if len(b) < ringInfoSize {
		return ringInfo{}, errNotStream
	}
	n := len(magicV1)
	var r ringInfo
	switch string(b[:n]) {
	case magicV1:
	case magicV2:
		r.sr = true
	default:
		return ringInfo{}, errNotStream
	}
	r.addr = binary.BigEndian.Uint64(b[n:])
	r.rkey = verbs.RKey(binary.BigEndian.Uint32(b[n+8:]))
	r.slotSize = int(binary.BigEndian.Uint32(b[n+12:]))
	r.slots = int(binary.BigEndian.Uint32(b[n+16:]))
	if r.slotSize < 1 || r.slotSize > MaxSlotSize || r.slots < 1 || r.slots > MaxSlots {
		return ringInfo{}, fmt.Errorf("the peer advertised an unusable ring (%d slots of %d bytes)", r.slots, r.slotSize)
	}
	return r, nil
}

// castagnoli is the CRC-32C table; hash/crc32 computes it with the CPU's
// CRC32 instruction where there is one (SSE 4.2, ARMv8).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// msg is a control message.
type msg struct {
	typ    uint32
	status uint32 // msgAck
	count  uint64 // msgCred: chunks consumed; msgFin, msgAck: chunks
	bytes  uint64 // msgFin, msgAck
	sum    uint32 // CRC-32C (Castagnoli) of the direction
}

func (m *msg) marshal(b []byte) {
	clear(b[:msgSize])
	binary.BigEndian.PutUint32(b[0:], m.typ)
	binary.BigEndian.PutUint32(b[4:], m.status)
	binary.BigEndian.PutUint64(b[8:], m.count)
	binary.BigEndian.PutUint64(b[16:], m.bytes)
	binary.BigEndian.PutUint32(b[24:], m.sum)
}

func parseMsg(b []byte) (msg, error) {
	if len(b) < msgSize {
		return msg{}, fmt.Errorf("protocol error: a %d-byte control message (want %d)", len(b), msgSize)
	}
	m := msg{
		typ:    binary.BigEndian.Uint32(b[0:]),
		status: binary.BigEndian.Uint32(b[4:]),
		count:  binary.BigEndian.Uint64(b[8:]),
		bytes:  binary.BigEndian.Uint64(b[16:]),
	}
	m.sum = binary.BigEndian.Uint32(b[24:])
	return m, nil
}
