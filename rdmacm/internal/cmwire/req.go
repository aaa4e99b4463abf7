package cmwire

// REQ (ConnectRequest, attribute 0x0010), IBTA vol. 1 §12.6.5,
// roce-wire.md §6.2. Offsets are relative to the CM body (MAD byte 24).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Local Communication ID                       |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |          ECE Vendor ID (24, 0 = none)         |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Service ID (64)                         |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Local CA GUID (64)                       |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Reserved                             |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Local Q_Key                           |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Local QPN (24)                |  Resp. Res.   |  32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Local EECN (24)               |  Init. Depth  |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Remote EECN (24)              |RCMRT(5) |TST|E|  40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Starting PSN (24)              |LCMRT(5) |Retry|  44
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Partition Key         |MTU (4)|R| RNR |MaxRtr |S| XT  |  48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Primary path (44 bytes, see Path)                |  52
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             Alternate path (44 bytes, see Path)               |  96
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      Private Data (92 bytes; rdma_cm: CMA header + 56)        | 140
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RCMRT/LCMRT: remote/local CM response timeout; TST: transport service
// type; E: end-to-end flow control; R: RDC exists; RNR: RNR retry count;
// MaxRtr: max CM retries; S: SRQ; XT: extended transport type.

import (
	"encoding/binary"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// REQ layout constants.
const (
	REQPrivateDataSize   = 92
	reqPrimaryOff        = 52
	reqAlternateOff      = 96
	reqPrivateDataOff    = 140
	REQUserDataSize      = REQPrivateDataSize - CMAHeaderSize // 56
	SIDRREQUserDataSize  = SIDRREQPrivateDataSize - CMAHeaderSize
	reqPrivateDataEndOff = reqPrivateDataOff + REQPrivateDataSize
)

// REQ is a view of a REQ body.
type REQ []byte

// ParseREQ returns the REQ body at the start of b and its length
// (BodySize).
func ParseREQ(b []byte) (REQ, int, error) {
	if len(b) < BodySize {
		return nil, 0, errShortBody
	}
	return REQ(b[:BodySize]), BodySize, nil
}

func (r REQ) IsValid() bool                    { return len(r) >= BodySize }
func (r REQ) LocalCommID() CommID              { return CommID(binary.BigEndian.Uint32(r[0:])) }
func (r REQ) Reserved4() uint8                 { return r[4] }
func (r REQ) VendorID() uint32                 { return get24(r[5:]) }
func (r REQ) ServiceID() uint64                { return binary.BigEndian.Uint64(r[8:]) }
func (r REQ) LocalCAGUID() uint64              { return binary.BigEndian.Uint64(r[16:]) }
func (r REQ) Reserved24() uint32               { return binary.BigEndian.Uint32(r[24:]) }
func (r REQ) LocalQKey() wire.QKey             { return wire.QKey(binary.BigEndian.Uint32(r[28:])) }
func (r REQ) LocalQPN() wire.QPN               { return wire.QPN(get24(r[32:])) }
func (r REQ) ResponderResources() uint8        { return r[35] }
func (r REQ) LocalEECN() uint32                { return get24(r[36:]) }
func (r REQ) InitiatorDepth() uint8            { return r[39] }
func (r REQ) RemoteEECN() uint32               { return get24(r[40:]) }
func (r REQ) RemoteCMResponseTimeout() Timeout { return Timeout(r[43] >> 3) }
func (r REQ) TransportType() TransportType     { return TransportType(r[43]>>1) & 3 }
func (r REQ) EndToEndFlowControl() bool        { return r[43]&0x01 != 0 }
func (r REQ) StartingPSN() wire.PSN            { return wire.PSN(get24(r[44:])) }
func (r REQ) LocalCMResponseTimeout() Timeout  { return Timeout(r[47] >> 3) }
func (r REQ) RetryCount() uint8                { return r[47] & 0x07 }
func (r REQ) PKey() uint16                     { return binary.BigEndian.Uint16(r[48:]) }
func (r REQ) PathMTU() MTU                     { return MTU(r[50] >> 4) }
func (r REQ) RDCExists() bool                  { return r[50]&0x08 != 0 }
func (r REQ) RNRRetryCount() uint8             { return r[50] & 0x07 }
func (r REQ) MaxCMRetries() uint8              { return r[51] >> 4 }
func (r REQ) SRQ() bool                        { return r[51]&0x08 != 0 }
func (r REQ) ExtendedTransportType() uint8     { return r[51] & 0x07 }
func (r REQ) Primary() Path                    { return Path(r[reqPrimaryOff:reqAlternateOff]) }
func (r REQ) Alternate() Path                  { return Path(r[reqAlternateOff:reqPrivateDataOff]) }

// HasAlternatePath reports whether the REQ carries an alternate path; the
// kernel decides by the alternate local LID being non-zero.
func (r REQ) HasAlternatePath() bool { return r.Alternate().LocalLID() != 0 }

// PrivateData returns the 92 bytes of private data (aliasing r). For
// rdma_cm, ParseCMAHeader reads its first 36 bytes and UserData the rest.
func (r REQ) PrivateData() []byte { return r[reqPrivateDataOff:reqPrivateDataEndOff] }

// UserData returns the private data after the CMA header: the 56 bytes an
// rdma_cm listener sees in its CONNECT_REQUEST event.
func (r REQ) UserData() []byte { return r[reqPrivateDataOff+CMAHeaderSize : reqPrivateDataEndOff] }

// Fields returns the fields of r.
func (r REQ) Fields() REQFields {
	f := REQFields{
		LocalCommID: r.LocalCommID(), Reserved4: r.Reserved4(), VendorID: r.VendorID(),
		ServiceID: r.ServiceID(), LocalCAGUID: r.LocalCAGUID(), Reserved24: r.Reserved24(),
		LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(), ResponderResources: r.ResponderResources(),
		LocalEECN: r.LocalEECN(), InitiatorDepth: r.InitiatorDepth(), RemoteEECN: r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(), TransportType: r.TransportType(),
		EndToEndFlowControl: r.EndToEndFlowControl(), StartingPSN: r.StartingPSN(),
		LocalCMResponseTimeout: r.LocalCMResponseTimeout(), RetryCount: r.RetryCount(),
		PKey: r.PKey(), PathMTU: r.PathMTU(), RDCExists: r.RDCExists(), RNRRetryCount: r.RNRRetryCount(),
		MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(), ExtendedTransportType: r.ExtendedTransportType(),
		Primary: r.Primary().Fields(), Alternate: r.Alternate().Fields(),
	}
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// REQFields holds the fields of a REQ. Append keeps only the bits of each
// field that fit its width. Reserved fields are sent as 0; they are kept
// so that any parsed body re-encodes to the same bytes.
type REQFields struct {
	LocalCommID             CommID
	Reserved4               uint8
	VendorID                uint32 // 24 bits; ECE vendor ID of newer kernels, 0 = none
	ServiceID               uint64 // see ServiceID
	LocalCAGUID             uint64
	Reserved24              uint32
	LocalQKey               wire.QKey // UD/RD only; 0 for RC
	LocalQPN                wire.QPN  // 24 bits
	ResponderResources      uint8     // READ/atomic the sender will serve
	LocalEECN               uint32    // 24 bits
	InitiatorDepth          uint8     // READ/atomic the sender will issue
	RemoteEECN              uint32    // 24 bits
	RemoteCMResponseTimeout Timeout   // 5 bits
	TransportType           TransportType
	EndToEndFlowControl     bool
	StartingPSN             wire.PSN // 24 bits: the sender's receive PSN
	LocalCMResponseTimeout  Timeout  // 5 bits
	RetryCount              uint8    // 3 bits
	PKey                    uint16
	PathMTU                 MTU   // 4 bits
	RDCExists               bool  //
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits; 1 with TransportXRC
	Primary                 PathFields
	Alternate               PathFields // all zero on RoCE
	PrivateData             [REQPrivateDataSize]byte
}

// AttrID returns AttrREQ.
func (REQFields) AttrID() AttrID { return AttrREQ }

// Len returns BodySize.
func (REQFields) Len() int { return BodySize }

// Append appends the 232-byte REQ body to b.
func (f REQFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(f.LocalCommID))
	b = append(b, f.Reserved4)
	b = append24(b, f.VendorID)
	b = binary.BigEndian.AppendUint64(b, f.ServiceID)
	b = binary.BigEndian.AppendUint64(b, f.LocalCAGUID)
	b = binary.BigEndian.AppendUint32(b, f.Reserved24)
	b = binary.BigEndian.AppendUint32(b, uint32(f.LocalQKey))
	b = append24(b, uint32(f.LocalQPN))
	b = append(b, f.ResponderResources)
	b = append24(b, f.LocalEECN)
	b = append(b, f.InitiatorDepth)
	b = append24(b, f.RemoteEECN)
	b = append(b, uint8(f.RemoteCMResponseTimeout&0x1F)<<3|uint8(f.TransportType&3)<<1|bit(f.EndToEndFlowControl, 0x01))
	b = append24(b, uint32(f.StartingPSN))
	b = append(b, uint8(f.LocalCMResponseTimeout&0x1F)<<3|f.RetryCount&0x07)
	b = binary.BigEndian.AppendUint16(b, f.PKey)
	b = append(b,
		uint8(f.PathMTU&0x0F)<<4|bit(f.RDCExists, 0x08)|f.RNRRetryCount&0x07,
		(f.MaxCMRetries&0x0F)<<4|bit(f.SRQ, 0x08)|f.ExtendedTransportType&0x07)
	b = f.Primary.Append(b)
	b = f.Alternate.Append(b)
	return append(b, f.PrivateData[:]...)
}
