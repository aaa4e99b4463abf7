package verbs

import (
	"fmt"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Identifier types shared with the wire format.
type (
	PSN  = wire.PSN
	QPN  = wire.QPN
	LKey = wire.LKey
	RKey = wire.RKey
	QKey = wire.QKey
	GID  = wire.GID
)

// MTU is an InfiniBand path MTU, numbered as in ibverbs (IBV_MTU_*).
type MTU = wire.MTU

const (
	MTU256  = wire.MTU256
	MTU512  = wire.MTU512
	MTU1024 = wire.MTU1024
	MTU2048 = wire.MTU2048
	MTU4096 = wire.MTU4096
)

// MTUForLink returns the largest IB MTU whose packets fit a link MTU the way
// rdma_rxe computes a port's active MTU: link MTU minus 80 header bytes,
// clamped to 256..4096.
func MTUForLink(linkMTU int) MTU {
	if m := wire.MTUFromBytes(linkMTU - 80); m != 0 {
		return m
	}
	return MTU256
}

// AccessFlags are memory region and queue pair access rights (IBV_ACCESS_*).
type AccessFlags uint32

const (
	AccessLocalWrite   AccessFlags = 1
	AccessRemoteWrite  AccessFlags = 2
	AccessRemoteRead   AccessFlags = 4
	AccessRemoteAtomic AccessFlags = 8
)

func (a AccessFlags) String() string {
	s := ""
	for _, f := range []struct {
		f AccessFlags
		n string
	}{{AccessLocalWrite, "LOCAL_WRITE"}, {AccessRemoteWrite, "REMOTE_WRITE"}, {AccessRemoteRead, "REMOTE_READ"}, {AccessRemoteAtomic, "REMOTE_ATOMIC"}} {
		if a&f.f != 0 {
			if s != "" {
				s += "|"
			}
			s += f.n
		}
	}
	if s == "" {
		return "0"
	}
	return s
}

// QPType is a queue pair transport type (IBV_QPT_*).
type QPType uint8

const (
	QPTypeRC QPType = 2
	QPTypeUC QPType = 3
	QPTypeUD QPType = 4
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	}
	return fmt.Sprintf("qptype(%d)", uint8(t))
}

// QPState is a queue pair state (IBV_QPS_*).
type QPState uint8

const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateSQD   QPState = 4
	QPStateSQE   QPState = 5
	QPStateErr   QPState = 6
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("qpstate(%d)", uint8(s))
}

// WROpcode is a send work request opcode (IBV_WR_*).
type WROpcode uint8

const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRSendWithInv       WROpcode = 9
)

var wrOpNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAndAdd: "ATOMIC_FETCH_AND_ADD", WRSendWithInv: "SEND_WITH_INV",
}

func (o WROpcode) String() string {
	if n, ok := wrOpNames[o]; ok {
		return n
	}
	return fmt.Sprintf("wr_opcode(%d)", uint8(o))
}

func (o WROpcode) isAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAndAdd }
func (o WROpcode) isReadLike() bool {
	return o == WRRDMARead || o.isAtomic()
}
func (o WROpcode) isSend() bool {
	return o == WRSend || o == WRSendWithImm || o == WRSendWithInv
}

// SendFlags modify a send work request (IBV_SEND_*).
type SendFlags uint32

const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
)

// WCOpcode is the opcode of a work completion (IBV_WC_*).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("wc_opcode(%d)", uint8(o))
}

// WCFlags describe a work completion (IBV_WC_*).
type WCFlags uint32

const (
	WCFlagGRH     WCFlags = 1 // the first 40 bytes of the receive buffer hold a GRH
	WCFlagWithImm WCFlags = 2 // ImmData is valid
	WCFlagWithInv WCFlags = 4 // InvalidatedRKey is valid
)

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRDReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

// wcStatusText is ibv_wc_status_str's wording.
var wcStatusText = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusText) {
		return wcStatusText[s]
	}
	return fmt.Sprintf("wc_status(%d)", uint8(s))
}

// SGE is a scatter/gather element: Length bytes at virtual address Addr of
// the memory region named by LKey (MR.Addr gives a region's base address).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   LKey
}

// SendWR is a send work request (struct ibv_send_wr). PostSend copies it:
// the caller may reuse the value and its SGList at once. The memory the
// SGList names must stay registered and unchanged until the work request
// completes (unless SendInline copied it).
type SendWR struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	SGList []SGE
	// Inline, with SendInline, holds the data of an inline send itself,
	// and SGList is ignored: ibverbs lets inline data come from memory
	// that is not registered (a C program's stack, say). PostSend copies
	// it. Without Inline an inline send gathers from SGList, which must
	// then name registered memory.
	Inline []byte
	// ImmData is the immediate value of *_WITH_IMM requests. It travels
	// big-endian and arrives in WC.ImmData with the same numeric value.
	ImmData uint32
	// InvalidateRKey is the remote key a SEND_WITH_INV invalidates.
	InvalidateRKey RKey
	// RemoteAddr and RKey name the remote memory of RDMA and atomic requests.
	RemoteAddr uint64
	RKey       RKey
	// CompareAdd is the addend of FETCH_AND_ADD or the expected value of
	// CMP_AND_SWP; Swap is the value CMP_AND_SWP writes.
	CompareAdd uint64
	Swap       uint64
	// AH, RemoteQPN and RemoteQKey address a UD send. A RemoteQKey with
	// the high bit set means: use the sending QP's own Q_Key.
	AH         *AH
	RemoteQPN  QPN
	RemoteQKey QKey
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// ImmData is valid when Flags has WCFlagWithImm.
	ImmData uint32
	// InvalidatedRKey is valid when Flags has WCFlagWithInv.
	InvalidatedRKey RKey
	QPN             QPN // the local QP
	SrcQP           QPN // UD: the sending QP
	Flags           WCFlags
	PKeyIndex       uint16
}

// Err returns nil for a successful completion and an error describing the
// status otherwise. It allocates only for failed completions.
func (wc *WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{WRID: wc.WRID, QPN: wc.QPN, Status: wc.Status, Opcode: wc.Opcode}
}

// WCError is the error form of a failed work completion.
type WCError struct {
	WRID   uint64
	QPN    QPN
	Status WCStatus
	Opcode WCOpcode
}

func (e *WCError) Error() string {
	return fmt.Sprintf("work request %d on QP %v failed: %v (status %d)", e.WRID, e.QPN, e.Status, uint8(e.Status))
}
