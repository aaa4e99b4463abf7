package rdmacm

import (
	"strconv"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/verbs"
)

// EventType is an rdma_cm event type (enum rdma_cm_event_type, same
// numbers).
type EventType uint8

const (
	EventAddrResolved    EventType = 0  // RDMA_CM_EVENT_ADDR_RESOLVED
	EventAddrError       EventType = 1  // RDMA_CM_EVENT_ADDR_ERROR
	EventRouteResolved   EventType = 2  // RDMA_CM_EVENT_ROUTE_RESOLVED
	EventRouteError      EventType = 3  // RDMA_CM_EVENT_ROUTE_ERROR
	EventConnectRequest  EventType = 4  // RDMA_CM_EVENT_CONNECT_REQUEST
	EventConnectResponse EventType = 5  // RDMA_CM_EVENT_CONNECT_RESPONSE
	EventConnectError    EventType = 6  // RDMA_CM_EVENT_CONNECT_ERROR
	EventUnreachable     EventType = 7  // RDMA_CM_EVENT_UNREACHABLE
	EventRejected        EventType = 8  // RDMA_CM_EVENT_REJECTED
	EventEstablished     EventType = 9  // RDMA_CM_EVENT_ESTABLISHED
	EventDisconnected    EventType = 10 // RDMA_CM_EVENT_DISCONNECTED
	EventDeviceRemoval   EventType = 11 // RDMA_CM_EVENT_DEVICE_REMOVAL
	EventTimewaitExit    EventType = 15 // RDMA_CM_EVENT_TIMEWAIT_EXIT
)

var eventNames = [...]string{
	EventAddrResolved: "ADDR_RESOLVED", EventAddrError: "ADDR_ERROR", EventRouteResolved: "ROUTE_RESOLVED",
	EventRouteError: "ROUTE_ERROR", EventConnectRequest: "CONNECT_REQUEST", EventConnectResponse: "CONNECT_RESPONSE",
	EventConnectError: "CONNECT_ERROR", EventUnreachable: "UNREACHABLE", EventRejected: "REJECTED",
	EventEstablished: "ESTABLISHED", EventDisconnected: "DISCONNECTED", EventDeviceRemoval: "DEVICE_REMOVAL",
	12: "MULTICAST_JOIN", 13: "MULTICAST_ERROR", 14: "ADDR_CHANGE", EventTimewaitExit: "TIMEWAIT_EXIT",
}

// String returns the rdma_cm name without the RDMA_CM_EVENT_ prefix, as
// rdma_event_str does.
func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return "UNKNOWN EVENT(" + strconv.Itoa(int(t)) + ")"
}

// RejectReason is the reason code of a CM REJ (IBTA; ib_cm.h).
type RejectReason uint16

// Reject reasons an application meets.
const (
	RejectNoResources      RejectReason = 3  // a limit on pending connection requests (limits.go)
	RejectTimeout          RejectReason = 4  // the peer gave up (destroyed its ID while connecting)
	RejectInvalidServiceID RejectReason = 8  // nothing listens on that port
	RejectStaleConn        RejectReason = 10 // IDs still in use or in timewait at the peer
	RejectInvalidGID       RejectReason = 12
	RejectConsumerDefined  RejectReason = 28 // the application rejected (or rdma_cm validation failed)
)

// SIDRStatus is the status of a SIDR_REP (IBTA; enum ib_cm_sidr_status).
// rdma_cm reports a non-zero one as UNREACHABLE with Event.Status = the
// status.
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess     SIDRStatus = 0
	SIDRUnsupported SIDRStatus = 1 // nothing listens on that port (service ID not supported)
	SIDRReject      SIDRStatus = 2 // the application rejected, or rdma_cm validation failed
	SIDRNoQP        SIDRStatus = 3
	SIDRRedirect    SIDRStatus = 4
	SIDRBadVersion  SIDRStatus = 5
)

func (s SIDRStatus) String() string { return cmwire.SIDRStatus(s).String() }

// String returns the kernel's wording (ibcm_reject_msg).
func (r RejectReason) String() string { return cmwire.RejectReason(r).String() }

// Event is an rdma_cm event (struct rdma_cm_event). Events need no
// acknowledgement; the value is the caller's.
type Event struct {
	Type EventType
	// ID is the ID the event is about; for CONNECT_REQUEST it is the new
	// ID of the incoming connection.
	ID *ID
	// Listen is the listening ID of a CONNECT_REQUEST.
	Listen *ID
	// Status is librdmacm's status: 0, the REJ reason for REJECTED, or a
	// negative errno (-110, ETIMEDOUT, for UNREACHABLE).
	Status int
	// Err is nil, a *RejectError for REJECTED, or an error for the
	// failures (ADDR_ERROR, ROUTE_ERROR, CONNECT_ERROR, UNREACHABLE).
	Err error
	// Param holds what the peer offered, from this side's point of view
	// (its initiator depth is our ResponderResources), and the private
	// data of the REQ (56 bytes after the CMA header), REP (196), REJ
	// (148). The CM sends private data zero padded, so the length is the
	// field's, not what the peer supplied.
	Param ConnParam
	// UD is set on the events of UD port spaces (PSUDP, and PSIB with a UD
	// QP) that carry addressing: ESTABLISHED on the active side (the
	// peer's QPN and Q_Key from the SIDR_REP, and an AH to reach it) and
	// CONNECT_REQUEST on the passive side (QPN 0: a SIDR_REQ does not
	// carry the requester's QPN; take it from the first datagram's
	// WC.SrcQP). rdma_cm's param.ud.
	UD *UDParam
}

// UDParam addresses a UD peer (struct rdma_ud_param less its private
// data, which is in Event.Param).
type UDParam struct {
	QPN  verbs.QPN
	QKey verbs.QKey
	// AH describes the path to the peer; pass it to PD.CreateAH.
	AH verbs.AHAttr
}

// UDPQKey is the Q_Key rdma_cm gives UD QPs of PSUDP and PSIB IDs and
// announces in its SIDR_REPs (RDMA_UDP_QKEY). Post UD sends to a peer with
// SendWR.RemoteQKey = Event.UD.QKey.
const UDPQKey verbs.QKey = verbs.QKey(cmwire.RDMAUDPQKey)

// PrivateData returns e.Param.PrivateData.
func (e *Event) PrivateData() []byte { return e.Param.PrivateData }

func (e *Event) String() string {
	s := e.Type.String()
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// ConnParam are the connection parameters of Connect and Accept (struct
// rdma_conn_param). Build one from DefaultConnParam: zero fields are
// sent as zeros.
type ConnParam struct {
	// PrivateData goes in the REQ (at most 56 bytes), REP (196) or REJ
	// (148); with a pre-shared key (psk.go) the REQ and REP take 32 bytes
	// less (24, 164).
	PrivateData []byte
	// ResponderResources is how many RDMA READ/atomic requests from the
	// peer this side serves at once (max_dest_rd_atomic); InitiatorDepth
	// how many it issues (max_rd_atomic). MaxResources means the device
	// maximum.
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        bool
	// RetryCount and RNRRetryCount (0..7) become the peer QP's retry_cnt
	// (REQ only) and rnr_retry.
	RetryCount    uint8
	RNRRetryCount uint8
	// SRQ tells the peer this side's QP uses a shared receive queue.
	SRQ bool
	// QPNum is the QP to advertise when the ID has no QP of its own
	// (CreateQP not called); the caller then moves its QP itself.
	QPNum uint32
	// SegmentSize is tbrdma's large-segment extension (verbs
	// QPAttrSegmentSize), agreed through an 8-byte trailer in the CM
	// private data (segment.go). In Connect: the size to offer (then at
	// most 48 bytes of PrivateData), 0 for none. In Accept: the largest
	// size to accept when the REQ offered one, 0 to decline. In a
	// CONNECT_REQUEST: what the peer offered; in ESTABLISHED and
	// CONNECT_RESPONSE: the size agreed (0: a standard connection). The
	// context is enabled for it (verbs.Context.SetMaxSegmentSize) when
	// the sizes agree. Offer it only to tbrdma peers (their mDNS TXT
	// "seg" key says so): a stock peer sees the trailer as private data.
	SegmentSize int
}

// DefaultConnParam returns the parameters Connect(nil) and Accept(nil)
// use but for Accept's choice of resources: the device maximum of READ and
// atomic resources both ways (MaxResources; a connection then uses the
// smaller of both ends' values), 7 retries of a lost packet, RNR retry 7
// (retry for ever), no private data. ConnParam's zero value is not
// such a default: it is passed on as zeros, as librdmacm passes a C
// program's rdma_conn_param, and zero resources disable READ and atomics,
// zero retries any recovery from loss. Change the fields you need on the
// result:
//
//	p := rdmacm.DefaultConnParam()
//	p.PrivateData = rb // e.g. a marshalled verbs.RemoteBuffer
//	err := id.Connect(&p)
func DefaultConnParam() ConnParam {
	return ConnParam{ResponderResources: MaxResources, InitiatorDepth: MaxResources, RetryCount: 7, RNRRetryCount: 7}
}

// MaxResources in ConnParam.ResponderResources or InitiatorDepth means
// the device maximum (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).
const MaxResources = 0xFF
