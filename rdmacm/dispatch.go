package rdmacm

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/rdmacm/internal/fsm"
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

	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Counters.
	unmatched uint64 // messages for no connection
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
			vctx:      vctx,
			gsi:       vctx.GSI(),
			guid:      nodeGUID(vctx),
			hiTID:     rand.Uint32(),
			conns:     map[cmwire.CommID]*ID{},
			remote:    map[remoteKey]*ID{},
			ports:     map[portKey]*ID{},
			listeners: map[portKey]*ID{},
			kick:      make(chan struct{}, 1),
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

func (d *dispatcher) nextDeadline() time.Time {
	var next time.Time
	for _, id := range d.conns {
		if dl := id.conn.Deadline(); !dl.IsZero() && (next.IsZero() || dl.Before(next)) {
			next = dl
		}
	}
	return next
}

func (d *dispatcher) tick(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range d.conns {
		if dl := id.conn.Deadline(); !dl.IsZero() && !now.Before(dl) {
			id.apply(now, id.conn.Tick(now))
		}
	}
}

// send sends a MAD to the peer's QP1 (UDP port 4791).
func (d *dispatcher) send(to netip.Addr, mad []byte) {
	d.gsi.Send(netip.AddrPortFrom(to, 0), mad)
}

// newCommID returns a fresh random non-zero comm ID.
func (d *dispatcher) newCommID() cmwire.CommID {
	for {
		c := cmwire.CommID(rand.Uint32())
		if _, used := d.conns[c]; c != 0 && !used {
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
	if msg.Attr() == cmwire.AttrREQ {
		d.handleREQ(now, p, msg)
		return
	}
	var remote cmwire.CommID
	switch msg.Attr() {
	case cmwire.AttrREP, cmwire.AttrRTU, cmwire.AttrREJ, cmwire.AttrMRA, cmwire.AttrDREQ, cmwire.AttrDREP:
		remote = cmwire.RTU(msg.Body()).RemoteCommID() // all keep it at body offset 4
	default:
		return // SIDR is not served yet
	}
	id := d.conns[remote]
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
		id.apply(now, id.conn.Handle(now, msg))
		return
	}
	reject := func(reason cmwire.RejectReason) {
		// No state: swap the REQ's ID words (roce-wire.md §6.4).
		f := cmwire.REJFields{LocalCommID: cmwire.CommID(uint32(req[4])<<24 | uint32(req[5])<<16 | uint32(req[6])<<8 | uint32(req[7])),
			RemoteCommID: req.LocalCommID(), MessageRejected: cmwire.KindREQ, Reason: reason}
		d.send(p.From.Addr(), cmwire.AppendMAD(nil, msg.TransactionID(), f))
	}
	ps, port, ok := cmwire.SplitServiceID(req.ServiceID())
	ln := d.listeners[portKey{PortSpace(ps), port}]
	if !ok || ln == nil {
		reject(cmwire.RejInvalidServiceID)
		return
	}
	// rdma_cm validation (roce-wire.md §7.3); failures are REJ 28.
	var hdr cmwire.CMAHeader
	if cmwire.IsCMAServiceID(req.ServiceID()) {
		h, _, err := cmwire.ParseCMAHeader(req.PrivateData())
		if err != nil {
			reject(cmwire.RejConsumerDefined)
			return
		}
		hdr = h
	}
	if req.TransportType() != cmwire.TransportRC || (hdr != nil && ln.local.Addr().IsValid() &&
		!ln.local.Addr().IsUnspecified() && hdr.Dst() != ln.local.Addr().Unmap()) || ln.pending >= ln.backlog {
		reject(cmwire.RejConsumerDefined)
		return
	}
	child := &ID{ch: ln.ch, ps: ln.ps, vctx: d.vctx, d: d, listener: ln, state: stateConnectRequest}
	child.peerGID = req.Primary().LocalGID()
	child.peer = child.peerGID.Addr()
	child.pathMTU = min(verbs.MTU(req.PathMTU()), d.vctx.ActiveMTU())
	if hdr != nil {
		child.local = netip.AddrPortFrom(hdr.Dst(), port)
		child.remote = netip.AddrPortFrom(hdr.Src(), hdr.Port())
	} else {
		child.local = netip.AddrPortFrom(d.vctx.LocalAddr().Addr(), port)
		child.remote = netip.AddrPortFrom(child.peer, 0)
	}
	child.req = req.Fields()
	child.conn = fsm.NewPassive(d.newCommID(), msg, 0)
	d.conns[child.conn.LocalID] = child
	child.rkey = remoteKey{req.LocalCAGUID(), req.LocalCommID()}
	d.remote[child.rkey] = child
	d.addRef() // the child holds the dispatcher like any ID
	ln.pending++
	child.pendingOn = ln
	ud := make([]byte, cmwire.REQUserDataSize)
	if hdr != nil {
		copy(ud, req.UserData())
	} else {
		ud = append(ud[:0], req.PrivateData()...)
	}
	ln.ch.post(&Event{Type: EventConnectRequest, ID: child, Listen: ln, Param: ConnParam{
		PrivateData:        ud,
		ResponderResources: req.InitiatorDepth(),
		InitiatorDepth:     req.ResponderResources(),
		FlowControl:        req.EndToEndFlowControl(),
		RetryCount:         req.RetryCount(),
		RNRRetryCount:      req.RNRRetryCount(),
		SRQ:                req.SRQ(),
		QPNum:              uint32(req.LocalQPN()),
	}})
}
