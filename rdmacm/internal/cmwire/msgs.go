package cmwire

// RTU, DREQ, DREP, MRA and REJ (IBTA vol. 1 §12.6, roce-wire.md §6.4).
// Offsets are relative to the CM body. Every one starts with the sender's
// Local Communication ID and the peer's (Remote) Communication ID.
//
//	RTU  (0x0014): 0 Local Comm ID | 4 Remote Comm ID | 8 Private Data (224)
//	DREP (0x0016): 0 Local Comm ID | 4 Remote Comm ID | 8 Private Data (224)
//	DREQ (0x0015): 0 Local Comm ID | 4 Remote Comm ID |
//	               8 Remote QPN/EECN (24) | 11 reserved | 12 Private Data (220)
//	MRA  (0x0011): 0 Local Comm ID | 4 Remote Comm ID |
//	               8 Message MRAed (2, top bits) + reserved (6) |
//	               9 Service Timeout (5, top bits) + reserved (3) | 10 Private Data (222)
//	REJ  (0x0012): 0 Local Comm ID | 4 Remote Comm ID |
//	               8 Message REJected (2, top bits) + reserved (6) |
//	               9 Reject Info Length (7, top bits) + reserved (1) |
//	               10 Reason (16) | 12 ARI (72) | 84 Private Data (148)
//
// The DREQ's Remote QPN is the receiver's QPN: the kernel drops a DREQ
// whose Remote QPN is not the QP of the connection. A REJ for a REQ the
// kernel kept no state for swaps the REQ's first two words, so its Local
// Comm ID is 0 (or the REQ's ECE word) and its Remote Comm ID is the REQ's.

import (
	"encoding/binary"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Private data and ARI sizes (roce-wire.md §6.5).
const (
	RTUPrivateDataSize  = 224
	DREQPrivateDataSize = 220
	DREPPrivateDataSize = 224
	MRAPrivateDataSize  = 222
	REJPrivateDataSize  = 148
	REJARISize          = 72
)

func commIDs(b []byte) (CommID, CommID) {
	return CommID(binary.BigEndian.Uint32(b[0:])), CommID(binary.BigEndian.Uint32(b[4:]))
}

func appendCommIDs(b []byte, local, remote CommID) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(local))
	return binary.BigEndian.AppendUint32(b, uint32(remote))
}

// RTU is a view of an RTU (ReadyToUse) body.
type RTU []byte

// ParseRTU returns the RTU body at the start of b and its length.
func ParseRTU(b []byte) (RTU, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return RTU(b[:BodySize]), BodySize, nil
}

func (r RTU) IsValid() bool        { return len(r) >= BodySize }
func (r RTU) LocalCommID() CommID  { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r RTU) RemoteCommID() CommID { return CommID(binary.BigEndian.Uint32(r[4:])) }
func (r RTU) PrivateData() []byte  { return r[8:BodySize] }

// Fields returns the fields of r.
func (r RTU) Fields() RTUFields {
	f := RTUFields{}
	f.LocalCommID, f.RemoteCommID = commIDs(r)
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// RTUFields holds the fields of an RTU.
type RTUFields struct {
	LocalCommID  CommID
	RemoteCommID CommID
	PrivateData  [RTUPrivateDataSize]byte
}

func (RTUFields) AttrID() AttrID { return AttrRTU }
func (RTUFields) Len() int       { return BodySize }

// Append appends the 232-byte RTU body to b.
func (f RTUFields) Append(b []byte) []byte {
	return append(appendCommIDs(b, f.LocalCommID, f.RemoteCommID), f.PrivateData[:]...)
}

// DREP is a view of a DREP (DisconnectReply) body.
type DREP []byte

// ParseDREP returns the DREP body at the start of b and its length.
func ParseDREP(b []byte) (DREP, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return DREP(b[:BodySize]), BodySize, nil
}

func (r DREP) IsValid() bool        { return len(r) >= BodySize }
func (r DREP) LocalCommID() CommID  { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r DREP) RemoteCommID() CommID { return CommID(binary.BigEndian.Uint32(r[4:])) }
func (r DREP) PrivateData() []byte  { return r[8:BodySize] }

// Fields returns the fields of r.
func (r DREP) Fields() DREPFields {
	f := DREPFields{}
	f.LocalCommID, f.RemoteCommID = commIDs(r)
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// DREPFields holds the fields of a DREP.
type DREPFields struct {
	LocalCommID  CommID
	RemoteCommID CommID
	PrivateData  [DREPPrivateDataSize]byte
}

func (DREPFields) AttrID() AttrID { return AttrDREP }
func (DREPFields) Len() int       { return BodySize }

// Append appends the 232-byte DREP body to b.
func (f DREPFields) Append(b []byte) []byte {
	return append(appendCommIDs(b, f.LocalCommID, f.RemoteCommID), f.PrivateData[:]...)
}

// DREQ is a view of a DREQ (DisconnectRequest) body.
type DREQ []byte

// ParseDREQ returns the DREQ body at the start of b and its length.
func ParseDREQ(b []byte) (DREQ, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return DREQ(b[:BodySize]), BodySize, nil
}

func (r DREQ) IsValid() bool        { return len(r) >= BodySize }
func (r DREQ) LocalCommID() CommID  { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r DREQ) RemoteCommID() CommID { return CommID(binary.BigEndian.Uint32(r[4:])) }

// RemoteQPN is the receiver's QPN (or EECN).
func (r DREQ) RemoteQPN() wire.QPN { return wire.QPN(get24(r[8:])) }
func (r DREQ) Reserved11() uint8   { return r[11] }
func (r DREQ) PrivateData() []byte { return r[12:BodySize] }

// Fields returns the fields of r.
func (r DREQ) Fields() DREQFields {
	f := DREQFields{RemoteQPN: r.RemoteQPN(), Reserved11: r.Reserved11()}
	f.LocalCommID, f.RemoteCommID = commIDs(r)
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// DREQFields holds the fields of a DREQ.
type DREQFields struct {
	LocalCommID  CommID
	RemoteCommID CommID
	RemoteQPN    wire.QPN // the receiver's QPN
	Reserved11   uint8
	PrivateData  [DREQPrivateDataSize]byte
}

func (DREQFields) AttrID() AttrID { return AttrDREQ }
func (DREQFields) Len() int       { return BodySize }

// Append appends the 232-byte DREQ body to b.
func (f DREQFields) Append(b []byte) []byte {
	b = appendCommIDs(b, f.LocalCommID, f.RemoteCommID)
	b = append24(b, uint32(f.RemoteQPN))
	b = append(b, f.Reserved11)
	return append(b, f.PrivateData[:]...)
}

// MRA is a view of an MRA (MsgRcptAck) body.
type MRA []byte

// ParseMRA returns the MRA body at the start of b and its length.
func ParseMRA(b []byte) (MRA, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return MRA(b[:BodySize]), BodySize, nil
}

func (r MRA) IsValid() bool           { return len(r) >= BodySize }
func (r MRA) LocalCommID() CommID     { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r MRA) RemoteCommID() CommID    { return CommID(binary.BigEndian.Uint32(r[4:])) }
func (r MRA) MessageMRAed() MsgKind   { return MsgKind(r[8] >> 6) }
func (r MRA) Reserved8() uint8        { return r[8] & 0x3F }
func (r MRA) ServiceTimeout() Timeout { return Timeout(r[9] >> 3) }
func (r MRA) Reserved9() uint8        { return r[9] & 0x07 }
func (r MRA) PrivateData() []byte     { return r[10:BodySize] }

// Fields returns the fields of r.
func (r MRA) Fields() MRAFields {
	f := MRAFields{MessageMRAed: r.MessageMRAed(), Reserved8: r.Reserved8(),
		ServiceTimeout: r.ServiceTimeout(), Reserved9: r.Reserved9()}
	f.LocalCommID, f.RemoteCommID = commIDs(r)
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// MRAFields holds the fields of an MRA.
type MRAFields struct {
	LocalCommID    CommID
	RemoteCommID   CommID
	MessageMRAed   MsgKind // 2 bits: REQ, REP or (KindOther) LAP
	Reserved8      uint8   // 6 bits
	ServiceTimeout Timeout // 5 bits
	Reserved9      uint8   // 3 bits
	PrivateData    [MRAPrivateDataSize]byte
}

func (MRAFields) AttrID() AttrID { return AttrMRA }
func (MRAFields) Len() int       { return BodySize }

// Append appends the 232-byte MRA body to b.
func (f MRAFields) Append(b []byte) []byte {
	b = appendCommIDs(b, f.LocalCommID, f.RemoteCommID)
	b = append(b, uint8(f.MessageMRAed&3)<<6|f.Reserved8&0x3F, uint8(f.ServiceTimeout&0x1F)<<3|f.Reserved9&0x07)
	return append(b, f.PrivateData[:]...)
}

// REJ is a view of a REJ (ConnectReject) body.
type REJ []byte

// ParseREJ returns the REJ body at the start of b and its length.
func ParseREJ(b []byte) (REJ, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return REJ(b[:BodySize]), BodySize, nil
}

func (r REJ) IsValid() bool            { return len(r) >= BodySize }
func (r REJ) LocalCommID() CommID      { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r REJ) RemoteCommID() CommID     { return CommID(binary.BigEndian.Uint32(r[4:])) }
func (r REJ) MessageRejected() MsgKind { return MsgKind(r[8] >> 6) }
func (r REJ) Reserved8() uint8         { return r[8] & 0x3F }
func (r REJ) RejectInfoLength() uint8  { return r[9] >> 1 }
func (r REJ) Reserved9() uint8         { return r[9] & 0x01 }
func (r REJ) Reason() RejectReason     { return RejectReason(binary.BigEndian.Uint16(r[10:])) }

// ARI returns all 72 bytes of Additional Reject Information; the first
// min(RejectInfoLength, 72) are meaningful.
func (r REJ) ARI() []byte         { return r[12:84] }
func (r REJ) PrivateData() []byte { return r[84:BodySize] }

// Fields returns the fields of r.
func (r REJ) Fields() REJFields {
	f := REJFields{MessageRejected: r.MessageRejected(), Reserved8: r.Reserved8(),
		RejectInfoLength: r.RejectInfoLength(), Reserved9: r.Reserved9(), Reason: r.Reason()}
	f.LocalCommID, f.RemoteCommID = commIDs(r)
	copy(f.ARI[:], r.ARI())
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// REJFields holds the fields of a REJ.
type REJFields struct {
	LocalCommID      CommID
	RemoteCommID     CommID  // the ID of the rejected side; match on this
	MessageRejected  MsgKind // 2 bits
	Reserved8        uint8   // 6 bits
	RejectInfoLength uint8   // 7 bits: valid ARI bytes
	Reserved9        uint8   // 1 bit
	Reason           RejectReason
	ARI              [REJARISize]byte
	PrivateData      [REJPrivateDataSize]byte
}

func (REJFields) AttrID() AttrID { return AttrREJ }
func (REJFields) Len() int       { return BodySize }

// Append appends the 232-byte REJ body to b.
func (f REJFields) Append(b []byte) []byte {
	b = appendCommIDs(b, f.LocalCommID, f.RemoteCommID)
	b = append(b, uint8(f.MessageRejected&3)<<6|f.Reserved8&0x3F, (f.RejectInfoLength&0x7F)<<1|f.Reserved9&0x01)
	b = binary.BigEndian.AppendUint16(b, uint16(f.Reason))
	b = append(b, f.ARI[:]...)
	return append(b, f.PrivateData[:]...)
}
