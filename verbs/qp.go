package verbs

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// QPCap are the queue sizes of a QP (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	// SigAll generates a completion for every send work request, as if
	// each had SendSignaled.
	SigAll bool
}

// QPAttrMask selects the QPAttr fields Modify uses (IBV_QP_*).
type QPAttrMask uint32

const (
	QPAttrState            QPAttrMask = 1 << 0
	QPAttrCurState         QPAttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	QPAttrAccessFlags      QPAttrMask = 1 << 3
	QPAttrPKeyIndex        QPAttrMask = 1 << 4
	QPAttrPort             QPAttrMask = 1 << 5
	QPAttrQKey             QPAttrMask = 1 << 6
	QPAttrAV               QPAttrMask = 1 << 7
	QPAttrPathMTU          QPAttrMask = 1 << 8
	QPAttrTimeout          QPAttrMask = 1 << 9
	QPAttrRetryCnt         QPAttrMask = 1 << 10
	QPAttrRNRRetry         QPAttrMask = 1 << 11
	QPAttrRQPSN            QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	QPAttrAltPath          QPAttrMask = 1 << 14
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15
	QPAttrSQPSN            QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	QPAttrPathMigState     QPAttrMask = 1 << 18
	QPAttrCap              QPAttrMask = 1 << 19
	QPAttrDestQPN          QPAttrMask = 1 << 20
	// QPAttrSegmentSize selects QPAttr.SegmentSize: the tbrdma
	// large-segment extension (segment.go), optional on an RC or UC QP's
	// INIT→RTR transition. ibverbs has no such bit; it sits far above the
	// ones it defines.
	QPAttrSegmentSize QPAttrMask = 1 << 30
)

// QPAttr holds QP attributes (struct ibv_qp_attr).
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         MTU
	QKey            QKey
	RQPSN           PSN
	SQPSN           PSN
	DestQPN         QPN
	AccessFlags     AccessFlags
	Cap             QPCap
	AH              AHAttr
	PKeyIndex       uint16
	PortNum         uint8
	MinRNRTimer     uint8 // RNR NAK timer code this QP advertises
	Timeout         uint8 // local ACK timeout: 4.096 µs × 2^Timeout, 0 = none
	RetryCnt        uint8 // 0..7
	RNRRetry        uint8 // 0..7, 7 = infinite
	MaxRdAtomic     uint8 // outstanding READ/atomic this QP may issue
	MaxDestRdAtomic uint8 // READ/atomic responder resources
	// SegmentSize, with QPAttrSegmentSize, replaces PathMTU as the size of
	// the QP's packets (tbrdma extension, see SetMaxSegmentSize): 0 means
	// PathMTU. Only a peer that agreed to it accepts such packets.
	SegmentSize int
}

// transition lists the attributes a state change requires and allows.
type transition struct{ req, opt QPAttrMask }

func transitionFor(t QPType, from, to QPState) (transition, bool) {
	const (
		rcucInitOpt = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
		rtsOptRC    = QPAttrCurState | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrAltPath | QPAttrPathMigState
		rtsOptUC    = QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState
		rtsOptUD    = QPAttrCurState | QPAttrQKey
	)
	ud := t == QPTypeUD
	rc := t == QPTypeRC
	switch {
	case to == QPStateReset || to == QPStateErr:
		return transition{req: QPAttrState}, true
	case from == QPStateReset && to == QPStateInit:
		if ud {
			return transition{req: QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey}, true
		}
		return transition{req: QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags}, true
	case from == QPStateInit && to == QPStateInit:
		if ud {
			return transition{req: QPAttrState, opt: QPAttrPKeyIndex | QPAttrPort | QPAttrQKey}, true
		}
		return transition{req: QPAttrState, opt: rcucInitOpt}, true
	case from == QPStateInit && to == QPStateRTR:
		switch {
		case ud:
			return transition{req: QPAttrState, opt: QPAttrPKeyIndex | QPAttrQKey}, true
		case rc:
			return transition{req: QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
				opt: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrSegmentSize}, true
		default:
			return transition{req: QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN,
				opt: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrSegmentSize}, true
		}
	case from == QPStateRTR && to == QPStateRTS:
		switch {
		case ud:
			return transition{req: QPAttrState | QPAttrSQPSN, opt: rtsOptUD}, true
		case rc:
			return transition{req: QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic, opt: rtsOptRC}, true
		default:
			return transition{req: QPAttrState | QPAttrSQPSN, opt: rtsOptUC}, true
		}
	case (from == QPStateRTS || from == QPStateSQD) && to == QPStateRTS:
		switch {
		case ud:
			return transition{req: QPAttrState, opt: rtsOptUD}, true
		case rc:
			return transition{req: QPAttrState, opt: rtsOptRC}, true
		default:
			return transition{req: QPAttrState, opt: rtsOptUC}, true
		}
	case from == QPStateRTS && to == QPStateSQD:
		return transition{req: QPAttrState, opt: QPAttrEnSQDAsyncNotify}, true
	case from == QPStateSQE && to == QPStateRTS:
		if rc {
			return transition{}, false
		}
		return transition{req: QPAttrState, opt: QPAttrCurState | QPAttrAccessFlags | QPAttrQKey}, true
	}
	return transition{}, false
}

// QP is a queue pair (struct ibv_qp). Its methods are safe for concurrent
// use.
type QP struct {
	ctx    *Context
	pd     *PD
	qpn    QPN
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	sigAll bool
	cap    QPCap

	mu    sync.Mutex
	attr  QPAttr
	state QPState
	dst   netip.AddrPort
	pmtu  int
	// window is the requester's window in PSNs when SetSendWindow set
	// one (0: maxUnackedPSNs).
	window int
	// sr: selective retransmission (SetSelectiveRetransmit, selective.go).
	sr bool
	// closed is set by Close.
	closed bool

	// send queue: sq[i % len(sq)] for head <= i < tail
	sq       []sendWQE
	sqSGE    []SGE
	sqInline []byte
	sqHead   uint64 // oldest not completed
	sqNext   uint64 // next to transmit (or continue transmitting)
	sqTail   uint64 // next free slot

	req requester
	rsp responder

	// receive queue
	rq     []recvWQE
	rqSGE  []SGE
	rqHead uint64
	rqTail uint64

	timer   *time.Timer
	timerAt time.Time
}

type sendWQE struct {
	wr     SendWR
	length uint32
	first  PSN
	last   PSN
	npkts  int
	sent   int    // packets sent (or, for a READ, response packets accounted for)
	got    uint32 // READ: bytes of response data received
	inline []byte // the data of an inline send, copied at post time
}

type recvWQE struct {
	wrID uint64
	sgl  []SGE
	size uint64
}

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(init *QPInitAttr) (*QP, error) {
	c := pd.ctx
	if init == nil {
		return nil, fmt.Errorf("verbs: create QP: nil attributes: %w", ErrInvalidArgument)
	}
	switch init.Type {
	case QPTypeRC, QPTypeUC, QPTypeUD:
	default:
		return nil, fmt.Errorf("verbs: create QP: unsupported type %v (use RC, UC or UD): %w", init.Type, ErrInvalidArgument)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("verbs: create QP: send and receive CQs are required: %w", ErrInvalidArgument)
	}
	cp := init.Cap
	if cp.MaxSendWR < 1 || cp.MaxSendWR > MaxQPWR || (init.SRQ == nil && (cp.MaxRecvWR < 1 || cp.MaxRecvWR > MaxQPWR)) {
		return nil, fmt.Errorf("verbs: create QP: max_send_wr %d / max_recv_wr %d outside 1..%d (verbs.MaxQPWR): set QPInitAttr.Cap within it: %w", cp.MaxSendWR, cp.MaxRecvWR, MaxQPWR, ErrInvalidArgument)
	}
	if cp.MaxSendSGE < 1 {
		cp.MaxSendSGE = 1
	}
	if cp.MaxRecvSGE < 1 {
		cp.MaxRecvSGE = 1
	}
	if cp.MaxSendSGE > MaxSGE || cp.MaxRecvSGE > MaxSGE || cp.MaxInlineData > MaxInlineData || cp.MaxInlineData < 0 {
		return nil, fmt.Errorf("verbs: create QP: at most %d SGEs (verbs.MaxSGE) and %d inline bytes (verbs.MaxInlineData): lower QPInitAttr.Cap: %w", MaxSGE, MaxInlineData, ErrInvalidArgument)
	}
	if init.SRQ != nil {
		cp.MaxRecvWR = 0
	}
	qp := &QP{
		ctx: c, pd: pd, typ: init.Type, sendCQ: init.SendCQ, recvCQ: init.RecvCQ, srq: init.SRQ,
		sigAll: init.SigAll, cap: cp, state: QPStateReset,
		sq:       make([]sendWQE, cp.MaxSendWR),
		sqSGE:    make([]SGE, cp.MaxSendWR*cp.MaxSendSGE),
		sqInline: make([]byte, cp.MaxSendWR*cp.MaxInlineData),
		rq:       make([]recvWQE, cp.MaxRecvWR),
		rqSGE:    make([]SGE, cp.MaxRecvWR*cp.MaxRecvSGE),
	}
	if err := qp.hold(); err != nil {
		return nil, fmt.Errorf("verbs: create QP: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		qp.release()
		return nil, ErrClosed
	}
	if len(c.qps) >= MaxQP {
		qp.release()
		return nil, fmt.Errorf("verbs: create QP: %d QPs exist, the device maximum (verbs.MaxQP): close QPs no longer in use, or open a second context: %w", MaxQP, ErrResourceLimit)
	}
	for c.qps[c.nextQPN] != nil || c.nextQPN < firstQPN {
		c.nextQPN = (c.nextQPN + 1) & 0xFFFFFF
		if c.nextQPN < firstQPN {
			c.nextQPN = firstQPN
		}
	}
	qp.qpn = c.nextQPN
	c.nextQPN = (c.nextQPN + 1) & 0xFFFFFF
	c.qps[qp.qpn] = qp
	qp.attr.Cap = cp
	return qp, nil
}

// hold counts the new QP as a user of its PD, CQs and SRQ; it fails if
// one of them is closed.
func (qp *QP) hold() error {
	if err := qp.pd.use(useQP, 1); err != nil {
		return err
	}
	if err := qp.sendCQ.use(1); err != nil {
		qp.pd.use(useQP, -1)
		return fmt.Errorf("send %w", err)
	}
	if qp.recvCQ != qp.sendCQ {
		if err := qp.recvCQ.use(1); err != nil {
			qp.sendCQ.use(-1)
			qp.pd.use(useQP, -1)
			return fmt.Errorf("receive %w", err)
		}
	}
	if qp.srq != nil {
		if err := qp.srq.use(1); err != nil {
			if qp.recvCQ != qp.sendCQ {
				qp.recvCQ.use(-1)
			}
			qp.sendCQ.use(-1)
			qp.pd.use(useQP, -1)
			return err
		}
	}
	return nil
}

// release undoes hold.
func (qp *QP) release() {
	if qp.srq != nil {
		qp.srq.use(-1)
	}
	if qp.recvCQ != qp.sendCQ {
		qp.recvCQ.use(-1)
	}
	qp.sendCQ.use(-1)
	qp.pd.use(useQP, -1)
}

// QPN returns the queue pair number.
func (qp *QP) QPN() QPN { return qp.qpn }

// Type returns the transport type.
func (qp *QP) Type() QPType { return qp.typ }

// State returns the current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Query returns the QP's attributes.
func (qp *QP) Query() QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State = qp.state
	a.CurState = qp.state
	if qp.state >= QPStateRTR {
		a.RQPSN = qp.rsp.ePSN
	}
	if qp.state >= QPStateRTS {
		a.SQPSN = qp.req.psn
	}
	return a
}

// Modify changes the QP's attributes and state as ibv_modify_qp does: the
// mask must hold exactly the attributes the transition requires, plus any
// it allows. A mask without QPAttrState changes attributes in the current
// state, which must allow it (RTS to RTS: MIN_RNR_TIMER, ACCESS_FLAGS ...;
// INIT to INIT: PKEY_INDEX, PORT, ACCESS_FLAGS or QKEY), as the kernel's
// ib_modify_qp_is_ok and rdma_rxe do.
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	qp.mu.Lock()
	err := qp.modifyLocked(attr, mask, time.Now())
	qp.mu.Unlock()
	qp.ctx.flush()
	return err
}

func (qp *QP) modifyLocked(attr *QPAttr, mask QPAttrMask, now time.Time) error {
	if qp.closed {
		return ErrClosed
	}
	from := qp.state
	if mask&QPAttrCurState != 0 && attr.CurState != from {
		return &StateError{QPN: qp.qpn, From: from, To: attr.State, Msg: fmt.Sprintf("current state is %v, not %v", from, attr.CurState)}
	}
	to := from
	if mask&QPAttrState != 0 {
		to = attr.State
	}
	tr, ok := transitionFor(qp.typ, from, to)
	if !ok {
		return &StateError{QPN: qp.qpn, From: from, To: to, Msg: "transition not allowed"}
	}
	req := tr.req
	if mask&QPAttrState == 0 {
		// The state stays: the transition from it to itself must exist
		// (transitionFor said so), and STATE is the one bit it may lack.
		// libfabric's verbs provider sets MIN_RNR_TIMER alone on a
		// connected (RTS) QP.
		req &^= QPAttrState
	}
	if missing := req &^ mask; missing != 0 {
		return &StateError{QPN: qp.qpn, From: from, To: to, Msg: fmt.Sprintf("attribute mask lacks required %v: set them in the mask and in QPAttr", missing)}
	}
	if extra := mask &^ (tr.req | tr.opt); extra != 0 {
		return &StateError{QPN: qp.qpn, From: from, To: to, Msg: fmt.Sprintf("attribute mask has %v, which this transition does not allow: leave them out of the mask", extra)}
	}
	// Validate values before changing anything.
	if err := qp.checkAttrValues(attr, mask); err != nil {
		return err
	}
	qp.setAttrs(attr, mask)
	if mask&QPAttrState == 0 {
		return nil // attributes only: no state's entry actions (rxe runs them only for IB_QP_STATE)
	}
	qp.enterState(from, to, now)
	return nil
}

// checkAttrValues checks the values of the attributes mask selects, before
// Modify changes anything.
func (qp *QP) checkAttrValues(attr *QPAttr, mask QPAttrMask) error {
	if mask&QPAttrPathMTU != 0 && !attr.PathMTU.Valid() {
		return fmt.Errorf("verbs: modify QP %v: invalid path MTU %d: %w", qp.qpn, attr.PathMTU, ErrInvalidArgument)
	}
	if mask&QPAttrPathMTU != 0 && attr.PathMTU > MTU4096 {
		return fmt.Errorf("verbs: modify QP %v: path MTU above 4096: %w", qp.qpn, ErrInvalidArgument)
	}
	if mask&QPAttrSegmentSize != 0 && attr.SegmentSize != 0 {
		if !ValidSegmentSize(attr.SegmentSize) {
			return fmt.Errorf("verbs: modify QP %v: segment size %d: want a multiple of 4096 from %d to %d: %w", qp.qpn, attr.SegmentSize, MinSegmentSize, SegmentSizeLimit, ErrInvalidArgument)
		}
		if lim := qp.ctx.MaxSegmentSize(); attr.SegmentSize > lim {
			return fmt.Errorf("verbs: modify QP %v: segment size %d above the context's %d: enable large segments with Context.SetMaxSegmentSize (only toward a peer that agreed to them): %w", qp.qpn, attr.SegmentSize, lim, ErrInvalidArgument)
		}
	}
	if mask&QPAttrAV != 0 && attr.AH.DGID.IsZero() {
		return fmt.Errorf("verbs: modify QP %v: zero destination GID: %w", qp.qpn, ErrInvalidArgument)
	}
	if mask&QPAttrDestQPN != 0 && !attr.DestQPN.Valid() {
		return fmt.Errorf("verbs: modify QP %v: invalid destination QPN %v: %w", qp.qpn, attr.DestQPN, ErrInvalidArgument)
	}
	if mask&QPAttrRetryCnt != 0 && attr.RetryCnt > 7 || mask&QPAttrRNRRetry != 0 && attr.RNRRetry > 7 ||
		mask&QPAttrTimeout != 0 && attr.Timeout > 31 || mask&QPAttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return fmt.Errorf("verbs: modify QP %v: retry_cnt/rnr_retry above 7 or timeout/min_rnr_timer above 31: %w", qp.qpn, ErrInvalidArgument)
	}
	if mask&QPAttrMaxQPRdAtomic != 0 && int(attr.MaxRdAtomic) > MaxRdAtomic || mask&QPAttrMaxDestRdAtomic != 0 && int(attr.MaxDestRdAtomic) > MaxRdAtomic {
		return fmt.Errorf("verbs: modify QP %v: max_rd_atomic %d / max_dest_rd_atomic %d above %d (verbs.MaxRdAtomic): ask for fewer outstanding READs and atomics: %w", qp.qpn, attr.MaxRdAtomic, attr.MaxDestRdAtomic, MaxRdAtomic, ErrInvalidArgument)
	}
	if mask&QPAttrPort != 0 && attr.PortNum != 1 {
		return fmt.Errorf("verbs: modify QP %v: port %d does not exist (the only port is 1): %w", qp.qpn, attr.PortNum, ErrInvalidArgument)
	}
	if mask&QPAttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return fmt.Errorf("verbs: modify QP %v: P_Key index %d does not exist (only 0): %w", qp.qpn, attr.PKeyIndex, ErrInvalidArgument)
	}
	return nil
}

// setAttrs stores the attributes mask selects.
func (qp *QP) setAttrs(attr *QPAttr, mask QPAttrMask) {
	a := &qp.attr
	if mask&QPAttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&QPAttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&QPAttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&QPAttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&QPAttrAV != 0 {
		a.AH = attr.AH
		qp.dst = attr.AH.addr()
	}
	if mask&QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
	}
	if mask&QPAttrSegmentSize != 0 {
		a.SegmentSize = attr.SegmentSize
	}
	if mask&QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
	}
	if mask&QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
		qp.rsp.res = make([]rdResource, roundPow2(int(attr.MaxDestRdAtomic)))
	}
	if mask&QPAttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN
	}
	if mask&QPAttrRQPSN != 0 {
		qp.rsp.ePSN = attr.RQPSN & wire.PSNMask
	}
	if mask&QPAttrSQPSN != 0 {
		qp.req.psn = attr.SQPSN & wire.PSNMask
		qp.req.compPSN = qp.req.psn
		qp.req.sentPSN = qp.req.psn
	}
}

// enterState runs the entry actions of state to, coming from from, and
// moves the QP there.
func (qp *QP) enterState(from, to QPState, now time.Time) {
	a := &qp.attr
	switch to {
	case QPStateReset:
		qp.reset()
		a.SegmentSize = 0 // a reused QP never inherits the extension
	case QPStateErr:
		qp.enterError(now)
	case QPStateRTR:
		qp.pmtu = a.PathMTU.Bytes()
		if a.SegmentSize != 0 && qp.typ != QPTypeUD {
			qp.pmtu = a.SegmentSize
		}
		if qp.typ == QPTypeUD {
			qp.pmtu = qp.ctx.activeMTU.Bytes()
		}
	case QPStateRTS:
		if from == QPStateRTR {
			qp.req.retryLeft = int(a.RetryCnt)
			qp.req.rnrLeft = int(a.RNRRetry)
		}
	}
	qp.state = to
	if to == QPStateRTS {
		qp.pump(now)
		qp.rearm(now)
	}
}

func roundPow2(n int) int {
	if n <= 0 {
		return 0
	}
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// reset empties the queues and forgets all protocol state.
func (qp *QP) reset() {
	qp.freeHeld()
	qp.sr = false // a reused QP never inherits the extension
	qp.sqHead, qp.sqNext, qp.sqTail = 0, 0, 0
	qp.rqHead, qp.rqTail = 0, 0
	qp.req = requester{}
	qp.rsp = responder{res: qp.rsp.res}
	for i := range qp.rsp.res {
		qp.rsp.res[i] = rdResource{}
	}
	qp.stopTimer()
}

// Close destroys the QP: outstanding work is flushed and later packets for
// its QPN are dropped; its CQs, SRQ and PD can be closed after it. It is
// idempotent.
func (qp *QP) Close() error {
	qp.mu.Lock()
	if qp.closed {
		qp.mu.Unlock()
		return nil
	}
	if qp.state != QPStateReset && qp.state != QPStateErr {
		qp.enterError(time.Now())
	}
	qp.closed = true
	qp.stopTimer()
	qp.mu.Unlock()
	qp.ctx.mu.Lock()
	delete(qp.ctx.qps, qp.qpn)
	qp.ctx.mu.Unlock()
	qp.ctx.flush()
	qp.release()
	return nil
}

// PostSend queues send work requests and starts transmitting them. It
// returns how many were queued; on error the first unqueued one is wrs[n].
func (qp *QP) PostSend(wrs ...SendWR) (int, error) {
	now := engineNow()
	qp.mu.Lock()
	n, err := qp.postSendLocked(wrs, now)
	qp.mu.Unlock()
	qp.ctx.flush()
	return n, err
}

func (qp *QP) postSendLocked(wrs []SendWR, now time.Time) (int, error) {
	if qp.closed {
		return 0, ErrClosed
	}
	if qp.state < QPStateRTS && qp.state != QPStateErr {
		return 0, &StateError{QPN: qp.qpn, From: qp.state, To: qp.state, Msg: "post send needs RTS"}
	}
	for i := range wrs {
		if err := qp.queueSend(&wrs[i]); err != nil {
			return i, err
		}
	}
	if qp.state == QPStateErr {
		qp.flushSQ()
		return len(wrs), nil
	}
	qp.pump(now)
	qp.rearm(now)
	return len(wrs), nil
}

func (qp *QP) queueSend(wr *SendWR) error {
	if qp.sqTail-qp.sqHead >= uint64(len(qp.sq)) {
		return fmt.Errorf("verbs: post send on QP %v: send queue full (%d WRs): %w", qp.qpn, len(qp.sq), ErrQueueFull)
	}
	if len(wr.SGList) > qp.cap.MaxSendSGE {
		return fmt.Errorf("verbs: post send on QP %v: %d SGEs, max %d: %w", qp.qpn, len(wr.SGList), qp.cap.MaxSendSGE, ErrInvalidArgument)
	}
	switch wr.Opcode {
	case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRSendWithInv:
		if qp.typ != QPTypeRC {
			return fmt.Errorf("verbs: post send on QP %v: %v needs an RC QP: %w", qp.qpn, wr.Opcode, ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("verbs: post send on QP %v: unknown opcode %d: %w", qp.qpn, wr.Opcode, ErrInvalidArgument)
	}
	if qp.typ == QPTypeUD {
		if !wr.Opcode.isSend() {
			return fmt.Errorf("verbs: post send on UD QP %v: only SEND and SEND_WITH_IMM: %w", qp.qpn, ErrInvalidArgument)
		}
		if wr.AH == nil {
			return fmt.Errorf("verbs: post send on UD QP %v: no address handle: %w", qp.qpn, ErrInvalidArgument)
		}
	}
	inline := wr.Flags&SendInline != 0 && !wr.Opcode.isReadLike()
	sgl := wr.SGList
	if inline && wr.Inline != nil {
		sgl = nil
	}
	var length uint64
	for _, s := range sgl {
		length += uint64(s.Length)
	}
	if inline && wr.Inline != nil {
		length = uint64(len(wr.Inline))
	}
	if wr.Opcode.isAtomic() && (length != 8 || len(wr.SGList) != 1) {
		return fmt.Errorf("verbs: post send on QP %v: an atomic needs one 8-byte SGE: %w", qp.qpn, ErrInvalidArgument)
	}
	if wr.Opcode.isAtomic() && wr.RemoteAddr%8 != 0 {
		return fmt.Errorf("verbs: post send on QP %v: atomic remote address %#x is not 8-byte aligned: %w", qp.qpn, wr.RemoteAddr, ErrInvalidArgument)
	}
	if length > MaxMessageSize {
		return fmt.Errorf("verbs: post send on QP %v: message of %d bytes exceeds %d: %w", qp.qpn, length, MaxMessageSize, ErrInvalidArgument)
	}
	if inline && int(length) > qp.cap.MaxInlineData {
		return fmt.Errorf("verbs: post send on QP %v: %d inline bytes, max %d: %w", qp.qpn, length, qp.cap.MaxInlineData, ErrInvalidArgument)
	}
	slot := int(qp.sqTail % uint64(len(qp.sq)))
	w := &qp.sq[slot]
	*w = sendWQE{wr: *wr, length: uint32(length)}
	sges := qp.sqSGE[slot*qp.cap.MaxSendSGE : slot*qp.cap.MaxSendSGE+len(sgl)]
	copy(sges, sgl)
	w.wr.SGList = sges
	w.wr.Inline = nil
	if inline {
		buf := qp.sqInline[slot*qp.cap.MaxInlineData : slot*qp.cap.MaxInlineData+int(length)]
		if wr.Inline != nil {
			copy(buf, wr.Inline)
		} else if st := qp.ctx.gather(buf, sges, 0, qp.pd.id); st != WCSuccess {
			return fmt.Errorf("verbs: post send on QP %v: inline data: SGE does not name registered memory: %w", qp.qpn, ErrInvalidArgument)
		}
		w.wr.SGList = nil
		w.wr.Flags |= SendInline
		w.inline = buf
	}
	qp.sqTail++
	return nil
}

// PostRecv queues receive work requests.
func (qp *QP) PostRecv(wrs ...RecvWR) (int, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed {
		return 0, ErrClosed
	}
	if qp.srq != nil {
		return 0, fmt.Errorf("verbs: post recv on QP %v: the QP uses an SRQ, post to it: %w", qp.qpn, ErrInvalidArgument)
	}
	if qp.state == QPStateReset {
		return 0, &StateError{QPN: qp.qpn, From: qp.state, To: qp.state, Msg: "post recv needs INIT or later"}
	}
	for i := range wrs {
		wr := &wrs[i]
		if qp.rqTail-qp.rqHead >= uint64(len(qp.rq)) {
			return i, fmt.Errorf("verbs: post recv on QP %v: receive queue full (%d WRs): %w", qp.qpn, len(qp.rq), ErrQueueFull)
		}
		if len(wr.SGList) > qp.cap.MaxRecvSGE {
			return i, fmt.Errorf("verbs: post recv on QP %v: %d SGEs, max %d: %w", qp.qpn, len(wr.SGList), qp.cap.MaxRecvSGE, ErrInvalidArgument)
		}
		slot := int(qp.rqTail % uint64(len(qp.rq)))
		sges := qp.rqSGE[slot*qp.cap.MaxRecvSGE : slot*qp.cap.MaxRecvSGE+len(wr.SGList)]
		copy(sges, wr.SGList)
		var size uint64
		for _, s := range sges {
			size += uint64(s.Length)
		}
		qp.rq[slot] = recvWQE{wrID: wr.WRID, sgl: sges, size: size}
		qp.rqTail++
	}
	if qp.state == QPStateErr {
		qp.flushRQ()
	}
	return len(wrs), nil
}

// popRecv takes the next receive WQE (from the SRQ if the QP has one).
// The WQE's SGEs are copied into the responder's own array, because the
// queue slot may be reused by the next post while a multi-packet SEND is
// still being placed.
func (qp *QP) popRecv(out *recvWQE) bool {
	if qp.srq != nil {
		if !qp.srq.pop(out, qp.rsp.recvSGE[:]) {
			return false
		}
		return true
	}
	if qp.rqHead == qp.rqTail {
		return false
	}
	*out = qp.rq[qp.rqHead%uint64(len(qp.rq))]
	out.sgl = qp.rsp.recvSGE[:copy(qp.rsp.recvSGE[:], out.sgl)]
	qp.rqHead++
	return true
}

// --- completions and errors --------------------------------------------------

func (qp *QP) completeSend(w *sendWQE, status WCStatus) {
	if status == WCSuccess && !qp.sigAll && w.wr.Flags&SendSignaled == 0 {
		return
	}
	wc := WC{WRID: w.wr.WRID, Status: status, Opcode: wcOpcodeFor(w.wr.Opcode), QPN: qp.qpn}
	if status == WCSuccess {
		switch w.wr.Opcode {
		case WRRDMARead:
			wc.ByteLen = w.length
		case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
			wc.ByteLen = 8
		default:
			wc.ByteLen = w.length
		}
	}
	qp.sendCQ.push(&wc, false)
}

func wcOpcodeFor(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	}
	return WCSend
}

func (qp *QP) completeRecv(r *recvWQE, wc *WC, solicited bool) {
	wc.WRID = r.wrID
	wc.QPN = qp.qpn
	qp.recvCQ.push(wc, solicited)
}

// enterError moves the QP to ERR and flushes both queues.
func (qp *QP) enterError(now time.Time) {
	if qp.state == QPStateErr {
		return
	}
	qp.state = QPStateErr
	qp.req.retxAt, qp.req.rnrAt, qp.req.probeAt = time.Time{}, time.Time{}, time.Time{}
	qp.freeHeld()
	qp.stopTimer()
	if qp.rsp.inRecv {
		qp.rsp.inRecv = false
		wc := WC{Status: WCWRFlushErr, Opcode: WCRecv}
		qp.completeRecv(&qp.rsp.recv, &wc, false)
	}
	qp.flushSQ()
	qp.flushRQ()
}

func (qp *QP) flushSQ() {
	for ; qp.sqHead != qp.sqTail; qp.sqHead++ {
		w := &qp.sq[qp.sqHead%uint64(len(qp.sq))]
		qp.completeSend(w, WCWRFlushErr)
	}
	qp.sqNext = qp.sqHead
}

func (qp *QP) flushRQ() {
	if qp.srq != nil {
		return
	}
	for ; qp.rqHead != qp.rqTail; qp.rqHead++ {
		r := &qp.rq[qp.rqHead%uint64(len(qp.rq))]
		wc := WC{Status: WCWRFlushErr, Opcode: WCRecv}
		qp.completeRecv(r, &wc, false)
	}
}

// fail completes the oldest WQE with status and moves the QP to ERR.
func (qp *QP) fail(status WCStatus, now time.Time) {
	switch status {
	case WCRetryExcErr:
		qp.ctx.ctr.retryExc.Add(1)
	case WCRNRRetryExcErr:
		qp.ctx.ctr.rnrRetryExc.Add(1)
	}
	if qp.sqHead != qp.sqTail {
		w := &qp.sq[qp.sqHead%uint64(len(qp.sq))]
		wc := WC{WRID: w.wr.WRID, Status: status, Opcode: wcOpcodeFor(w.wr.Opcode), QPN: qp.qpn}
		qp.sendCQ.push(&wc, false)
		qp.sqHead++
	}
	qp.ctx.postAsync(AsyncEvent{Type: EventQPFatal, QP: qp})
	qp.enterError(now)
}

// --- timers -------------------------------------------------------------------

// rearm schedules the QP's timer for the earliest pending deadline.
//
// It is lazy, as kernels' retransmit timers are: a timer that would fire
// at or before the deadline is left as it is (when it fires, onTimer finds
// nothing due and arms it for the real deadline), and one left with no
// deadline at all is not stopped (it fires once for nothing). A round trip
// of a latency test (each request completes before the next is posted)
// used to stop the timer at the completion and start it again at the post,
// ~65 ns of the round trip's path; now the timer fires about once per
// probe interval or ACK timeout instead.
func (qp *QP) rearm(now time.Time) {
	at := qp.req.deadline()
	if qp.state != QPStateRTS && qp.state != QPStateSQD {
		qp.stopTimer()
		return
	}
	if at.IsZero() || !qp.timerAt.IsZero() && !qp.timerAt.After(at) {
		return
	}
	qp.timerAt = at
	d := at.Sub(now)
	if d < 0 {
		d = 0
	}
	if qp.timer == nil {
		qp.timer = time.AfterFunc(d, qp.onTimer)
	} else {
		qp.timer.Reset(d)
	}
}

func (qp *QP) stopTimer() {
	if qp.timer != nil {
		qp.timer.Stop()
	}
	qp.timerAt = time.Time{}
}

func (qp *QP) onTimer() {
	now := engineNow()
	qp.mu.Lock()
	if qp.closed {
		qp.mu.Unlock()
		return
	}
	qp.timerAt = time.Time{}
	qp.expire(now)
	qp.rearm(now)
	qp.mu.Unlock()
	qp.ctx.flush()
}

// --- receive dispatch ---------------------------------------------------------

func (qp *QP) receive(pkt *wire.Packet, from netip.AddrPort, ipID uint16, now time.Time) {
	qp.mu.Lock()
	if qp.closed {
		qp.mu.Unlock()
		return
	}
	op := pkt.BTH.Opcode()
	switch qp.typ {
	case QPTypeRC, QPTypeUC:
		want := wire.ClassRC
		if qp.typ == QPTypeUC {
			want = wire.ClassUC
		}
		if op.Class() != want {
			qp.ctx.ctr.drop(DropQPType)
			break
		}
		if from.Addr() != qp.dst.Addr() {
			qp.ctx.ctr.drop(DropPeer)
			break
		}
		if op.Has(wire.IsRequest) {
			if qp.state != QPStateRTR && qp.state != QPStateRTS && qp.state != QPStateSQD {
				qp.ctx.ctr.drop(DropState)
				break
			}
			switch {
			case qp.typ == QPTypeRC && qp.sr:
				qp.respondSR(pkt, now)
			case qp.typ == QPTypeRC:
				qp.respondRC(pkt, now)
			default:
				qp.respondUC(pkt, now)
			}
		} else {
			if qp.state != QPStateRTS && qp.state != QPStateSQD {
				qp.ctx.ctr.drop(DropState)
				break
			}
			qp.complete(pkt, now)
			qp.pump(now)
			qp.rearm(now)
		}
	case QPTypeUD:
		if op.Class() != wire.ClassUD {
			qp.ctx.ctr.drop(DropQPType)
			break
		}
		if qp.state != QPStateRTR && qp.state != QPStateRTS && qp.state != QPStateSQD {
			qp.ctx.ctr.drop(DropState)
			break
		}
		qp.respondUD(pkt, from, ipID)
	}
	qp.mu.Unlock()
}
