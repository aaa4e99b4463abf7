package rdmacm

import (
	"container/heap"
	"context"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/rdmacm/internal/fsm"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// A dispatcher owns the CM side of one verbs.Context: it reads QP1, routes
// each MAD to its connection by comm ID (or to a listener by service ID),
// runs the connections' timers, and sends what the state machines return.
// One exists while at least one ID uses the context.
type dispatcher struct {
	vctx  *verbs.Context
	gsi   *verbs.GSI
	guid  uint64
	hiTID uint32

	refs int // guarded by registryMu

	mu        sync.Mutex
	conns     map[cmwire.CommID]*ID // by local comm ID, while the fsm is not Closed
	remote    map[remoteKey]*ID     // passive connections by the peer's (CA GUID, comm ID)
	ports     map[portKey]*ID       // bound IDs
	listeners map[portKey]*ID
	ids       map[*ID]struct{} // every ID not destroyed, for DEVICE_REMOVAL
	// UD: our SIDR_REQs by request ID, and received ones not answered yet.
	sidrs       map[cmwire.CommID]*ID
	sidrPending map[sidrKey]*ID
	// Stale-connection state (cm_match_req): live connections by the
	// peer's (QPN, CA GUID), and the (CA GUID, comm ID) of passive
	// connections destroyed before their timewait ended, with its end.
	remoteQP map[qpKey]*ID
	timewait map[remoteKey]twEntry
	twQueue  twQueue // the timewait records' ends, earliest first
	removed  bool    // the verbs.Context was closed

	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Counters.
	unmatched  uint64 // messages for no connection
	duplicates uint64 // copies of a SIDR_REQ being answered, dropped
	stale      uint64 // REQs rejected with reason 10
	// Security (psk.go, limits.go): REQs, REPs and RTUs that failed the
	// key check (replays included), REQs refused by a half-open limit,
	// half-open connections whose REP retries ran out.
	authFailures, replays, limitRejects, halfOpenExpired uint64
	replay                                               replayCache // nonces of authenticated REQs
}

// qpKey is a peer QP: its QPN and CA GUID.
type qpKey struct {
	qpn  uint32
	guid uint64
}

// twEntry is a destroyed connection still in timewait.
type twEntry struct {
	local   cmwire.CommID
	expires time.Time
}

type remoteKey struct {
	guid uint64
	id   cmwire.CommID
}

type portKey struct {
	ps   PortSpace
	port uint16
}

var (
	registryMu sync.Mutex
	registry   = map[*verbs.Context]*dispatcher{}
)

// acquire returns the dispatcher of vctx, starting it if needed.
func acquire(vctx *verbs.Context) *dispatcher {
	registryMu.Lock()
	defer registryMu.Unlock()
	d := registry[vctx]
	if d == nil {
		d = &dispatcher{
			vctx:        vctx,
			gsi:         vctx.GSI(),
			guid:        nodeGUID(vctx),
			hiTID:       rand.Uint32(),
			conns:       map[cmwire.CommID]*ID{},
			remote:      map[remoteKey]*ID{},
			ports:       map[portKey]*ID{},
			listeners:   map[portKey]*ID{},
			ids:         map[*ID]struct{}{},
			sidrs:       map[cmwire.CommID]*ID{},
			sidrPending: map[sidrKey]*ID{},
			remoteQP:    map[qpKey]*ID{},
			timewait:    map[remoteKey]twEntry{},
			kick:        make(chan struct{}, 1),
		}
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		pkts := make(chan verbs.MADPacket, 64)
		d.wg.Add(2)
		go d.read(ctx, pkts)
		go d.run(ctx, pkts)
		registry[vctx] = d
	}
	d.refs++
	return d
}

// addRef takes another reference for an ID made by the dispatcher.
func (d *dispatcher) addRef() {
	registryMu.Lock()
	d.refs++
	registryMu.Unlock()
}

// release drops a reference; the last one stops the dispatcher and waits
// for its goroutines.
func (d *dispatcher) release() {
	registryMu.Lock()
	d.refs--
	last := d.refs == 0
	if last {
		delete(registry, d.vctx)
	}
	registryMu.Unlock()
	if last {
		d.cancel()
		d.wg.Wait()
	}
}

// nodeGUID is the device's node GUID, or one derived from the context's
// GID for contexts not opened from a Device.
func nodeGUID(vctx *verbs.Context) uint64 {
	if dev := vctx.Device(); dev != nil && dev.NodeGUID != 0 {
		return uint64(dev.NodeGUID)
	}
	h := fnv.New64a()
	gid := vctx.GID()
	h.Write(gid[:])
	return h.Sum64()&^(0xFF<<56) | 0x02<<56
}

func (d *dispatcher) read(ctx context.Context, out chan<- verbs.MADPacket) {
	defer d.wg.Done()
	defer close(out)
	for {
		m, err := d.gsi.Recv(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.deviceRemoved()
			}
			return
		}
		select {
		case out <- m:
		case <-ctx.Done():
			return
		}
	}
}

func (d *dispatcher) run(ctx context.Context, pkts <-chan verbs.MADPacket) {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		next := d.nextDeadline()
		d.mu.Unlock()
		timer.Stop()
		var tc <-chan time.Time
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case m, ok := <-pkts:
			if !ok {
				return
			}
			d.handle(&m)
		case <-tc:
			d.tick(time.Now())
		case <-d.kick:
		}
	}
}

// wake makes run recompute its timer.
func (d *dispatcher) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// deviceRemoved reports DEVICE_REMOVAL on every ID when the context is
// closed under them (cma_process_remove). The IDs stay until destroyed;
// the timers stop with the dispatcher's goroutines.
func (d *dispatcher) deviceRemoved() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removed = true
	for id := range d.ids {
		if id.state != stateDestroyed {
			id.ch.post(&Event{Type: EventDeviceRemoval, ID: id, Status: enodev, Err: ErrDeviceRemoved})
		}
	}
}

func (d *dispatcher) nextDeadline() time.Time {
	var next time.Time
	earliest := func(dl time.Time) {
		if !dl.IsZero() && (next.IsZero() || dl.Before(next)) {
			next = dl
		}
	}
	for _, id := range d.conns {
		earliest(id.conn.Deadline())
	}
	for _, id := range d.sidrs {
		earliest(id.sidr.Deadline())
	}
	// The timewait records expire in the order of twQueue; entries whose
	// record was replaced or removed are dropped lazily here and in tick.
	for len(d.twQueue) > 0 {
		top := d.twQueue[0]
		if e, ok := d.timewait[top.key]; ok && e.expires.Equal(top.expires) {
			earliest(top.expires)
			break
		}
		heap.Pop(&d.twQueue)
	}
	return next
}

func (d *dispatcher) tick(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range d.conns {
		if dl := id.conn.Deadline(); !dl.IsZero() && !now.Before(dl) {
			r := id.conn.Tick(now)
			d.vctx.AddCM(verbs.CMRetries, uint64(len(r.Send))) // a timer sends only retransmissions
			id.apply(now, r)
		}
	}
	for _, id := range d.sidrs {
		if dl := id.sidr.Deadline(); !dl.IsZero() && !now.Before(dl) {
			r := id.sidr.Tick(now)
			d.vctx.AddCM(verbs.CMRetries, uint64(len(r.Send)))
			id.applySIDR(now, r)
		}
	}
	for len(d.twQueue) > 0 && !now.Before(d.twQueue[0].expires) {
		top := heap.Pop(&d.twQueue).(twExpiry)
		if e, ok := d.timewait[top.key]; ok && e.expires.Equal(top.expires) {
			delete(d.timewait, top.key)
		}
	}
}

// twExpiry is one timewait record's end, in twQueue.
type twExpiry struct {
	expires time.Time
	key     remoteKey
}

// twQueue is a min-heap of timewait ends: the dispatcher finds its next
// deadline and the expired records without scanning every record (with
// thousands of connections a second, that scan dominated).
type twQueue []twExpiry

func (q twQueue) Len() int           { return len(q) }
func (q twQueue) Less(i, j int) bool { return q[i].expires.Before(q[j].expires) }
func (q twQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *twQueue) Push(x any)        { *q = append(*q, x.(twExpiry)) }
func (q *twQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// indexQP records a live connection under the peer's (QPN, CA GUID).
func (id *ID) indexQP(qpn wire.QPN, guid uint64) {
	id.qkey = qpKey{uint32(qpn), guid}
	id.d.remoteQP[id.qkey] = id
}

// unindexQP drops the ID from the (QPN, CA GUID) index.
func (d *dispatcher) unindexQP(id *ID) {
	if id.qkey != (qpKey{}) && d.remoteQP[id.qkey] == id {
		delete(d.remoteQP, id.qkey)
	}
	id.qkey = qpKey{}
}

// enterTimewait keeps the (CA GUID, comm ID) of a passive connection that
// is destroyed after it was accepted, for its timewait (2.048 s from now,
// or what is left of a timewait already running): a copy of its REQ in
// that time gets REJ 10 (stale connection) instead of reaching the
// listener as a new request.
func (d *dispatcher) enterTimewait(now time.Time, id *ID) {
	if id.rkey == (remoteKey{}) {
		return
	}
	var expires time.Time
	switch id.conn.State() {
	case fsm.REPSent, fsm.Established, fsm.DREQSent, fsm.DREQRcvd:
		expires = now.Add(id.conn.Timing().TimeWait)
	case fsm.TimeWait:
		expires = id.conn.Deadline()
	default:
		return
	}
	d.timewait[id.rkey] = twEntry{local: id.conn.LocalID, expires: expires}
	heap.Push(&d.twQueue, twExpiry{expires: expires, key: id.rkey})
	d.wake()
}

// send sends a MAD to the peer's QP1 (UDP port 4791).
func (d *dispatcher) send(to netip.Addr, mad []byte) {
	d.gsi.Send(netip.AddrPortFrom(to, 0), mad)
}

// newCommID returns a fresh random non-zero comm ID.
func (d *dispatcher) newCommID() cmwire.CommID {
	for {
		c := cmwire.CommID(rand.Uint32())
		_, used := d.conns[c]
		_, usedSIDR := d.sidrs[c]
		if c != 0 && !used && !usedSIDR {
			return c
		}
	}
}

// bind reserves port (0: an ephemeral one) in ps for id.
func (d *dispatcher) bind(id *ID, ps PortSpace, port uint16) (uint16, error) {
	if port == 0 {
		for range 1000 {
			p := uint16(32768 + rand.IntN(61000-32768))
			if d.ports[portKey{ps, p}] == nil {
				port = p
				break
			}
		}
		if port == 0 {
			return 0, ErrAddrInUse
		}
	}
	k := portKey{ps, port}
	if d.ports[k] != nil {
		return 0, ErrAddrInUse
	}
	d.ports[k] = id
	return port, nil
}

func (d *dispatcher) handle(p *verbs.MADPacket) {
	msg, _, err := cmwire.ParseMessage(p.MAD[:])
	if err != nil {
		return
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	switch msg.Attr() {
	case cmwire.AttrREQ:
		d.handleREQ(now, p, msg)
		return
	case cmwire.AttrSIDRREQ:
		d.handleSIDRREQ(p, msg)
		return
	case cmwire.AttrSIDRREP:
		d.handleSIDRREP(now, msg)
		return
	}
	var remote cmwire.CommID
	switch msg.Attr() {
	case cmwire.AttrREP, cmwire.AttrRTU, cmwire.AttrREJ, cmwire.AttrMRA, cmwire.AttrDREQ, cmwire.AttrDREP:
		remote = cmwire.RTU(msg.Body()).RemoteCommID() // all keep it at body offset 4
	default:
		return
	}
	id := d.conns[remote]
	if id != nil && msg.Attr() == cmwire.AttrRTU && id.psk != nil && !id.conn.Active() && id.conn.State() == fsm.REPSent {
		// The RTU must prove the key and bind this REQ and REP; a bad one
		// is dropped (the REP is resent, a genuine RTU still completes).
		if _, _, ok := id.psk.verify(pskRTU, id.rtuBinding(), msg.Body()); !ok {
			d.authFailures++
			d.vctx.AddCM(verbs.CMAuthFailures, 1)
			return
		}
	}
	if id == nil {
		d.unmatched++
		if msg.Attr() == cmwire.AttrDREQ {
			// A DREQ for unknown IDs is answered with a DREP.
			dreq := msg.DREQ()
			f := cmwire.DREPFields{LocalCommID: dreq.RemoteCommID(), RemoteCommID: dreq.LocalCommID()}
			d.send(p.From.Addr(), cmwire.AppendMAD(nil, msg.TransactionID(), f))
		}
		return
	}
	id.apply(now, id.conn.Handle(now, msg))
}

// handleREQ finds the connection a REQ duplicates or the listener it is
// for, or rejects it.
func (d *dispatcher) handleREQ(now time.Time, p *verbs.MADPacket, msg cmwire.Message) {
	req := msg.REQ()
	if id := d.remote[remoteKey{req.LocalCAGUID(), req.LocalCommID()}]; id != nil && id.conn != nil {
		// A duplicate: the answer (MRA, the REP again, REJ 10 in
		// timewait) goes where the copy came from, as the kernel's
		// response MADs do.
		r := id.conn.Handle(now, msg)
		for _, m := range r.Send {
			d.send(p.From.Addr(), m)
		}
		r.Send = nil
		id.apply(now, r)
		return
	}
	rejectPD := func(reason cmwire.RejectReason, pd []byte) {
		// No state: swap the REQ's ID words (roce-wire.md §6.4).
		f := cmwire.REJFields{LocalCommID: cmwire.CommID(uint32(req[4])<<24 | uint32(req[5])<<16 | uint32(req[6])<<8 | uint32(req[7])),
			RemoteCommID: req.LocalCommID(), MessageRejected: cmwire.KindREQ, Reason: reason}
		copy(f.PrivateData[:], pd)
		d.send(p.From.Addr(), cmwire.AppendMAD(nil, msg.TransactionID(), f))
	}
	reject := func(reason cmwire.RejectReason) { rejectPD(reason, nil) }
	// A copy of the REQ of a connection destroyed during its timewait.
	if e, ok := d.timewait[remoteKey{req.LocalCAGUID(), req.LocalCommID()}]; ok {
		if now.Before(e.expires) {
			d.stale++
			f := cmwire.REJFields{LocalCommID: e.local, RemoteCommID: req.LocalCommID(), MessageRejected: cmwire.KindREQ,
				Reason: cmwire.RejStaleConn}
			d.send(p.From.Addr(), cmwire.AppendMAD(nil, msg.TransactionID(), f))
			return
		}
		delete(d.timewait, remoteKey{req.LocalCAGUID(), req.LocalCommID()})
	}
	ps, port, ok := cmwire.SplitServiceID(req.ServiceID())
	ln := d.listeners[portKey{PortSpace(ps), port}]
	// The pre-shared key (psk.go): with one, a REQ must carry a valid MAC
	// before it causes anything, the stale-connection DREQ below
	// included.
	var reqMAC [pskMACLen]byte
	var nonce [pskNonceLen]byte
	if ok && ln != nil && ln.psk != nil && ln.ps != PSUDP {
		var valid bool
		if reqMAC, nonce, valid = ln.psk.verify(pskREQ, nil, req); !valid {
			d.authFailures++
			d.vctx.AddCM(verbs.CMAuthFailures, 1)
			rejectPD(cmwire.RejConsumerDefined, authRejectData(""))
			return
		}
	}
	// A new REQ from a peer QP that is still connected to us (the peer
	// restarted, or reused a QPN): REJ 10, and the old connection gets a
	// DREQ (cm_match_req).
	if old := d.remoteQP[qpKey{uint32(req.LocalQPN()), req.LocalCAGUID()}]; old != nil {
		d.stale++
		reject(cmwire.RejStaleConn)
		// A connection made with a key is torn down only by a REQ that
		// proves the same key (whatever port the REQ names).
		if old.psk != nil {
			if _, _, valid := old.psk.verify(pskREQ, nil, req); !valid {
				d.authFailures++
				d.vctx.AddCM(verbs.CMAuthFailures, 1)
				return
			}
		}
		if old.conn != nil && old.conn.State() == fsm.Established {
			if old.qp != nil {
				old.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
			}
			old.apply(now, old.conn.Disconnect(now))
			d.wake()
		}
		return
	}
	if !ok || ln == nil {
		reject(cmwire.RejInvalidServiceID)
		return
	}
	if ln.ps == PSUDP {
		// cma_check_req_qp_type: a REQ (RC) on a UD listener.
		reject(cmwire.RejConsumerDefined)
		return
	}
	// Half-open limits (limits.go), before the request costs anything;
	// with a key, only authenticated REQs count against them.
	peer := p.From.Addr().Unmap()
	if !ln.halfOpenRoom(peer) {
		d.limitRejects++
		d.vctx.AddCM(verbs.CMRejectsLimit, 1)
		rejectPD(cmwire.RejNoResources, []byte(limitRejectText))
		return
	}
	// rdma_cm validation (roce-wire.md §7.3); failures are REJ 28.
	hdr, ok := ln.admit(req.ServiceID(), req.PrivateData())
	if !ok || req.TransportType() != cmwire.TransportRC {
		reject(cmwire.RejConsumerDefined)
		return
	}
	// A copy of an authenticated REQ whose connection is gone: a replay
	// (retransmissions of a live one matched d.remote above).
	if ln.psk != nil && !d.replay.fresh(now, nonce) {
		d.authFailures++
		d.replays++
		d.vctx.AddCM(verbs.CMAuthFailures, 1)
		rejectPD(cmwire.RejConsumerDefined, authRejectData("replayed request"))
		return
	}
	child := &ID{ch: ln.ch, ps: ln.ps, vctx: d.vctx, d: d, listener: ln, state: stateConnectRequest, psk: ln.psk, pskREQ: reqMAC}
	child.peerGID = req.Primary().LocalGID()
	child.peer = child.peerGID.Addr()
	child.pathMTU = min(verbs.MTU(req.PathMTU()), d.vctx.ActiveMTU())
	child.setRequestAddrs(hdr, port)
	child.req = req.Fields()
	child.rqPSN = wire.PSN(rand.Uint32()) & wire.PSNMask
	child.conn = fsm.NewPassive(d.newCommID(), msg, 0)
	d.conns[child.conn.LocalID] = child
	child.rkey = remoteKey{req.LocalCAGUID(), req.LocalCommID()}
	d.remote[child.rkey] = child
	child.indexQP(req.LocalQPN(), req.LocalCAGUID())
	d.ids[child] = struct{}{}
	d.addRef() // the child holds the dispatcher like any ID
	ln.pending++
	child.pendingOn = ln
	ln.enterHalfOpen(child, peer)
	ud := make([]byte, cmwire.REQUserDataSize)
	if hdr != nil {
		copy(ud, req.UserData())
	} else {
		ud = append(ud[:0], req.PrivateData()...)
	}
	if ln.psk != nil {
		stripPSK(ud)
	}
	// The trailer ends both the raw private data and the user data.
	child.segOffer = stripSegTrailer(ud)
	ln.ch.post(&Event{Type: EventConnectRequest, ID: child, Listen: ln, Param: ConnParam{
		PrivateData:        ud,
		ResponderResources: req.InitiatorDepth(),
		InitiatorDepth:     req.ResponderResources(),
		FlowControl:        req.EndToEndFlowControl(),
		RetryCount:         req.RetryCount(),
		RNRRetryCount:      req.RNRRetryCount(),
		SRQ:                req.SRQ(),
		QPNum:              uint32(req.LocalQPN()),
		SegmentSize:        child.segOffer,
	}})
}

// admit is the validation a listener applies to an incoming REQ or
// SIDR_REQ as rdma_cm does (roce-wire.md §7.3): the CMA header, when the
// service ID is rdma_cm's, must parse and name the listener's address (when
// it is bound to one), and the backlog must have room. It returns the
// header (nil for a service ID outside rdma_cm's).
func (ln *ID) admit(serviceID uint64, pdata []byte) (cmwire.CMAHeader, bool) {
	var hdr cmwire.CMAHeader
	if cmwire.IsCMAServiceID(serviceID) {
		h, _, err := cmwire.ParseCMAHeader(pdata)
		if err != nil {
			return nil, false
		}
		hdr = h
	}
	if hdr != nil && ln.local.Addr().IsValid() && !ln.local.Addr().IsUnspecified() && hdr.Dst() != ln.local.Addr().Unmap() {
		return nil, false
	}
	return hdr, ln.pending < ln.backlog
}

// setRequestAddrs sets a passive ID's local and remote addresses from the
// request's CMA header, or, without one, from the context and the peer.
func (id *ID) setRequestAddrs(hdr cmwire.CMAHeader, port uint16) {
	if hdr != nil {
		id.local = netip.AddrPortFrom(hdr.Dst(), port)
		id.remote = netip.AddrPortFrom(hdr.Src(), hdr.Port())
	} else {
		id.local = netip.AddrPortFrom(id.d.vctx.LocalAddr().Addr(), port)
		id.remote = netip.AddrPortFrom(id.peer, 0)
	}
}
