package wire

// Extension transport headers (IBTA vol. 1 §9.3). All fields big-endian.
//
//	RETH (16):         | Virtual Address 64 | R_Key 32 | DMA Length 32 |
//	AETH (4):          | Syndrome 8 | MSN 24 |
//	AtomicETH (28):    | Virtual Address 64 | R_Key 32 | Swap/Add Data 64 | Compare Data 64 |
//	AtomicAckETH (8):  | Original Remote Data 64 |
//	ImmDt (4):         | Immediate Data 32 |
//	IETH (4):          | R_Key 32 |
//	DETH (8):          | Q_Key 32 | Reserved 8 | Source QP 24 |

import (
	"encoding/binary"
	"fmt"
)

// Extension header sizes.
const (
	RETHSize         = 16
	AETHSize         = 4
	AtomicETHSize    = 28
	AtomicAckETHSize = 8
	ImmDtSize        = 4
	IETHSize         = 4
	DETHSize         = 8
)

// RETH is a view of an RDMA Extended Transport Header.
type RETH []byte

// ParseRETH returns the RETH at the start of b and its length.
func ParseRETH(b []byte) (RETH, int, error) {
	if len(b) < RETHSize {
		return nil, 0, errShort
	}
	return RETH(b[:RETHSize]), RETHSize, nil
}

func (h RETH) VA() uint64     { return binary.BigEndian.Uint64(h[0:]) }
func (h RETH) RKey() RKey     { return RKey(binary.BigEndian.Uint32(h[8:])) }
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }
func (h RETH) IsValid() bool  { return len(h) >= RETHSize }
func (h RETH) Fields() RETHFields {
	return RETHFields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()}
}

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   RKey
	DMALen uint32 // length of the whole message in bytes
}

func (RETHFields) Len() int { return RETHSize }

// Append appends the encoded RETH to b.
func (f RETHFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, f.VA)
	b = binary.BigEndian.AppendUint32(b, uint32(f.RKey))
	return binary.BigEndian.AppendUint32(b, f.DMALen)
}

// AETH is a view of an ACK Extended Transport Header.
type AETH []byte

// ParseAETH returns the AETH at the start of b and its length.
func ParseAETH(b []byte) (AETH, int, error) {
	if len(b) < AETHSize {
		return nil, 0, errShort
	}
	return AETH(b[:AETHSize]), AETHSize, nil
}

func (h AETH) Syndrome() Syndrome { return Syndrome(h[0]) }
func (h AETH) MSN() uint32        { return binary.BigEndian.Uint32(h[0:]) & 0xFFFFFF }
func (h AETH) IsValid() bool      { return len(h) >= AETHSize }
func (h AETH) Fields() AETHFields { return AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()} }

// AETHFields holds the fields of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

func (AETHFields) Len() int { return AETHSize }

// Append appends the encoded AETH to b.
func (f AETHFields) Append(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(f.Syndrome)<<24|f.MSN&0xFFFFFF)
}

// Syndrome is the AETH syndrome byte: bits 6..5 the type, bits 4..0 a value.
type Syndrome uint8

// SyndromeType is the kind of acknowledgement a Syndrome carries.
type SyndromeType uint8

const (
	SynACK      SyndromeType = 0 // positive ACK; value = credit count code
	SynRNR      SyndromeType = 1 // receiver not ready; value = RNR timer code
	SynReserved SyndromeType = 2
	SynNAK      SyndromeType = 3 // negative ACK; value = NAKCode
)

// NAKCode is the value of a NAK syndrome.
type NAKCode uint8

const (
	NAKPSNSeqError  NAKCode = 0
	NAKInvalidReq   NAKCode = 1
	NAKRemoteAccess NAKCode = 2
	NAKRemoteOp     NAKCode = 3
	NAKInvalidRDReq NAKCode = 4
)

// Syndromes tbrdma sends. rxe sends ACKs with the credit code 31 ("no
// credits used") and tbrdma does the same.
const (
	SyndromeACK          Syndrome = 0x1F
	SyndromePSNSeqError  Syndrome = 0x60
	SyndromeInvalidReq   Syndrome = 0x61
	SyndromeRemoteAccess Syndrome = 0x62
	SyndromeRemoteOp     Syndrome = 0x63
)

// SyndromeRNR returns the RNR NAK syndrome with the given timer code (0..31).
func SyndromeRNR(timer uint8) Syndrome { return Syndrome(0x20 | timer&0x1F) }

func (s Syndrome) Type() SyndromeType { return SyndromeType(s>>5) & 3 }
func (s Syndrome) Value() uint8       { return uint8(s) & 0x1F }
func (s Syndrome) IsACK() bool        { return s.Type() == SynACK }
func (s Syndrome) IsRNR() bool        { return s.Type() == SynRNR }
func (s Syndrome) IsNAK() bool        { return s.Type() == SynNAK }
func (s Syndrome) NAK() NAKCode       { return NAKCode(s.Value()) }

func (s Syndrome) String() string {
	switch s.Type() {
	case SynACK:
		return fmt.Sprintf("ACK(credits=%d)", s.Value())
	case SynRNR:
		return fmt.Sprintf("RNR_NAK(timer=%d)", s.Value())
	case SynNAK:
		switch s.NAK() {
		case NAKPSNSeqError:
			return "NAK(PSN sequence error)"
		case NAKInvalidReq:
			return "NAK(invalid request)"
		case NAKRemoteAccess:
			return "NAK(remote access error)"
		case NAKRemoteOp:
			return "NAK(remote operational error)"
		case NAKInvalidRDReq:
			return "NAK(invalid RD request)"
		}
		return fmt.Sprintf("NAK(%d)", s.Value())
	}
	return fmt.Sprintf("syndrome(0x%02x)", uint8(s))
}

// RNRTimer returns the delay an RNR timer code stands for, in nanoseconds
// (IBTA table 45; code 0 is the longest, 655.36 ms).
func RNRTimer(code uint8) int64 { return rnrTimerNs[code&0x1F] }

var rnrTimerNs = [32]int64{
	655360000, 10000, 20000, 30000, 40000, 60000, 80000, 120000,
	160000, 240000, 320000, 480000, 640000, 960000, 1280000, 1920000,
	2560000, 3840000, 5120000, 7680000, 10240000, 15360000, 20480000, 30720000,
	40960000, 61440000, 81920000, 122880000, 163840000, 245760000, 327680000, 491520000,
}

// AtomicETH is a view of an Atomic Extended Transport Header.
type AtomicETH []byte

// ParseAtomicETH returns the AtomicETH at the start of b and its length.
func ParseAtomicETH(b []byte) (AtomicETH, int, error) {
	if len(b) < AtomicETHSize {
		return nil, 0, errShort
	}
	return AtomicETH(b[:AtomicETHSize]), AtomicETHSize, nil
}

func (h AtomicETH) VA() uint64      { return binary.BigEndian.Uint64(h[0:]) }
func (h AtomicETH) RKey() RKey      { return RKey(binary.BigEndian.Uint32(h[8:])) }
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:]) }
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[20:]) }
func (h AtomicETH) IsValid() bool   { return len(h) >= AtomicETHSize }
func (h AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
}

// AtomicETHFields holds the fields of an AtomicETH. For COMPARE_SWAP,
// SwapAdd is the new value and Compare the expected one; for FETCH_ADD,
// SwapAdd is the addend and Compare is ignored.
type AtomicETHFields struct {
	VA      uint64
	RKey    RKey
	SwapAdd uint64
	Compare uint64
}

func (AtomicETHFields) Len() int { return AtomicETHSize }

// Append appends the encoded AtomicETH to b.
func (f AtomicETHFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, f.VA)
	b = binary.BigEndian.AppendUint32(b, uint32(f.RKey))
	b = binary.BigEndian.AppendUint64(b, f.SwapAdd)
	return binary.BigEndian.AppendUint64(b, f.Compare)
}

// AtomicAckETH is a view of an Atomic Acknowledge Extended Transport Header.
type AtomicAckETH []byte

// ParseAtomicAckETH returns the AtomicAckETH at the start of b and its length.
func ParseAtomicAckETH(b []byte) (AtomicAckETH, int, error) {
	if len(b) < AtomicAckETHSize {
		return nil, 0, errShort
	}
	return AtomicAckETH(b[:AtomicAckETHSize]), AtomicAckETHSize, nil
}

func (h AtomicAckETH) Orig() uint64  { return binary.BigEndian.Uint64(h) }
func (h AtomicAckETH) IsValid() bool { return len(h) >= AtomicAckETHSize }
func (h AtomicAckETH) Fields() AtomicAckETHFields {
	return AtomicAckETHFields{Orig: h.Orig()}
}

// AtomicAckETHFields holds the original remote value an atomic replaced.
type AtomicAckETHFields struct{ Orig uint64 }

func (AtomicAckETHFields) Len() int { return AtomicAckETHSize }

// Append appends the encoded AtomicAckETH to b.
func (f AtomicAckETHFields) Append(b []byte) []byte {
	return binary.BigEndian.AppendUint64(b, f.Orig)
}

// ImmDt is a view of an Immediate Data header.
type ImmDt []byte

// ParseImmDt returns the ImmDt at the start of b and its length.
func ParseImmDt(b []byte) (ImmDt, int, error) {
	if len(b) < ImmDtSize {
		return nil, 0, errShort
	}
	return ImmDt(b[:ImmDtSize]), ImmDtSize, nil
}

// Imm returns the immediate data as it travels (big-endian on the wire;
// ibverbs hands it to the application in network byte order).
func (h ImmDt) Imm() uint32         { return binary.BigEndian.Uint32(h) }
func (h ImmDt) IsValid() bool       { return len(h) >= ImmDtSize }
func (h ImmDt) Fields() ImmDtFields { return ImmDtFields{Imm: h.Imm()} }

// ImmDtFields holds 32 bits of immediate data.
type ImmDtFields struct{ Imm uint32 }

func (ImmDtFields) Len() int { return ImmDtSize }

// Append appends the encoded ImmDt to b.
func (f ImmDtFields) Append(b []byte) []byte { return binary.BigEndian.AppendUint32(b, f.Imm) }

// IETH is a view of an Invalidate Extended Transport Header.
type IETH []byte

// ParseIETH returns the IETH at the start of b and its length.
func ParseIETH(b []byte) (IETH, int, error) {
	if len(b) < IETHSize {
		return nil, 0, errShort
	}
	return IETH(b[:IETHSize]), IETHSize, nil
}

func (h IETH) RKey() RKey         { return RKey(binary.BigEndian.Uint32(h)) }
func (h IETH) IsValid() bool      { return len(h) >= IETHSize }
func (h IETH) Fields() IETHFields { return IETHFields{RKey: h.RKey()} }

// IETHFields holds the R_Key a SEND_WITH_INVALIDATE invalidates.
type IETHFields struct{ RKey RKey }

func (IETHFields) Len() int { return IETHSize }

// Append appends the encoded IETH to b.
func (f IETHFields) Append(b []byte) []byte { return binary.BigEndian.AppendUint32(b, uint32(f.RKey)) }

// DETH is a view of a Datagram Extended Transport Header.
type DETH []byte

// ParseDETH returns the DETH at the start of b and its length.
func ParseDETH(b []byte) (DETH, int, error) {
	if len(b) < DETHSize {
		return nil, 0, errShort
	}
	return DETH(b[:DETHSize]), DETHSize, nil
}

func (h DETH) QKey() QKey    { return QKey(binary.BigEndian.Uint32(h[0:])) }
func (h DETH) Resv8() uint8  { return h[4] }
func (h DETH) SrcQP() QPN    { return QPN(binary.BigEndian.Uint32(h[4:]) & 0xFFFFFF) }
func (h DETH) IsValid() bool { return len(h) >= DETHSize }
func (h DETH) Fields() DETHFields {
	return DETHFields{QKey: h.QKey(), Resv8: h.Resv8(), SrcQP: h.SrcQP()}
}

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  QKey
	Resv8 uint8
	SrcQP QPN
}

func (DETHFields) Len() int { return DETHSize }

// Append appends the encoded DETH to b.
func (f DETHFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(f.QKey))
	return binary.BigEndian.AppendUint32(b, uint32(f.Resv8)<<24|uint32(f.SrcQP)&0xFFFFFF)
}
