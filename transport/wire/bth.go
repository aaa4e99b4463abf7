package wire

// Base Transport Header (IBTA vol. 1 §9.2), 12 bytes:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad|  TVer |            P_Key              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|   Resv6   |                 Destination QP                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|    Resv7    |                      PSN                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

import "encoding/binary"

// BTHSize is the length of a BTH.
const BTHSize = 12

const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthFB     = 4
	bthDestQP = 4 // 24 bits at 5..7, read as a word and masked
	bthAck    = 8 // AckReq bit + 24-bit PSN at 9..11
)

// BTH is a view of a Base Transport Header. It must be at least BTHSize
// bytes long; ParseBTH returns one that is.
type BTH []byte

// ParseBTH returns the BTH at the start of b and its length.
func ParseBTH(b []byte) (BTH, int, error) {
	if len(b) < BTHSize {
		return nil, 0, errShort
	}
	return BTH(b[:BTHSize]), BTHSize, nil
}

func (h BTH) Opcode() Opcode { return Opcode(h[bthOpcode]) }
func (h BTH) SE() bool       { return h[bthFlags]&0x80 != 0 }
func (h BTH) MigReq() bool   { return h[bthFlags]&0x40 != 0 }
func (h BTH) PadCnt() int    { return int(h[bthFlags]>>4) & 3 }
func (h BTH) TVer() uint8    { return h[bthFlags] & 0x0F }
func (h BTH) PKey() uint16   { return binary.BigEndian.Uint16(h[bthPKey:]) }
func (h BTH) FECN() bool     { return h[bthFB]&0x80 != 0 }
func (h BTH) BECN() bool     { return h[bthFB]&0x40 != 0 }
func (h BTH) Resv6() uint8   { return h[bthFB] & 0x3F }
func (h BTH) DestQP() QPN    { return QPN(binary.BigEndian.Uint32(h[bthDestQP:]) & 0xFFFFFF) }
func (h BTH) AckReq() bool   { return h[bthAck]&0x80 != 0 }
func (h BTH) Resv7() uint8   { return h[bthAck] & 0x7F }
func (h BTH) PSN() PSN       { return PSN(binary.BigEndian.Uint32(h[bthAck:]) & PSNMask) }
func (h BTH) SetPSN(p PSN) {
	binary.BigEndian.PutUint32(h[bthAck:], uint32(h[bthAck])<<24|uint32(p&PSNMask))
}
func (h BTH) SetAckReq(on bool) { h[bthAck] = h[bthAck]&0x7F | b2u8(on)<<7 }

// IsValid reports whether h is long enough and has transport version 0.
func (h BTH) IsValid() bool { return len(h) >= BTHSize && h.TVer() == 0 }

// Fields returns the decoded fields of h.
func (h BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: h.Opcode(), SE: h.SE(), MigReq: h.MigReq(), PadCnt: uint8(h.PadCnt()), TVer: h.TVer(),
		PKey: h.PKey(), FECN: h.FECN(), BECN: h.BECN(), Resv6: h.Resv6(),
		DestQP: h.DestQP(), AckReq: h.AckReq(), Resv7: h.Resv7(), PSN: h.PSN(),
	}
}

// BTHFields holds the fields of a BTH. Reserved fields are kept so that a
// parsed header re-encodes to the same bytes.
type BTHFields struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PadCnt uint8 // 0..3
	TVer   uint8 // 0..15, must be 0
	PKey   uint16
	FECN   bool
	BECN   bool
	Resv6  uint8 // 6 bits
	DestQP QPN
	AckReq bool
	Resv7  uint8 // 7 bits
	PSN    PSN
}

// Len returns BTHSize.
func (BTHFields) Len() int { return BTHSize }

// Append appends the encoded BTH to b. Out-of-range values are truncated to
// their field widths.
func (f BTHFields) Append(b []byte) []byte {
	return append(b,
		byte(f.Opcode),
		b2u8(f.SE)<<7|b2u8(f.MigReq)<<6|(f.PadCnt&3)<<4|f.TVer&0x0F,
		byte(f.PKey>>8), byte(f.PKey),
		b2u8(f.FECN)<<7|b2u8(f.BECN)<<6|f.Resv6&0x3F,
		byte(f.DestQP>>16), byte(f.DestQP>>8), byte(f.DestQP),
		b2u8(f.AckReq)<<7|f.Resv7&0x7F,
		byte(f.PSN>>16), byte(f.PSN>>8), byte(f.PSN),
	)
}

func b2u8(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}
