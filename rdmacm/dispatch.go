package rdmacm

import (
	"container/heap"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/rdmacm/internal/fsm"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// A dispatcher owns the CM side of one verbs.Context: it reads QP1, routes
// each MAD to its connection by comm ID (or to a listener by service ID),
// runs the connections' timers, and sends what the state machines return.
// One exists while at least one ID uses the context.
type dispatcher struct {
	vctx  *verbs.Context
	gsi   hooks.GSI
	cm    *hooks.CMCounters // the context's, reported in verbs.Counters.CM
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

	kick    chan struct{}
	unreach chan *transport.UnreachableError // from hooks.Engine.OnUnreachable
	cancel  context.CancelFunc
	wg      sync.WaitGroup

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
		eng := hooks.Of(vctx)
		d = &dispatcher{
			vctx:        vctx,
			gsi:         eng.GSI(),
			cm:          eng.CM(),
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
			unreach:     make(chan *transport.UnreachableError, 16),
		}
		eng.OnUnreachable(d.icmpError)
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		pkts := make(chan hooks.MADPacket, 64)
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
		hooks.Of(d.vctx).OnUnreachable(nil)
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

func (d *dispatcher) read(ctx context.Context, out chan<- hooks.MADPacket) {
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

func (d *dispatcher) run(ctx context.Context, pkts <-chan hooks.MADPacket) {
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
		case e := <-d.unreach:
			d.unreachable(time.Now(), e)
		case <-d.kick:
		}
	}
}

// icmpError is the context's OnUnreachable: it passes the message to run,
// or drops it when run is behind (the REQ's own timer still ends the
// attempt).
func (d *dispatcher) icmpError(e *transport.UnreachableError) {
	select {
	case d.unreach <- e:
	default:
	}
}

// unreachable fails what waits for an answer from e's destination: active
// connections whose REQ is outstanding and service ID resolutions. An ICMP
// destination unreachable says no answer will come, so they end at once
// rather than after their retries (or, within SetNoListenerRetry's window,
// send their REQ again as after REJ 8). Connections the peer has answered
// and established ones are left alone (fsm.Conn.Unreachable).
func (d *dispatcher) unreachable(now time.Time, e *transport.UnreachableError) {
	peer := e.Dest.Addr().Unmap()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range d.conns {
		if id.peer == peer && id.conn.Active() && id.conn.Unreachable() {
			if !id.retryConnect(now) {
				id.ch.post(&Event{Type: EventUnreachable, ID: id, Status: -int(e.Errno), Err: fmt.Errorf("rdmacm: connect: %w", e)})
			}
			id.unpend()
			d.forget(id)
		}
	}
	for rid, id := range d.sidrs {
		if id.peer == peer && !id.ud.sidr.Done() {
			id.ud.sidr.Cancel()
			delete(d.sidrs, rid)
			id.ch.post(&Event{Type: EventUnreachable, ID: id, Status: -int(e.Errno), Err: fmt.Errorf("rdmacm: service ID resolution: %w", e)})
		}
	}
	d.wake()
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
		earliest(id.ud.sidr.Deadline())
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
			d.cm.Retries.Add(uint64(len(r.Send))) // a timer sends only retransmissions
			id.apply(now, r)
		}
	}
	for _, id := range d.sidrs {
		if dl := id.ud.sidr.Deadline(); !dl.IsZero() && !now.Before(dl) {
			r := id.ud.sidr.Tick(now)
			d.cm.Retries.Add(uint64(len(r.Send)))
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
	if id.passive.rkey == (remoteKey{}) {
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
	d.timewait[id.passive.rkey] = twEntry{local: id.conn.LocalID, expires: expires}
	heap.Push(&d.twQueue, twExpiry{expires: expires, key: id.passive.rkey})
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

func (d *dispatcher) handle(p *hooks.MADPacket) {
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
	if id != nil && msg.Attr() == cmwire.AttrRTU && id.psk.key != nil && !id.conn.Active() && id.conn.State() == fsm.REPSent {
		// The RTU must prove the key and bind this REQ and REP; a bad one
		// is dropped (the REP is resent, a genuine RTU still completes).
		if _, _, ok := id.psk.key.verify(pskRTU, id.rtuBinding(), msg.Body()); !ok {
			d.authFailures++
			d.cm.AuthFailures.Add(1)
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

// handleREQ takes a REQ in three steps: match it against what the
// dispatcher knows (a copy of a known REQ is answered there), admit it
// (every refusal sends its REJ), and create the passive ID that the
// listener's CONNECT_REQUEST reports.
func (d *dispatcher) handleREQ(now time.Time, p *hooks.MADPacket, msg cmwire.Message) {
	from := p.From.Addr()
	ln, port, handled := d.matchREQ(now, from, msg)
	if handled {
		return
	}
	a, ok := d.admitREQ(now, from, msg, ln)
	if !ok {
		return
	}
	d.createChild(msg, ln, port, a)
}

// matchREQ matches a REQ from the peer at from against the dispatcher's
// state. A copy of the REQ of a live passive connection is that
// connection's to answer (an MRA, the REP again, REJ 10 in timewait); a
// copy of the REQ of a connection destroyed during its timewait gets
// REJ 10. Either way handled is true. Otherwise it returns the listener
// the REQ's service ID names, nil when there is none (or the service ID
// is not one), and the port.
func (d *dispatcher) matchREQ(now time.Time, from netip.Addr, msg cmwire.Message) (ln *ID, port uint16, handled bool) {
	req := msg.REQ()
	rk := remoteKey{req.LocalCAGUID(), req.LocalCommID()}
	if id := d.remote[rk]; id != nil && id.conn != nil {
		// The answer goes where the copy came from, as the kernel's
		// response MADs do.
		r := id.conn.Handle(now, msg)
		for _, m := range r.Send {
			d.send(from, m)
		}
		r.Send = nil
		id.apply(now, r)
		return nil, 0, true
	}
	if e, ok := d.timewait[rk]; ok {
		if now.Before(e.expires) {
			d.stale++
			f := cmwire.REJFields{LocalCommID: e.local, RemoteCommID: req.LocalCommID(), MessageRejected: cmwire.KindREQ,
				Reason: cmwire.RejStaleConn}
			d.send(from, cmwire.AppendMAD(nil, msg.TransactionID(), f))
			return nil, 0, true
		}
		delete(d.timewait, rk)
	}
	ps, port, ok := cmwire.SplitServiceID(req.ServiceID())
	if !ok {
		return nil, port, false
	}
	return d.listeners[portKey{PortSpace(ps), port}], port, false
}

// reqAdmission is what admitREQ learned that createChild needs.
type reqAdmission struct {
	hdr    cmwire.CMAHeader // the CMA header; nil for a service ID outside rdma_cm's
	reqMAC [pskMACLen]byte  // the REQ's MAC, when the listener has a key
	peer   netip.Addr       // the sender, as the half-open limits count it
}

// admitREQ decides whether ln (nil: no listener) takes a REQ that matched
// nothing known. In order: the pre-shared key (psk.go; with one, a REQ
// must carry a valid MAC before it causes anything, the stale-connection
// DREQ included), a peer QP still connected to us (staleREQ), the
// listener, its port space, the half-open limits (limits.go; with a key,
// only authenticated REQs count), rdma_cm's validation (admit) and, with
// a key, a replay. Each refusal sends its REJ and returns ok false.
func (d *dispatcher) admitREQ(now time.Time, from netip.Addr, msg cmwire.Message, ln *ID) (a reqAdmission, ok bool) {
	req := msg.REQ()
	var nonce [pskNonceLen]byte
	if ln != nil && ln.psk.key != nil && ln.ps != PSUDP {
		var valid bool
		if a.reqMAC, nonce, valid = ln.psk.key.verify(pskREQ, nil, req); !valid {
			d.authFailures++
			d.cm.AuthFailures.Add(1)
			d.rejectREQ(from, msg, cmwire.RejConsumerDefined, authRejectData(""))
			return a, false
		}
	}
	if d.staleREQ(now, from, msg) {
		return a, false
	}
	if ln == nil {
		d.rejectREQ(from, msg, cmwire.RejInvalidServiceID, nil)
		return a, false
	}
	if ln.ps == PSUDP {
		// cma_check_req_qp_type: a REQ (RC) on a UD listener.
		d.rejectREQ(from, msg, cmwire.RejConsumerDefined, nil)
		return a, false
	}
	// Before the request costs anything.
	a.peer = from.Unmap()
	if !ln.halfOpenRoom(a.peer) {
		d.limitRejects++
		d.cm.RejectsLimit.Add(1)
		d.rejectREQ(from, msg, cmwire.RejNoResources, []byte(limitRejectText))
		return a, false
	}
	// rdma_cm validation (roce-wire.md §7.3); failures are REJ 28.
	a.hdr, ok = ln.admit(req.ServiceID(), req.PrivateData())
	if !ok || req.TransportType() != cmwire.TransportRC {
		d.rejectREQ(from, msg, cmwire.RejConsumerDefined, nil)
		return a, false
	}
	// A copy of an authenticated REQ whose connection is gone: a replay
	// (retransmissions of a live one matched d.remote in matchREQ).
	if ln.psk.key != nil && !d.replay.fresh(now, nonce) {
		d.authFailures++
		d.replays++
		d.cm.AuthFailures.Add(1)
		d.rejectREQ(from, msg, cmwire.RejConsumerDefined, authRejectData("replayed request"))
		return a, false
	}
	return a, true
}

// staleREQ handles a new REQ from a peer QP that is still connected to us
// (the peer restarted, or reused a QPN): REJ 10, and the old connection
// gets a DREQ (cm_match_req). It reports whether the REQ was one.
func (d *dispatcher) staleREQ(now time.Time, from netip.Addr, msg cmwire.Message) bool {
	req := msg.REQ()
	old := d.remoteQP[qpKey{uint32(req.LocalQPN()), req.LocalCAGUID()}]
	if old == nil {
		return false
	}
	d.stale++
	d.rejectREQ(from, msg, cmwire.RejStaleConn, nil)
	// A connection made with a key is torn down only by a REQ that proves
	// the same key (whatever port the REQ names).
	if old.psk.key != nil {
		if _, _, valid := old.psk.key.verify(pskREQ, nil, req); !valid {
			d.authFailures++
			d.cm.AuthFailures.Add(1)
			return true
		}
	}
	if old.conn != nil && old.conn.State() == fsm.Established {
		if old.qp != nil {
			old.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
		}
		old.apply(now, old.conn.Disconnect(now))
		d.wake()
	}
	return true
}

// rejectREQ answers a REQ that made no state with a REJ for reason, with
// private data pd: the REQ's ID words swapped (roce-wire.md §6.4).
func (d *dispatcher) rejectREQ(to netip.Addr, msg cmwire.Message, reason cmwire.RejectReason, pd []byte) {
	req := msg.REQ()
	f := cmwire.REJFields{LocalCommID: cmwire.CommID(uint32(req[4])<<24 | uint32(req[5])<<16 | uint32(req[6])<<8 | uint32(req[7])),
		RemoteCommID: req.LocalCommID(), MessageRejected: cmwire.KindREQ, Reason: reason}
	copy(f.PrivateData[:], pd)
	d.send(to, cmwire.AppendMAD(nil, msg.TransactionID(), f))
}

// createChild makes the passive ID of an admitted REQ on listener ln:
// its addresses, QP attributes from the REQ and state machine; it indexes
// it, counts it as pending and half-open on ln, and posts ln's
// CONNECT_REQUEST with the REQ's parameters and user data.
func (d *dispatcher) createChild(msg cmwire.Message, ln *ID, port uint16, a reqAdmission) {
	req := msg.REQ()
	child := &ID{ch: ln.ch, ps: ln.ps, vctx: d.vctx, d: d, state: stateConnectRequest}
	child.psk.key, child.psk.req = ln.psk.key, a.reqMAC
	child.ackTimeout, child.ackTimeoutSet = ln.ackTimeout, ln.ackTimeoutSet
	child.peerGID = req.Primary().LocalGID()
	child.peer = child.peerGID.Addr()
	child.pathMTU = min(verbs.MTU(req.PathMTU()), d.vctx.ActiveMTU())
	child.setRequestAddrs(a.hdr, port)
	child.passive.req = req.Fields()
	child.rqPSN = wire.PSN(rand.Uint32()) & wire.PSNMask
	child.conn = fsm.NewPassive(d.newCommID(), msg, 0)
	d.conns[child.conn.LocalID] = child
	child.passive.rkey = remoteKey{req.LocalCAGUID(), req.LocalCommID()}
	d.remote[child.passive.rkey] = child
	child.indexQP(req.LocalQPN(), req.LocalCAGUID())
	d.ids[child] = struct{}{}
	d.addRef() // the child holds the dispatcher like any ID
	ln.listen.pending++
	child.passive.pendingOn = ln
	ln.enterHalfOpen(child, a.peer)
	ud := make([]byte, cmwire.REQUserDataSize)
	if a.hdr != nil {
		copy(ud, req.UserData())
	} else {
		ud = append(ud[:0], req.PrivateData()...)
	}
	if ln.psk.key != nil {
		stripPSK(ud)
	}
	// The trailer ends both the raw private data and the user data.
	child.passive.segOffer = stripSegTrailer(ud)
	ln.ch.post(&Event{Type: EventConnectRequest, ID: child, Listen: ln, Param: ConnParam{
		PrivateData:        ud,
		ResponderResources: req.InitiatorDepth(),
		InitiatorDepth:     req.ResponderResources(),
		FlowControl:        req.EndToEndFlowControl(),
		RetryCount:         req.RetryCount(),
		RNRRetryCount:      req.RNRRetryCount(),
		SRQ:                req.SRQ(),
		QPNum:              uint32(req.LocalQPN()),
		SegmentSize:        child.passive.segOffer,
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
	return hdr, ln.listen.pending < ln.listen.backlog
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
