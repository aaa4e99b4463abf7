package cmwire

import (
	"math/bits"
	"strconv"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// CommID is a 32-bit communication ID: each side picks its own (Local
// Communication ID) and echoes the peer's (Remote Communication ID). The
// zero CommID means "none" (a REJ for a REQ the sender kept no state for).
type CommID uint32

func (c CommID) String() string { return "0x" + strconv.FormatUint(uint64(c), 16) }

// AppendTo appends the text form of c to b.
func (c CommID) AppendTo(b []byte) []byte {
	return strconv.AppendUint(append(b, "0x"...), uint64(c), 16)
}

// KernelTID returns the transaction ID the Linux CM gives a REQ, DREQ or
// SIDR_REQ: the MAD agent's hi_tid in the top 32 bits and the local
// communication ID in the low 32. The kernel stores the ID big-endian and
// ORs its raw bytes in as a CPU integer, so on little-endian hosts (x86,
// arm64: every rxe capture) the low word is the ID byte-swapped: comm ID
// 0x6071f97b goes with TID 0x000000027bf97160. roce-wire.md §5.4 omits the
// swap; nothing matches on it, since the CM matches by comm ID.
func KernelTID(hiTID uint32, local CommID) uint64 {
	return uint64(hiTID)<<32 | uint64(bits.ReverseBytes32(uint32(local)))
}

// AttrID is the MAD attribute ID of a CM message (roce-wire.md §5.3).
type AttrID uint16

// CM attribute IDs.
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

var attrNames = [...]string{
	AttrREQ - AttrREQ: "REQ", AttrMRA - AttrREQ: "MRA", AttrREJ - AttrREQ: "REJ",
	AttrREP - AttrREQ: "REP", AttrRTU - AttrREQ: "RTU", AttrDREQ - AttrREQ: "DREQ",
	AttrDREP - AttrREQ: "DREP", AttrSIDRREQ - AttrREQ: "SIDR_REQ", AttrSIDRREP - AttrREQ: "SIDR_REP",
	AttrLAP - AttrREQ: "LAP", AttrAPR - AttrREQ: "APR",
}

// Known reports whether a is one of the nine messages this package decodes
// (REQ .. SIDR_REP). ClassPortInfo, LAP and APR are not: the kernel CM
// ignores LAP and APR on RoCE.
func (a AttrID) Known() bool { return a >= AttrREQ && a <= AttrSIDRREP }

func (a AttrID) String() string {
	if a == AttrClassPortInfo {
		return "ClassPortInfo"
	}
	if a >= AttrREQ && int(a-AttrREQ) < len(attrNames) {
		return attrNames[a-AttrREQ]
	}
	return "attr(0x" + strconv.FormatUint(uint64(a), 16) + ")"
}

// MsgKind is the 2-bit "Message REJected" field of a REJ and "Message
// MRAed" field of an MRA.
type MsgKind uint8

const (
	KindREQ   MsgKind = 0
	KindREP   MsgKind = 1
	KindOther MsgKind = 2 // REJ: any other message; MRA: LAP
)

func (k MsgKind) String() string {
	switch k {
	case KindREQ:
		return "REQ"
	case KindREP:
		return "REP"
	case KindOther:
		return "other"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// TransportType is the 2-bit Transport Service Type of a REQ.
type TransportType uint8

const (
	TransportRC TransportType = 0
	TransportUC TransportType = 1
	TransportRD TransportType = 2
	// TransportXRC is sent with Extended Transport Type 1.
	TransportXRC TransportType = 3
)

func (t TransportType) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportXRC:
		return "XRC"
	}
	return "transport(" + strconv.Itoa(int(t)) + ")"
}

// MTU is the 4-bit IBTA path MTU code of a REQ: 1..5 = 256..4096 bytes.
type MTU = wire.MTU

const (
	MTU256  = wire.MTU256
	MTU512  = wire.MTU512
	MTU1024 = wire.MTU1024
	MTU2048 = wire.MTU2048
	MTU4096 = wire.MTU4096
)

// MTUFromBytes returns the largest MTU code not above n bytes, or 0 when n
// is below 256.
func MTUFromBytes(n int) MTU { return wire.MTUFromBytes(n) }

// Timeout is a 5-bit IBTA time exponent: 4.096 µs × 2^t (roce-wire.md
// §6.7). The CM response timeouts, MRA service timeout, local ACK timeout,
// target ACK delay and packet lifetime all use it.
type Timeout uint8

// MaxTimeout is the largest exponent a 5-bit field holds (about 2.4 h).
const MaxTimeout Timeout = 31

// Duration returns 4.096 µs × 2^t. Only the low 5 bits of t count.
func (t Timeout) Duration() time.Duration { return 4096 * time.Nanosecond << (t & 31) }

// KernelDuration returns the Linux CM's approximation of t
// (cm_convert_to_ms: 2^max(t-8, 0) ms), which is what its timers use.
func (t Timeout) KernelDuration() time.Duration {
	t &= 31
	if t < 8 {
		return time.Millisecond
	}
	return time.Millisecond << (t - 8)
}

// TimeoutFor returns the smallest exponent whose Duration is at least d,
// or MaxTimeout when d is longer than that.
func TimeoutFor(d time.Duration) Timeout {
	for t := Timeout(0); t < MaxTimeout; t++ {
		if t.Duration() >= d {
			return t
		}
	}
	return MaxTimeout
}

// AckTimeout returns the local ACK timeout exponent the Linux CM derives
// from a CA's ACK delay and a path's packet lifetime (cm_ack_timeout: about
// 2 × lifetime + delay, in the exponent domain, capped at 31). rxe's ACK
// delay 15 with lifetime 18 gives 19, as in the captured REQs.
func AckTimeout(caAckDelay, packetLifetime Timeout) Timeout {
	d, p := int(caAckDelay), int(packetLifetime)
	t := p + 1
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if p+1 >= d-1 {
			t++
		}
	}
	return Timeout(min(t, int(MaxTimeout)))
}

func (t Timeout) String() string {
	return strconv.Itoa(int(t)) + " (" + t.Duration().String() + ")"
}

// RejectReason is the 16-bit reason of a REJ (roce-wire.md §6.6,
// ib_cm.h).
type RejectReason uint16

const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

// rejNames is the kernel's wording (cm.c ibcm_rej_reason_strs).
var rejNames = [...]string{
	RejNoQP:                      "no QP",
	RejNoEEC:                     "no EEC",
	RejNoResources:               "no resources",
	RejTimeout:                   "timeout",
	RejUnsupported:               "unsupported",
	RejInvalidCommID:             "invalid comm ID",
	RejInvalidCommInstance:       "invalid comm instance",
	RejInvalidServiceID:          "invalid service ID",
	RejInvalidTransportType:      "invalid transport type",
	RejStaleConn:                 "stale conn",
	RejRDCNotExist:               "RDC not exist",
	RejInvalidGID:                "invalid GID",
	RejInvalidLID:                "invalid LID",
	RejInvalidSL:                 "invalid SL",
	RejInvalidTrafficClass:       "invalid traffic class",
	RejInvalidHopLimit:           "invalid hop limit",
	RejInvalidPacketRate:         "invalid packet rate",
	RejInvalidAltGID:             "invalid alt GID",
	RejInvalidAltLID:             "invalid alt LID",
	RejInvalidAltSL:              "invalid alt SL",
	RejInvalidAltTrafficClass:    "invalid alt traffic class",
	RejInvalidAltHopLimit:        "invalid alt hop limit",
	RejInvalidAltPacketRate:      "invalid alt packet rate",
	RejPortCMRedirect:            "port CM redirect",
	RejPortRedirect:              "port redirect",
	RejInvalidMTU:                "invalid MTU",
	RejInsufficientRespResources: "insufficient resp resources",
	RejConsumerDefined:           "consumer defined",
	RejInvalidRNRRetry:           "invalid RNR retry",
	RejDuplicateLocalCommID:      "duplicate local comm ID",
	RejInvalidClassVersion:       "invalid class version",
	RejInvalidFlowLabel:          "invalid flow label",
	RejInvalidAltFlowLabel:       "invalid alt flow label",
	RejVendorOptionNotSupported:  "vendor option is not supported",
}

// String returns the kernel's wording for r (ibcm_reject_msg), including
// its "unrecognized reason" for codes it has no name for.
func (r RejectReason) String() string {
	if int(r) < len(rejNames) && rejNames[r] != "" {
		return rejNames[r]
	}
	return "unrecognized reason"
}

// SIDRStatus is the status byte of a SIDR_REP.
type SIDRStatus uint8

const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5 // unsupported class version
)

var sidrNames = [...]string{
	SIDRSuccess: "success", SIDRUnsupported: "unsupported", SIDRReject: "rejected",
	SIDRNoQP: "no QP", SIDRRedirect: "redirect", SIDRUnsupportedVersion: "unsupported version",
}

func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return "sidr_status(" + strconv.Itoa(int(s)) + ")"
}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type PortSpace uint16

const (
	PSIPoIB PortSpace = 0x0002
	PSTCP   PortSpace = 0x0106 // RC (and UC)
	PSUDP   PortSpace = 0x0111 // UD, via SIDR
	PSIB    PortSpace = 0x013F // any QP type
)

func (ps PortSpace) String() string {
	switch ps {
	case PSIPoIB:
		return "IPOIB"
	case PSTCP:
		return "TCP"
	case PSUDP:
		return "UDP"
	case PSIB:
		return "IB"
	}
	return "ps(0x" + strconv.FormatUint(uint64(ps), 16) + ")"
}

// IP-based service IDs: rdma_cm expects a CMA header in the private data
// of a REQ or SIDR_REQ whose service ID matches (IB_CMA_SERVICE_ID and
// its mask in cma.c).
const (
	CMAServiceID     uint64 = 0x0000000001000000
	CMAServiceIDMask uint64 = 0xFFFFFFFFFF000000
)

// ServiceID returns the service ID rdma_cm uses for port in port space ps:
// ps<<16 | port (roce-wire.md §7.1). TCP port 7174 gives 0x0000000001061c06.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID is the inverse of ServiceID. ok is false when sid is not
// of the form ps<<16 | port for one of the four port spaces.
func SplitServiceID(sid uint64) (ps PortSpace, port uint16, ok bool) {
	ps, port = PortSpace(sid>>16), uint16(sid)
	switch {
	case sid>>32 != 0:
		return 0, 0, false
	case ps == PSIPoIB, ps == PSTCP, ps == PSUDP, ps == PSIB:
		return ps, port, true
	}
	return 0, 0, false
}

// IsCMAServiceID reports whether sid is in the range for which the kernel
// expects a CMA header (TCP, UDP and IB port spaces; not IPoIB).
func IsCMAServiceID(sid uint64) bool { return sid&CMAServiceIDMask == CMAServiceID }
