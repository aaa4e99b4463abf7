package cmwire

// SIDR_REQ (0x0017) and SIDR_REP (0x0018), IBTA vol. 1 §12.11,
// roce-wire.md §6.4 and §7.8: service ID resolution for UD (rdma_cm's
// RDMA_PS_UDP). Offsets are relative to the CM body.
//
//	SIDR_REQ: 0 Request ID (32) | 4 P_Key (16) | 6 reserved (16) |
//	          8 Service ID (64) | 16 Private Data (216; rdma_cm: CMA header + 180)
//	SIDR_REP: 0 Request ID (32) | 4 Status (8) | 5 Additional Info Length (8) |
//	          6 reserved / ECE vendor ID 23:8 (16) | 8 QPN (24) | 11 vendor ID 7:0 |
//	          12 Service ID (64) | 20 Q_Key (32) | 24 ClassPortInfo (72) |
//	          96 Private Data (136)

import (
	"encoding/binary"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// SIDR sizes.
const (
	SIDRREQPrivateDataSize = 216
	SIDRREPPrivateDataSize = 136
	SIDRREPInfoSize        = 72
)

// SIDRREQ is a view of a SIDR_REQ body.
type SIDRREQ []byte

// ParseSIDRREQ returns the SIDR_REQ body at the start of b and its length.
func ParseSIDRREQ(b []byte) (SIDRREQ, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return SIDRREQ(b[:BodySize]), BodySize, nil
}

func (r SIDRREQ) IsValid() bool       { return len(r) >= BodySize }
func (r SIDRREQ) RequestID() CommID   { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r SIDRREQ) PKey() uint16        { return binary.BigEndian.Uint16(r[4:]) }
func (r SIDRREQ) Reserved6() uint16   { return binary.BigEndian.Uint16(r[6:]) }
func (r SIDRREQ) ServiceID() uint64   { return binary.BigEndian.Uint64(r[8:]) }
func (r SIDRREQ) PrivateData() []byte { return r[16:BodySize] }

// UserData returns the private data after the CMA header (180 bytes).
func (r SIDRREQ) UserData() []byte { return r[16+CMAHeaderSize : BodySize] }

// Fields returns the fields of r.
func (r SIDRREQ) Fields() SIDRREQFields {
	f := SIDRREQFields{RequestID: r.RequestID(), PKey: r.PKey(), Reserved6: r.Reserved6(), ServiceID: r.ServiceID()}
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// SIDRREQFields holds the fields of a SIDR_REQ.
type SIDRREQFields struct {
	RequestID   CommID // the kernel uses the sender's local ID
	PKey        uint16
	Reserved6   uint16
	ServiceID   uint64
	PrivateData [SIDRREQPrivateDataSize]byte
}

func (SIDRREQFields) AttrID() AttrID { return AttrSIDRREQ }
func (SIDRREQFields) Len() int       { return BodySize }

// Append appends the 232-byte SIDR_REQ body to b.
func (f SIDRREQFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(f.RequestID))
	b = binary.BigEndian.AppendUint16(b, f.PKey)
	b = binary.BigEndian.AppendUint16(b, f.Reserved6)
	b = binary.BigEndian.AppendUint64(b, f.ServiceID)
	return append(b, f.PrivateData[:]...)
}

// SIDRREP is a view of a SIDR_REP body.
type SIDRREP []byte

// ParseSIDRREP returns the SIDR_REP body at the start of b and its length.
func ParseSIDRREP(b []byte) (SIDRREP, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return SIDRREP(b[:BodySize]), BodySize, nil
}

func (r SIDRREP) IsValid() bool               { return len(r) >= BodySize }
func (r SIDRREP) RequestID() CommID           { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r SIDRREP) Status() SIDRStatus          { return SIDRStatus(r[4]) }
func (r SIDRREP) AdditionalInfoLength() uint8 { return r[5] }
func (r SIDRREP) VendorID() uint32            { return uint32(binary.BigEndian.Uint16(r[6:]))<<8 | uint32(r[11]) }
func (r SIDRREP) QPN() wire.QPN               { return wire.QPN(get24(r[8:])) }
func (r SIDRREP) ServiceID() uint64           { return binary.BigEndian.Uint64(r[12:]) }
func (r SIDRREP) QKey() wire.QKey             { return wire.QKey(binary.BigEndian.Uint32(r[20:])) }
func (r SIDRREP) ClassPortInfo() []byte       { return r[24:96] }
func (r SIDRREP) PrivateData() []byte         { return r[96:BodySize] }

// Fields returns the fields of r.
func (r SIDRREP) Fields() SIDRREPFields {
	f := SIDRREPFields{RequestID: r.RequestID(), Status: r.Status(),
		AdditionalInfoLength: r.AdditionalInfoLength(), VendorID: r.VendorID(),
		QPN: r.QPN(), ServiceID: r.ServiceID(), QKey: r.QKey()}
	copy(f.ClassPortInfo[:], r.ClassPortInfo())
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// SIDRREPFields holds the fields of a SIDR_REP.
type SIDRREPFields struct {
	RequestID            CommID // the SIDR_REQ's
	Status               SIDRStatus
	AdditionalInfoLength uint8
	VendorID             uint32    // 24 bits, ECE; 0 = none
	QPN                  wire.QPN  // 24 bits: the replier's UD QP
	ServiceID            uint64    //
	QKey                 wire.QKey // rdma_cm: 0x01234567 (RDMA_UDP_QKEY)
	ClassPortInfo        [SIDRREPInfoSize]byte
	PrivateData          [SIDRREPPrivateDataSize]byte
}

func (SIDRREPFields) AttrID() AttrID { return AttrSIDRREP }
func (SIDRREPFields) Len() int       { return BodySize }

// Append appends the 232-byte SIDR_REP body to b.
func (f SIDRREPFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(f.RequestID))
	b = append(b, uint8(f.Status), f.AdditionalInfoLength)
	b = binary.BigEndian.AppendUint16(b, uint16(f.VendorID>>8))
	b = append24(b, uint32(f.QPN))
	b = append(b, byte(f.VendorID))
	b = binary.BigEndian.AppendUint64(b, f.ServiceID)
	b = binary.BigEndian.AppendUint32(b, uint32(f.QKey))
	b = append(b, f.ClassPortInfo[:]...)
	return append(b, f.PrivateData[:]...)
}

// RDMAUDPQKey is the Q_Key rdma_cm uses for RDMA_PS_UDP and RDMA_PS_IB UD
// QPs (RDMA_UDP_QKEY), which a SIDR_REP announces.
const RDMAUDPQKey wire.QKey = 0x01234567
