package cmwire

// A path as a REQ carries it (IBTA vol. 1 §12.6.5), 44 bytes: the primary
// path at REQ body offset 52, the alternate path at 96. Offsets below are
// relative to the start of the path.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        Local Port LID         |        Remote Port LID        |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Local Port GID (128) ...                       |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Remote Port GID (128) ...                      | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Flow Label (20)            |  Rsv 6    | Rate (6)  | 36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Traffic Class |   Hop Limit   |SL (4) |S|Rsv| AckTO (5)|Rsv  | 40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S is Subnet Local. On RoCEv2 the kernel sends LIDs 0xFFFF, the GIDs as
// IPv4-mapped addresses, hop limit 64 and Subnet Local 0; the alternate
// path is all zero. In the alternate path, bit 0x04 of the last byte is
// "SAP supported" in newer kernels' tables; here it is part of ReservedACK.

import (
	"encoding/binary"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// PathSize is the size of a REQ path.
const PathSize = 44

// Path is a view of a 44-byte REQ path.
type Path []byte

// ParsePath returns the path at the start of b and its length.
func ParsePath(b []byte) (Path, int, error) {
	if len(b) < PathSize {
		return nil, 0, errShortPath
	}
	return Path(b[:PathSize]), PathSize, nil
}

func (p Path) IsValid() bool     { return len(p) >= PathSize }
func (p Path) LocalLID() uint16  { return binary.BigEndian.Uint16(p[0:]) }
func (p Path) RemoteLID() uint16 { return binary.BigEndian.Uint16(p[2:]) }
func (p Path) LocalGID() wire.GID {
	return wire.GID(p[4:20])
}
func (p Path) RemoteGID() wire.GID {
	return wire.GID(p[20:36])
}

// FlowLabel returns the top 20 bits of the big-endian word at offset 36.
func (p Path) FlowLabel() uint32        { return binary.BigEndian.Uint32(p[36:]) >> 12 }
func (p Path) Reserved6() uint8         { return uint8(binary.BigEndian.Uint16(p[38:])>>6) & 0x3F }
func (p Path) PacketRate() uint8        { return p[39] & 0x3F }
func (p Path) TrafficClass() uint8      { return p[40] }
func (p Path) HopLimit() uint8          { return p[41] }
func (p Path) SL() uint8                { return p[42] >> 4 }
func (p Path) SubnetLocal() bool        { return p[42]&0x08 != 0 }
func (p Path) ReservedSL() uint8        { return p[42] & 0x07 }
func (p Path) LocalACKTimeout() Timeout { return Timeout(p[43] >> 3) }
func (p Path) ReservedACK() uint8       { return p[43] & 0x07 }

// Fields returns the fields of p.
func (p Path) Fields() PathFields {
	return PathFields{
		LocalLID: p.LocalLID(), RemoteLID: p.RemoteLID(),
		LocalGID: p.LocalGID(), RemoteGID: p.RemoteGID(),
		FlowLabel: p.FlowLabel(), Reserved6: p.Reserved6(), PacketRate: p.PacketRate(),
		TrafficClass: p.TrafficClass(), HopLimit: p.HopLimit(),
		SL: p.SL(), SubnetLocal: p.SubnetLocal(), ReservedSL: p.ReservedSL(),
		LocalACKTimeout: p.LocalACKTimeout(), ReservedACK: p.ReservedACK(),
	}
}

// PathFields holds the fields of a REQ path. Append keeps only the low
// bits of each field that fit its width; reserved fields are sent as 0.
type PathFields struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        wire.GID // the REQ sender's GID
	RemoteGID       wire.GID
	FlowLabel       uint32 // 20 bits
	Reserved6       uint8  // 6 bits
	PacketRate      uint8  // 6 bits, ib_rate enum
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	ReservedSL      uint8   // 3 bits
	LocalACKTimeout Timeout // 5 bits
	ReservedACK     uint8   // 3 bits
}

// Len returns PathSize.
func (PathFields) Len() int { return PathSize }

// Append appends the encoded path to b.
func (f PathFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, f.LocalLID)
	b = binary.BigEndian.AppendUint16(b, f.RemoteLID)
	b = append(b, f.LocalGID[:]...)
	b = append(b, f.RemoteGID[:]...)
	b = binary.BigEndian.AppendUint32(b, (f.FlowLabel&0xFFFFF)<<12|uint32(f.Reserved6&0x3F)<<6|uint32(f.PacketRate&0x3F))
	return append(b, f.TrafficClass, f.HopLimit,
		f.SL<<4|bit(f.SubnetLocal, 0x08)|f.ReservedSL&0x07,
		uint8(f.LocalACKTimeout&0x1F)<<3|f.ReservedACK&0x07)
}

// bit returns mask when v is true, else 0.
func bit(v bool, mask uint8) uint8 {
	if v {
		return mask
	}
	return 0
}

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func append24(b []byte, v uint32) []byte { return append(b, byte(v>>16), byte(v>>8), byte(v)) }
