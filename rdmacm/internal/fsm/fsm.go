// Package fsm is the IB CM connection state machine of one rdma_cm
// connection (roce-wire.md §6.8, §6.9), as pure code: every method takes
// the current time, and returns the MADs to send to the peer and what
// happened; [Conn.Deadline] says when [Conn.Tick] must run next. No
// goroutines, no timers, no sockets.
//
// The machine knows comm IDs, the transaction ID, the peer's QPN (for the
// DREQ) and the timers. The caller builds REQ and REP (they depend on the
// QP and the route) and hands them in; the machine builds RTU, REJ, MRA,
// DREQ and DREP itself and keeps the REQ, REP and DREQ for retransmission.
//
// Active side:  Idle -Connect-> REQSent -REP-> REPRcvd -SendRTU-> Established
// Passive side: (NewPassive) REQRcvd -Accept-> REPSent -RTU-> Established
// Both:         Established -Disconnect-> DREQSent -DREP/timeout-> TimeWait
//
//	Established -DREQ-> DREQRcvd -Disconnect-> TimeWait -timer-> Closed
package fsm

import (
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// State is a CM connection state (the kernel's ib_cm states, less LAP and
// SIDR).
type State uint8

const (
	Idle State = iota
	REQSent
	MRAREQRcvd // REQ sent, the peer asked for more time
	REQRcvd
	MRAREQSent // REQ received, MRA sent, not accepted yet
	REPSent
	REPRcvd
	Established
	DREQSent
	DREQRcvd
	TimeWait
	Closed
)

var stateNames = [...]string{"IDLE", "REQ_SENT", "MRA_REQ_RCVD", "REQ_RCVD", "MRA_REQ_SENT", "REP_SENT",
	"REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "CLOSED"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(?)"
}

// Event is what a step of the machine reports to its user.
type Event uint8

const (
	EvNone Event = iota
	// EvGotREP: a REP answered our REQ (active). The caller moves its QP to
	// RTR and RTS from the REP and calls SendRTU, or Reject.
	EvGotREP
	// EvEstablished: RTU received (passive) or sent (active).
	EvEstablished
	// EvRejected: a REJ ended the connection attempt; see Result.Msg.
	EvRejected
	// EvUnreachable: REQ or REP retries ran out.
	EvUnreachable
	// EvDisconnected: DREQ received, DREP received, or DREQ retries ran
	// out. Reported once per connection.
	EvDisconnected
	// EvTimewaitExit: the timewait timer expired; the connection is Closed.
	EvTimewaitExit
	// EvSIDRReply: a SIDR_REP answered our SIDR_REQ; see Result.Msg.
	EvSIDRReply
)

var eventNames = [...]string{"none", "got REP", "established", "rejected", "unreachable", "disconnected", "timewait exit", "SIDR reply"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "event(?)"
}

// Result is the outcome of one step: MADs to send to the peer (each 256
// bytes, in order) and at most one event.
type Result struct {
	Send  [][]byte
	Event Event
	// Msg is the received message behind Event (the REP for EvGotREP, the
	// REJ for EvRejected, the RTU for passive Established, the DREQ or DREP
	// for Disconnected). It aliases the caller's buffer.
	Msg cmwire.Message
}

func (r *Result) send(m []byte) { r.Send = append(r.Send, m) }

// Timing holds the timer values of a connection.
type Timing struct {
	// Interval is the retransmission interval of REQ (active) or REP
	// (passive), and of DREQ.
	Interval time.Duration
	// MaxRetries is the number of retransmissions after the first send.
	MaxRetries int
	// TimeWait is how long the IDs stay in timewait after a disconnect.
	TimeWait time.Duration
}

// ActiveTiming returns the kernel's timers for a REQ with the given remote
// CM response timeout, packet lifetime and max CM retries: REQ interval =
// 2 × conv(PLT) + conv(remote CM response timeout), timewait =
// conv(PLT + 1) (roce-wire.md §6.8).
func ActiveTiming(remoteCMResponse, packetLifetime cmwire.Timeout, maxRetries uint8) Timing {
	return Timing{
		Interval:   2*packetLifetime.KernelDuration() + remoteCMResponse.KernelDuration(),
		MaxRetries: int(maxRetries),
		TimeWait:   (packetLifetime + 1).KernelDuration(),
	}
}

// PassiveTiming returns the kernel's timers for answering req: REP
// interval = conv(REQ local CM response timeout), REQ max CM retries,
// timewait = conv(REQ local ACK timeout). Unlike the kernel, the two
// timeouts the peer chooses are capped (MaxPassiveCMResponseTimeout,
// MaxPassiveTimeWaitTimeout), so that a hostile REQ cannot keep a
// half-open connection for hours: at most 16 × 8.192 s ≈ 131 s of REP
// retries, 16.4 s of timewait. Stock rdma_cm peers (20, about 19) are
// below the caps.
func PassiveTiming(req cmwire.REQ) Timing {
	return Timing{
		Interval:   min(req.LocalCMResponseTimeout(), MaxPassiveCMResponseTimeout).KernelDuration(),
		MaxRetries: int(req.MaxCMRetries()),
		TimeWait:   min(req.Primary().LocalACKTimeout(), MaxPassiveTimeWaitTimeout).KernelDuration(),
	}
}

// Caps of PassiveTiming.
const (
	MaxPassiveCMResponseTimeout cmwire.Timeout = 21 // conv: 8.192 s
	MaxPassiveTimeWaitTimeout   cmwire.Timeout = 22 // conv: 16.384 s
)

// MRAServiceTimeout is the service timeout rdma_cm puts in the MRA it sends
// for a REQ the application has not answered yet (CMA_CM_MRA_SETTING).
const MRAServiceTimeout cmwire.Timeout = 24

// Conn is one CM connection. The zero value is not usable: use NewActive
// or NewPassive.
type Conn struct {
	state    State
	active   bool
	LocalID  cmwire.CommID
	RemoteID cmwire.CommID
	TID      uint64
	// LocalQPN and RemoteQPN are the QPs of the connection; the DREQ
	// carries RemoteQPN and a received DREQ must carry LocalQPN.
	LocalQPN, RemoteQPN wire.QPN
	timing              Timing

	retx      []byte // the MAD being retransmitted (REQ, REP or DREQ)
	left      int    // retransmissions left
	interval  time.Duration
	deadline  time.Time // zero: no timer
	reported  bool      // Disconnected already reported
	rtu, drep []byte    // last RTU / DREP sent, for duplicates
}

// NewActive returns an Idle connection for the active side.
func NewActive(local cmwire.CommID, tid uint64, localQPN wire.QPN, t Timing) *Conn {
	return &Conn{state: Idle, active: true, LocalID: local, TID: tid, LocalQPN: localQPN, timing: t}
}

// NewPassive returns a connection in REQRcvd for a received REQ.
func NewPassive(local cmwire.CommID, msg cmwire.Message, localQPN wire.QPN) *Conn {
	req := msg.REQ()
	return &Conn{state: REQRcvd, LocalID: local, RemoteID: req.LocalCommID(), TID: msg.TransactionID(),
		LocalQPN: localQPN, RemoteQPN: req.LocalQPN(), timing: PassiveTiming(req)}
}

// State returns the current state.
func (c *Conn) State() State { return c.state }

// Active reports whether c is the active side.
func (c *Conn) Active() bool { return c.active }

// Deadline returns when Tick must next run; the zero time means no timer.
func (c *Conn) Deadline() time.Time { return c.deadline }

// Timing returns the timers in use.
func (c *Conn) Timing() Timing { return c.timing }

func (c *Conn) arm(now time.Time, mad []byte, interval time.Duration) {
	c.retx, c.left, c.interval = mad, c.timing.MaxRetries, interval
	c.deadline = now.Add(interval)
}

func (c *Conn) disarm() { c.retx, c.deadline = nil, time.Time{} }

func (c *Conn) enterTimeWait(now time.Time) {
	c.retx = nil
	c.state = TimeWait
	c.deadline = now.Add(c.timing.TimeWait)
}

func (c *Conn) mad(body cmwire.Body) []byte {
	return cmwire.AppendMAD(make([]byte, 0, wire.MADSize), c.TID, body)
}

// Connect sends req (a complete REQ MAD) and starts its timer.
func (c *Conn) Connect(now time.Time, req []byte) Result {
	var r Result
	if c.state != Idle || !c.active {
		return r
	}
	c.state = REQSent
	c.arm(now, req, c.timing.Interval)
	r.send(req)
	return r
}

// Accept sends rep (a complete REP MAD) for a received REQ and starts its
// timer.
func (c *Conn) Accept(now time.Time, rep []byte) Result {
	var r Result
	if c.state != REQRcvd && c.state != MRAREQSent {
		return r
	}
	c.state = REPSent
	c.arm(now, rep, c.timing.Interval)
	r.send(rep)
	return r
}

// SendRTU answers the REP received in REPRcvd and enters Established.
func (c *Conn) SendRTU(now time.Time, privateData []byte) Result {
	var r Result
	if c.state != REPRcvd {
		return r
	}
	f := cmwire.RTUFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID}
	copy(f.PrivateData[:], privateData)
	c.rtu = c.mad(f)
	c.state = Established
	r.send(c.rtu)
	r.Event = EvEstablished
	return r
}

// Reject sends a REJ with reason and private data and closes the
// connection. It is valid before the connection is established (REQRcvd,
// MRAREQSent, REPRcvd; and REQSent/REPSent, as on destroy).
func (c *Conn) Reject(now time.Time, reason cmwire.RejectReason, ari, privateData []byte) Result {
	var r Result
	kind := cmwire.KindREQ
	switch c.state {
	case REQRcvd, MRAREQSent, REPSent:
	case REPRcvd:
		kind = cmwire.KindREP
	case REQSent, MRAREQRcvd:
		kind = cmwire.KindOther
	default:
		return r
	}
	f := cmwire.REJFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID, MessageRejected: kind,
		Reason: reason, RejectInfoLength: uint8(min(len(ari), cmwire.REJARISize))}
	copy(f.ARI[:], ari)
	copy(f.PrivateData[:], privateData)
	c.disarm()
	c.state = Closed
	r.send(c.mad(f))
	return r
}

// MRA sends an MRA for a received REQ the application has not answered,
// asking the peer to wait conv(timeout) longer.
func (c *Conn) MRA(now time.Time, timeout cmwire.Timeout) Result {
	var r Result
	if c.state != REQRcvd && c.state != MRAREQSent {
		return r
	}
	c.state = MRAREQSent
	r.send(c.mad(cmwire.MRAFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID,
		MessageMRAed: cmwire.KindREQ, ServiceTimeout: timeout}))
	return r
}

// Disconnect sends a DREQ (Established) or the DREP for a received DREQ
// (DREQRcvd). In other states it does nothing.
func (c *Conn) Disconnect(now time.Time) Result {
	var r Result
	switch c.state {
	case Established, REPSent:
		f := cmwire.DREQFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID, RemoteQPN: c.RemoteQPN}
		c.state = DREQSent
		m := c.mad(f)
		c.arm(now, m, c.timing.Interval)
		r.send(m)
	case DREQRcvd:
		r.send(c.sendDREP())
		c.enterTimeWait(now)
	}
	return r
}

func (c *Conn) sendDREP() []byte {
	if c.drep == nil {
		c.drep = c.mad(cmwire.DREPFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID})
	}
	return c.drep
}

// Handle processes a message addressed to this connection (matched by the
// caller by comm ID) and received at now.
func (c *Conn) Handle(now time.Time, msg cmwire.Message) Result {
	var r Result
	switch msg.Attr() {
	case cmwire.AttrREQ:
		// A duplicate of the REQ that made this passive connection.
		switch c.state {
		case REQRcvd:
			// rdma_cm sends an MRA lazily, on the first duplicate.
			return c.MRA(now, MRAServiceTimeout)
		case MRAREQSent:
			r = c.MRA(now, MRAServiceTimeout)
		case REPSent:
			r.send(c.retx)
		case TimeWait:
			f := cmwire.REJFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID, Reason: cmwire.RejStaleConn}
			r.send(c.mad(f))
		}
	case cmwire.AttrREP:
		rep := msg.REP()
		switch c.state {
		case REQSent, MRAREQRcvd:
			c.disarm()
			c.RemoteID, c.RemoteQPN = rep.LocalCommID(), rep.LocalQPN()
			c.state = REPRcvd
			r.Event, r.Msg = EvGotREP, msg
		case Established, DREQSent, TimeWait:
			if c.rtu != nil && rep.LocalCommID() == c.RemoteID {
				r.send(c.rtu) // duplicate REP: our RTU was lost
			}
		}
	case cmwire.AttrRTU:
		if c.state == REPSent {
			c.disarm()
			c.state = Established
			r.Event, r.Msg = EvEstablished, msg
		}
	case cmwire.AttrMRA:
		mra := msg.MRA()
		if (c.state == REQSent || c.state == MRAREQRcvd) && mra.MessageMRAed() == cmwire.KindREQ {
			// The peer needs longer: stretch the wait for the REP.
			c.state = MRAREQRcvd
			c.interval = mra.ServiceTimeout().KernelDuration() + c.timing.Interval
			c.deadline = now.Add(c.interval)
		}
	case cmwire.AttrREJ:
		switch c.state {
		case REQSent, MRAREQRcvd, REPSent, MRAREQSent, REPRcvd, REQRcvd:
			c.disarm()
			c.state = Closed
			r.Event, r.Msg = EvRejected, msg
		}
	case cmwire.AttrDREQ:
		if msg.DREQ().RemoteQPN() != c.LocalQPN {
			return r // the kernel drops it
		}
		switch c.state {
		case Established, REPSent:
			c.disarm()
			c.state = DREQRcvd
			r.Event, r.Msg = c.disconnected(), msg
		case DREQSent:
			// Crossing DREQs: answer and go to timewait.
			r.send(c.sendDREP())
			c.enterTimeWait(now)
			r.Event, r.Msg = c.disconnected(), msg
		case TimeWait:
			r.send(c.sendDREP())
		}
	case cmwire.AttrDREP:
		if c.state == DREQSent {
			c.enterTimeWait(now)
			r.Event, r.Msg = c.disconnected(), msg
		}
	}
	return r
}

// disconnected returns Disconnected the first time, None after.
func (c *Conn) disconnected() Event {
	if c.reported {
		return EvNone
	}
	c.reported = true
	return EvDisconnected
}

// Tick runs the timer: retransmissions, give-ups and the timewait exit.
// Call it when now reaches Deadline; earlier calls do nothing.
func (c *Conn) Tick(now time.Time) Result {
	var r Result
	if c.deadline.IsZero() || now.Before(c.deadline) {
		return r
	}
	if c.state == TimeWait {
		c.deadline = time.Time{}
		c.state = Closed
		r.Event = EvTimewaitExit
		return r
	}
	if c.retx == nil {
		c.deadline = time.Time{}
		return r
	}
	if c.left > 0 {
		c.left--
		c.deadline = c.deadline.Add(c.interval)
		if c.deadline.Before(now) {
			c.deadline = now.Add(c.interval)
		}
		r.send(c.retx)
		return r
	}
	switch c.state {
	case REQSent, MRAREQRcvd, REPSent:
		c.disarm()
		c.state = Closed
		r.Event = EvUnreachable
	case DREQSent:
		c.enterTimeWait(now)
		r.Event = c.disconnected()
	default:
		c.disarm()
	}
	return r
}

// Unreachable ends an active connection whose REQ is outstanding, sending
// nothing: the network said the peer cannot get it (an ICMP destination
// unreachable). In any other state it changes nothing and reports false:
// a peer that answered (MRA, REP) or a connection that is established is
// left to its timers and the QP's retry limits.
func (c *Conn) Unreachable() bool {
	if c.state != REQSent {
		return false
	}
	c.disarm()
	c.state = Closed
	return true
}

// Destroy returns what the kernel sends when a connection's ID is
// destroyed in its current state (cm_destroy_id): REJ Timeout (ARI = the
// local CA GUID) while the REQ is outstanding, REJ consumer-defined before
// the REP is answered, a DREQ when established, the DREP when a DREQ was
// received. The connection is Closed afterwards.
func (c *Conn) Destroy(now time.Time, localGUID uint64) Result {
	var r Result
	switch c.state {
	case REQSent, MRAREQRcvd:
		var ari [8]byte
		for i := range ari {
			ari[i] = byte(localGUID >> (56 - 8*i))
		}
		r = c.Reject(now, cmwire.RejTimeout, ari[:], nil)
	case REQRcvd, MRAREQSent, REPSent, REPRcvd:
		r = c.Reject(now, cmwire.RejConsumerDefined, nil, nil)
	case Established:
		r = c.Disconnect(now)
	case DREQRcvd:
		r = c.Disconnect(now)
	}
	c.disarm()
	c.state = Closed
	return r
}
