package wire

// Management datagram common header (IBTA vol. 1 §13.4.2), 24 bytes, at the
// start of every 256-byte MAD. On RoCEv2, MADs travel in UD SEND_ONLY
// packets to and from QP1 with Q_Key 0x80010000.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |  MgmtClass    | ClassVersion  |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     TransactionID (64)                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

import "encoding/binary"

// MAD sizes.
const (
	MADHeaderSize = 24
	MADSize       = 256
	MADDataSize   = MADSize - MADHeaderSize
)

// Management classes and methods used by connection management.
const (
	MgmtClassCM    = 0x07
	CMClassVersion = 2
	MethodGet      = 0x01
	MethodSet      = 0x02
	MethodSend     = 0x03
	MethodGetResp  = 0x81
	MADBaseVersion = 1
	madResponseBit = 0x80
)

// MAD is a view of a management datagram: the 24-byte common header
// followed by class data. ParseMAD returns one of exactly MADSize bytes.
type MAD []byte

// ParseMAD returns the MAD at the start of b (the payload of a UD packet to
// QP1) and its length. b must hold at least MADSize bytes and the base
// version must be 1.
func ParseMAD(b []byte) (MAD, int, error) {
	if len(b) < MADSize {
		return nil, 0, errMADShort
	}
	if b[0] != MADBaseVersion {
		return nil, 0, errMADFormat
	}
	return MAD(b[:MADSize]), MADSize, nil
}

func (m MAD) BaseVersion() uint8        { return m[0] }
func (m MAD) MgmtClass() uint8          { return m[1] }
func (m MAD) ClassVersion() uint8       { return m[2] }
func (m MAD) Response() bool            { return m[3]&madResponseBit != 0 }
func (m MAD) Method() uint8             { return m[3] } // including the R bit
func (m MAD) Status() uint16            { return binary.BigEndian.Uint16(m[4:]) }
func (m MAD) ClassSpecific() uint16     { return binary.BigEndian.Uint16(m[6:]) }
func (m MAD) TransactionID() uint64     { return binary.BigEndian.Uint64(m[8:]) }
func (m MAD) AttributeID() uint16       { return binary.BigEndian.Uint16(m[16:]) }
func (m MAD) Reserved() uint16          { return binary.BigEndian.Uint16(m[18:]) }
func (m MAD) AttributeModifier() uint32 { return binary.BigEndian.Uint32(m[20:]) }

// Data returns the class-specific data after the common header.
func (m MAD) Data() []byte { return m[MADHeaderSize:MADSize] }

// IsValid reports whether m is a whole MAD with base version 1.
func (m MAD) IsValid() bool { return len(m) >= MADSize && m[0] == MADBaseVersion }

// Fields returns the common header fields of m.
func (m MAD) Fields() MADFields {
	return MADFields{
		BaseVersion: m.BaseVersion(), MgmtClass: m.MgmtClass(), ClassVersion: m.ClassVersion(),
		Method: m.Method(), Status: m.Status(), ClassSpecific: m.ClassSpecific(),
		TransactionID: m.TransactionID(), AttributeID: m.AttributeID(), Reserved: m.Reserved(),
		AttributeModifier: m.AttributeModifier(),
	}
}

// MADFields holds the MAD common header.
type MADFields struct {
	BaseVersion       uint8
	MgmtClass         uint8
	ClassVersion      uint8
	Method            uint8 // with the response bit 0x80
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       uint16
	Reserved          uint16
	AttributeModifier uint32
}

// Len returns MADHeaderSize: Append encodes the common header only.
func (MADFields) Len() int { return MADHeaderSize }

// Append appends the 24-byte common header to b; the caller appends the
// 232 bytes of class data.
func (f MADFields) Append(b []byte) []byte {
	b = append(b, f.BaseVersion, f.MgmtClass, f.ClassVersion, f.Method)
	b = binary.BigEndian.AppendUint16(b, f.Status)
	b = binary.BigEndian.AppendUint16(b, f.ClassSpecific)
	b = binary.BigEndian.AppendUint64(b, f.TransactionID)
	b = binary.BigEndian.AppendUint16(b, f.AttributeID)
	b = binary.BigEndian.AppendUint16(b, f.Reserved)
	return binary.BigEndian.AppendUint32(b, f.AttributeModifier)
}
