// Package rdmacm is an rdma_cm-shaped connection manager (librdmacm) over
// package verbs: it sets up reliable connections the way the Linux kernel's
// rdma_cm does on RoCEv2, with IB CM messages (REQ, REP, RTU, REJ, MRA,
// DREQ, DREP) in MADs on QP1 and the CMA header in the REQ's private data,
// so either end may be a stock librdmacm program (rping, perftest -R) on
// rdma_rxe.
//
// # Object model
//
// An [EventChannel] delivers events in order ([EventChannel.GetEvent]). An
// [ID] is created on a channel for one verbs.Context and a port space
// ([PSTCP], [PSUDP], [PSIB]). The active side calls [ID.ResolveAddr], [ID.ResolveRoute],
// [ID.CreateQP] and [ID.Connect], waiting for ADDR_RESOLVED,
// ROUTE_RESOLVED and ESTABLISHED (or REJECTED, UNREACHABLE, CONNECT_ERROR).
// The passive side calls [ID.Bind] and [ID.Listen]; each connection
// request arrives as a CONNECT_REQUEST event carrying a new ID, on which it
// calls [ID.CreateQP] and [ID.Accept] (ESTABLISHED follows when the RTU
// arrives) or [ID.Reject]. Either side ends with [ID.Disconnect]: the other
// gets DISCONNECTED and answers with its own Disconnect; both then get
// TIMEWAIT_EXIT about two seconds later.
//
// The QP of an ID is moved to RTS by the package from the CM exchange, as
// the kernel's ib_cm_init_qp_attr does (roce-wire.md §6.10): PSNs from the
// REQ and REP, path MTU from the route, the local ACK timeout, retry counts
// and RDMA READ/atomic depths from [ConnParam]. The active side's QP is in
// RTS before ESTABLISHED; the passive side's before the REP leaves.
//
// # Lifetimes
//
// Destroy every ID, including the ones CONNECT_REQUEST hands out, and the
// channel. [ID.Destroy] does what rdma_destroy_id does on the wire: a REJ
// for a connection in progress, a DREQ for an established one, the DREP
// for a received DREQ. It does not close the QP ([ID.DestroyQP] does).
// While an ID exists its verbs.Context runs one goroutine pair that reads
// QP1 and runs the CM timers; the last Destroy on a context stops it.
//
// # Concurrency
//
// All methods are safe for concurrent use. Events of one channel are
// delivered in order; the channel buffers without bound, so an
// application that stops reading holds memory, not the CM.
//
// # Timers
//
// As the kernel: a REQ is resent every 2 × conv(packet lifetime 18) +
// conv(CM response timeout 20) = 6.144 s, 15 times, then UNREACHABLE
// (about 98 s); a REP every conv(the REQ's local CM response timeout)
// (4.096 s) up to the REQ's max CM retries; a duplicate REQ before
// Accept gets an MRA. Timewait lasts 2.048 s.
//
// # UD
//
// In the UD port space ([PSUDP], or [PSIB] with a UD QP) CreateQP makes a
// UD QP in RTS with Q_Key [UDPQKey], Connect sends a SIDR_REQ (resent
// every 4.096 s, 15 times) and ESTABLISHED carries the peer's QPN, Q_Key
// and address handle in [Event].UD, as librdmacm's udaddy expects. The
// passive side gets CONNECT_REQUEST with Event.UD (no QPN: take it from
// the first datagram's WC.SrcQP) and answers with Accept or Reject (a
// SIDR_REP). A SIDR_REP with a non-zero status is UNREACHABLE with
// Event.Status = the status (1: nobody listens, 2: rejected).
//
// # Stale connections and timewait
//
// As the kernel's cm_match_req: a REQ from a peer QP (QPN, CA GUID) that
// still has a live connection here is answered with REJ 10 and the old
// connection gets a DREQ; a copy of a REQ whose connection is in timewait
// gets REJ 10, also when the passive ID was destroyed before its timewait
// ended.
//
// # Security
//
// An optional pre-shared key ([ChannelOptions].PSK, [ID.SetPSK],
// [SetDevicePSK]) authenticates the connection setup: the REQ, REP and RTU
// (SIDR_REQ and SIDR_REP for UD) carry a 32-byte trailer with a truncated
// HMAC-SHA256 over the whole message, chained so that each side proves the
// key and nothing can be replayed into another connection; a failure is
// REJ 28 "tbrdma: authentication failed" and an error matching
// [ErrAuthFailed]. Listeners bound the connections not yet established
// per peer address and in total ([Limits]; REJ 3 beyond), and a REQ's own
// timeouts are capped so that a half-open connection is freed within
// about 131 s. docs/wire-format.md and docs/rdmacm.md have the details;
// the data plane is not authenticated.
//
// # Dial and Listen
//
// [Dial] and [Listen] / [Listener.Accept] are the Go-shaped layer for RC:
// they return a [Conn] with its QP in RTS, honour context cancellation
// (an abandoned Dial sends what rdma_destroy_id sends) and answer the
// peer's disconnect.
//
// Not yet: IPv6 addresses in tests, LAP/APR, multicast, ports other than
// 4791 for the peer.
package rdmacm
