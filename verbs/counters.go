package verbs

import (
	"fmt"
	"sync/atomic"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// DropReason names why a received packet was dropped without effect.
// The first group is set by the transport endpoint or by the packet parser
// (the two share wire.Reason); the second by the engine.
type DropReason uint8

const (
	DropShort     DropReason = iota // truncated: shorter than its headers, pad and ICRC
	DropICRC                        // ICRC does not match (corrupted)
	DropTVer                        // BTH transport version not 0
	DropOpcode                      // opcode unknown or not supported (RD, XRC, CNP, UC READ …)
	DropPad                         // pad count inconsistent with the payload
	DropOversize                    // payload on an opcode that carries none, or longer than the largest packet
	DropQPN                         // destination QPN 0
	DropMAD                         // malformed management datagram on QP1
	DropUnknownQP                   // no QP with the destination QPN
	DropQPType                      // opcode of another transport (an RC opcode to a UD QP …)
	DropState                       // the QP is not in a state that accepts the packet
	DropPeer                        // source address is not the connected QP's peer
	DropQKey                        // Q_Key mismatch (UD, QP1)
	DropPKey                        // P_Key not the default partition
	DropPSN                         // out of sequence, after the one PSN sequence NAK (RC) or a lost packet (UC)
	DropResponse                    // a response that answers nothing outstanding, or out of order
	DropNoRecv                      // UD or UC SEND with no receive WQE posted
	DropDuplicate                   // duplicate READ or atomic that matches no saved request
	DropAccess                      // UC WRITE outside what the rkey grants (RC answers with a NAK instead)
	DropLength                      // UC packet whose length breaks the message (RC: NAK invalid request)
	NumDropReasons
)

var dropNames = [NumDropReasons]string{
	DropShort: "short", DropICRC: "icrc", DropTVer: "tver", DropOpcode: "opcode", DropPad: "pad",
	DropOversize: "oversize", DropQPN: "qpn", DropMAD: "mad", DropUnknownQP: "unknown_qp",
	DropQPType: "qp_type", DropState: "qp_state", DropPeer: "peer", DropQKey: "qkey", DropPKey: "pkey",
	DropPSN: "psn", DropResponse: "response", DropNoRecv: "no_recv", DropDuplicate: "duplicate",
	DropAccess: "access", DropLength: "length",
}

// String returns the reason's snake_case name, as Counters.Fields uses it
// after "drop_".
func (r DropReason) String() string {
	if r < NumDropReasons {
		return dropNames[r]
	}
	return fmt.Sprintf("drop(%d)", uint8(r))
}

// dropReasonOf maps a parser or transport reason to a DropReason.
func dropReasonOf(r wire.Reason) DropReason {
	switch r {
	case wire.ReasonShort:
		return DropShort
	case wire.ReasonICRC:
		return DropICRC
	case wire.ReasonTVer:
		return DropTVer
	case wire.ReasonOpcode:
		return DropOpcode
	case wire.ReasonPad:
		return DropPad
	case wire.ReasonPayload:
		return DropOversize
	case wire.ReasonQPN:
		return DropQPN
	case wire.ReasonMAD:
		return DropMAD
	}
	return DropOpcode
}

// NAKKind names the NAKs of an AETH, for counters.
type NAKKind uint8

const (
	NAKSeq       NAKKind = iota // PSN sequence error (recoverable: go back N)
	NAKInvReq                   // invalid request
	NAKRemAccess                // remote access error
	NAKRemOp                    // remote operational error
	NumNAKKinds
)

var nakNames = [NumNAKKinds]string{NAKSeq: "seq", NAKInvReq: "inv_req", NAKRemAccess: "rem_access", NAKRemOp: "rem_op"}

func (k NAKKind) String() string {
	if k < NumNAKKinds {
		return nakNames[k]
	}
	return fmt.Sprintf("nak(%d)", uint8(k))
}

func nakKindOf(syn wire.Syndrome) NAKKind {
	switch syn.NAK() {
	case wire.NAKPSNSeqError:
		return NAKSeq
	case wire.NAKInvalidReq:
		return NAKInvReq
	case wire.NAKRemoteAccess:
		return NAKRemAccess
	}
	return NAKRemOp
}

// Counters is a snapshot of a context's counters, from Context.Counters.
// Every field only grows while the context is open.
type Counters struct {
	// From the transport endpoint: packets and bytes that passed the ICRC
	// check, and that were sent.
	PacketsIn, PacketsOut uint64
	BytesIn, BytesOut     uint64
	// MADsIn and MADsOut are QP1 (GSI) management datagrams: the
	// connection manager's traffic, retries included.
	MADsIn, MADsOut uint64

	// Requester.
	Retransmits     uint64 // packets sent again (go-back-N after a NAK, a timeout or a lost response; a gap or probe with selective retransmission)
	Probes          uint64 // tail-loss probes (selective retransmission: no ACK for a while)
	Timeouts        uint64 // retransmit timer expiries
	RetryExcErrs    uint64 // work requests completed with RETRY_EXC_ERR (peer silent for retry_cnt+1 timeouts)
	RNRRetryExcErrs uint64 // work requests completed with RNR_RETRY_EXC_ERR
	RNRNAKsRcvd     uint64
	NAKsRcvd        [NumNAKKinds]uint64

	// Responder.
	RequestsExecuted uint64 // request messages executed: SEND and WRITE placed, READ and atomic answered (never a duplicate)
	DupRequests      uint64 // requests with a PSN already executed: re-ACKed or replayed, never executed again
	Held             uint64 // request packets kept past a gap until it was filled (selective retransmission)
	RNRNAKsSent      uint64
	NAKsSent         [NumNAKKinds]uint64

	// Drops counts the received packets dropped without effect, by reason.
	Drops [NumDropReasons]uint64

	// CM counts the connection manager's events (package rdmacm), by kind.
	CM [NumCMCounters]uint64
}

// CMCounter names a connection-manager counter (Counters.CM), moved by
// package rdmacm.
type CMCounter uint8

const (
	CMRetries         CMCounter = iota // CM MADs resent by a timer (REQ, REP, DREQ, SIDR_REQ)
	CMRejectsLimit                     // requests refused by a per-peer or total limit on pending connections
	CMAuthFailures                     // requests, replies and RTUs that failed the pre-shared key check
	CMHalfOpenExpired                  // passive connections dropped because the RTU never came
	NumCMCounters
)

var cmNames = [NumCMCounters]string{"cm_retries", "cm_rejects_limit", "cm_auth_failures", "cm_half_open_expired"}

// TotalDrops sums Drops.
func (c *Counters) TotalDrops() uint64 {
	var n uint64
	for _, v := range c.Drops {
		n += v
	}
	return n
}

// CounterField is one named counter of a snapshot.
type CounterField struct {
	Name  string // snake_case: "packets_in", "naks_sent_rem_access", "drop_icrc" …
	Value uint64
}

// Fields lists every counter of the snapshot by name, in a fixed order,
// for display and JSON.
func (c *Counters) Fields() []CounterField {
	f := []CounterField{
		{"packets_in", c.PacketsIn}, {"packets_out", c.PacketsOut},
		{"bytes_in", c.BytesIn}, {"bytes_out", c.BytesOut},
		{"mads_in", c.MADsIn}, {"mads_out", c.MADsOut},
		{"retransmits", c.Retransmits}, {"probes", c.Probes}, {"timeouts", c.Timeouts},
		{"retry_exc_errs", c.RetryExcErrs}, {"rnr_retry_exc_errs", c.RNRRetryExcErrs},
		{"requests_executed", c.RequestsExecuted}, {"dup_requests", c.DupRequests}, {"held", c.Held},
		{"rnr_naks_sent", c.RNRNAKsSent}, {"rnr_naks_rcvd", c.RNRNAKsRcvd},
	}
	for k := range NumNAKKinds {
		f = append(f, CounterField{"naks_sent_" + k.String(), c.NAKsSent[k]})
	}
	for k := range NumNAKKinds {
		f = append(f, CounterField{"naks_rcvd_" + k.String(), c.NAKsRcvd[k]})
	}
	for r := range NumDropReasons {
		f = append(f, CounterField{"drop_" + r.String(), c.Drops[r]})
	}
	for k := range NumCMCounters {
		f = append(f, CounterField{cmNames[k], c.CM[k]})
	}
	return f
}

// counters are a context's live counters.
type counters struct {
	madsIn, madsOut  atomic.Uint64
	retransmits      atomic.Uint64
	probes           atomic.Uint64
	held             atomic.Uint64
	timeouts         atomic.Uint64
	retryExc         atomic.Uint64
	rnrRetryExc      atomic.Uint64
	rnrNAKsRcvd      atomic.Uint64
	naksRcvd         [NumNAKKinds]atomic.Uint64
	executed         atomic.Uint64
	dupRequests      atomic.Uint64
	rnrNAKsSent      atomic.Uint64
	naksSent         [NumNAKKinds]atomic.Uint64
	drops            [NumDropReasons]atomic.Uint64
	cm               hooks.CMCounters // moved by package rdmacm
	packetsHandled   atomic.Uint64    // packets the receive loop handed to handle
	packetsQueuedOut atomic.Uint64    // packets flush handed to the transport
}

func (k *counters) drop(r DropReason) { k.drops[r].Add(1) }

// Counters returns a snapshot of the context's counters: the engine's
// and, merged in, its transport endpoint's (packets, bytes, and the drops
// it made before the engine saw a packet: bad ICRC, truncated, oversized).
func (c *Context) Counters() Counters {
	k := &c.ctr
	s := Counters{
		MADsIn: k.madsIn.Load(), MADsOut: k.madsOut.Load(),
		Retransmits: k.retransmits.Load(), Probes: k.probes.Load(), Timeouts: k.timeouts.Load(),
		Held:         k.held.Load(),
		RetryExcErrs: k.retryExc.Load(), RNRRetryExcErrs: k.rnrRetryExc.Load(),
		RNRNAKsRcvd: k.rnrNAKsRcvd.Load(), RequestsExecuted: k.executed.Load(),
		DupRequests: k.dupRequests.Load(), RNRNAKsSent: k.rnrNAKsSent.Load(),
	}
	for i := range s.NAKsSent {
		s.NAKsSent[i] = k.naksSent[i].Load()
		s.NAKsRcvd[i] = k.naksRcvd[i].Load()
	}
	for i := range s.Drops {
		s.Drops[i] = k.drops[i].Load()
	}
	s.CM = [NumCMCounters]uint64{
		CMRetries: k.cm.Retries.Load(), CMRejectsLimit: k.cm.RejectsLimit.Load(),
		CMAuthFailures: k.cm.AuthFailures.Load(), CMHalfOpenExpired: k.cm.HalfOpenExpired.Load(),
	}
	ts := c.conn.Stats()
	s.PacketsIn, s.PacketsOut, s.BytesIn, s.BytesOut = ts.PacketsIn, ts.PacketsOut, ts.BytesIn, ts.BytesOut
	if s.PacketsIn == 0 && s.PacketsOut == 0 {
		// A Conn that keeps no statistics: count what the engine saw.
		s.PacketsIn, s.PacketsOut = k.packetsHandled.Load(), k.packetsQueuedOut.Load()
	}
	for r, v := range ts.Drops {
		if wire.Reason(r) != wire.ReasonNone {
			s.Drops[dropReasonOf(wire.Reason(r))] += v
		}
	}
	return s
}
