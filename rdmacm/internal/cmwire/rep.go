package cmwire

// REP (ConnectReply, attribute 0x0013), IBTA vol. 1 §12.6.8,
// roce-wire.md §6.3. Offsets are relative to the CM body.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Local Communication ID                       |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Remote Communication ID                      |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Local Q_Key                           |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Local QPN (24)                | VendorID 23:16|  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Local EE Context (24)            | VendorID 15:8 |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Starting PSN (24)              | VendorID 7:0  |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Resp. Res.   |  Init. Depth  |TgtAckDly|FA |E| RNR |S| Rsv   |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Local CA GUID (64)                       |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (196 bytes)                     |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// FA: failover accepted; E: end-to-end flow control; S: SRQ. The ECE
// vendor ID bytes are reserved (0) in kernels without ECE.

import (
	"encoding/binary"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// REP layout constants.
const (
	REPPrivateDataSize = 196
	repPrivateDataOff  = 36
)

// REP is a view of a REP body.
type REP []byte

// ParseREP returns the REP body at the start of b and its length.
func ParseREP(b []byte) (REP, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return REP(b[:BodySize]), BodySize, nil
}

func (r REP) IsValid() bool             { return len(r) >= BodySize }
func (r REP) LocalCommID() CommID       { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r REP) RemoteCommID() CommID      { return CommID(binary.BigEndian.Uint32(r[4:])) }
func (r REP) LocalQKey() wire.QKey      { return wire.QKey(binary.BigEndian.Uint32(r[8:])) }
func (r REP) LocalQPN() wire.QPN        { return wire.QPN(get24(r[12:])) }
func (r REP) LocalEECN() uint32         { return get24(r[16:]) }
func (r REP) StartingPSN() wire.PSN     { return wire.PSN(get24(r[20:])) }
func (r REP) VendorID() uint32          { return uint32(r[15])<<16 | uint32(r[19])<<8 | uint32(r[23]) }
func (r REP) ResponderResources() uint8 { return r[24] }
func (r REP) InitiatorDepth() uint8     { return r[25] }
func (r REP) TargetACKDelay() Timeout   { return Timeout(r[26] >> 3) }
func (r REP) FailoverAccepted() uint8   { return r[26] >> 1 & 3 }
func (r REP) EndToEndFlowControl() bool { return r[26]&0x01 != 0 }
func (r REP) RNRRetryCount() uint8      { return r[27] >> 5 }
func (r REP) SRQ() bool                 { return r[27]&0x10 != 0 }
func (r REP) Reserved27() uint8         { return r[27] & 0x0F }
func (r REP) LocalCAGUID() uint64       { return binary.BigEndian.Uint64(r[28:]) }
func (r REP) PrivateData() []byte       { return r[repPrivateDataOff:BodySize] }

// Fields returns the fields of r.
func (r REP) Fields() REPFields {
	f := REPFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), LocalQKey: r.LocalQKey(),
		LocalQPN: r.LocalQPN(), LocalEECN: r.LocalEECN(), StartingPSN: r.StartingPSN(),
		VendorID: r.VendorID(), ResponderResources: r.ResponderResources(),
		InitiatorDepth: r.InitiatorDepth(), TargetACKDelay: r.TargetACKDelay(),
		FailoverAccepted: r.FailoverAccepted(), EndToEndFlowControl: r.EndToEndFlowControl(),
		RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(), Reserved27: r.Reserved27(),
		LocalCAGUID: r.LocalCAGUID(),
	}
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// REPFields holds the fields of a REP.
type REPFields struct {
	LocalCommID         CommID
	RemoteCommID        CommID    // the REQ's Local Communication ID
	LocalQKey           wire.QKey // 0 for RC
	LocalQPN            wire.QPN  // 24 bits
	LocalEECN           uint32    // 24 bits
	StartingPSN         wire.PSN  // 24 bits: the sender's receive PSN
	VendorID            uint32    // 24 bits, ECE; 0 = none
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      Timeout // 5 bits (rxe: 15)
	FailoverAccepted    uint8   // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits: becomes the REQ sender's rnr_retry
	SRQ                 bool
	Reserved27          uint8 // 4 bits
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataSize]byte
}

// AttrID returns AttrREP.
func (REPFields) AttrID() AttrID { return AttrREP }

// Len returns BodySize.
func (REPFields) Len() int { return BodySize }

// Append appends the 232-byte REP body to b.
func (f REPFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(f.LocalCommID))
	b = binary.BigEndian.AppendUint32(b, uint32(f.RemoteCommID))
	b = binary.BigEndian.AppendUint32(b, uint32(f.LocalQKey))
	b = append24(b, uint32(f.LocalQPN))
	b = append(b, byte(f.VendorID>>16))
	b = append24(b, f.LocalEECN)
	b = append(b, byte(f.VendorID>>8))
	b = append24(b, uint32(f.StartingPSN))
	b = append(b, byte(f.VendorID))
	b = append(b, f.ResponderResources, f.InitiatorDepth,
		uint8(f.TargetACKDelay&0x1F)<<3|(f.FailoverAccepted&3)<<1|bit(f.EndToEndFlowControl, 0x01),
		(f.RNRRetryCount&0x07)<<5|bit(f.SRQ, 0x10)|f.Reserved27&0x0F)
	b = binary.BigEndian.AppendUint64(b, f.LocalCAGUID)
	return append(b, f.PrivateData[:]...)
}
