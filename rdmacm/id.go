package rdmacm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/rdmacm/internal/fsm"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// PortSpace is an rdma_cm port space (enum rdma_port_space).
type PortSpace uint16

const (
	// PSTCP is the port space of reliable connections (RDMA_PS_TCP).
	PSTCP PortSpace = PortSpace(cmwire.PSTCP)
	// PSUDP is the port space of unreliable datagrams (RDMA_PS_UDP): UD
	// QPs, "connected" by service ID resolution (SIDR_REQ/SIDR_REP) as
	// librdmacm's udaddy does.
	PSUDP PortSpace = PortSpace(cmwire.PSUDP)
	// PSIB allows any QP type (RDMA_PS_IB): an ID with a UD QP resolves
	// by SIDR, otherwise it connects RC.
	PSIB PortSpace = PortSpace(cmwire.PSIB)
)

func (ps PortSpace) String() string { return cmwire.PortSpace(ps).String() }

// CM parameters as the Linux rdma_cm uses them on RoCE (roce-wire.md §6.8,
// §7.4).
const (
	cmResponseTimeout cmwire.Timeout = 20 // CMA_CM_RESPONSE_TIMEOUT
	maxCMRetries                     = 15 // CMA_MAX_CM_RETRIES
	packetLifetime    cmwire.Timeout = 18 // CMA_IBOE_PACKET_LIFETIME
	caAckDelay        cmwire.Timeout = 15 // rxe's local_ca_ack_delay
	hopLimit                         = 64
)

type idState uint8

const (
	stateIdle idState = iota
	stateAddrQuery
	stateAddrResolved
	stateRouteResolved
	stateListen
	stateConnectRequest // passive, before Accept/Reject
	stateConnect        // a connection exists (fsm holds the details)
	stateDestroyed
)

// ID is an rdma_cm identifier (struct rdma_cm_id): a listener, or one end
// of a connection with its QP. Its methods are safe for concurrent use;
// its events arrive on the EventChannel it was created on (the listener's
// channel for an ID from a CONNECT_REQUEST).
type ID struct {
	ch   *EventChannel
	ps   PortSpace
	vctx *verbs.Context
	d    *dispatcher

	// Context is the caller's, untouched by the package.
	Context any

	// Everything below is guarded by d.mu.
	state idState

	// Addressing, of every ID: from Bind, ResolveAddr and ResolveRoute, or
	// for an ID made from a REQ, from the REQ.
	local   netip.AddrPort // bound address and port
	remote  netip.AddrPort // peer address and port (CMA header / ResolveAddr)
	peer    netip.Addr     // where CM MADs go
	peerGID verbs.GID
	pathMTU verbs.MTU
	bound   bool

	// The connection, on either side (RC; a UD ID has only qp and srq).
	qp    *verbs.QP
	srq   bool
	conn  *fsm.Conn
	param ConnParam // own parameters of Connect/Accept
	// ackTimeout, when ackTimeoutSet, is the QP's local ACK timeout at RTS
	// (SetACKTimeout) instead of the one the CM derives.
	ackTimeout    uint8
	ackTimeoutSet bool
	rqPSN         wire.PSN // the QP's receive PSN, sent in the REQ or the REP
	qkey          qpKey    // indexes a live connection by the peer's (QPN, CA GUID)

	// psk is the pre-shared key (psk.go), of every ID: the key, and the
	// MACs of this connection's REQ and REP, which bind the REP and the
	// RTU.
	psk struct {
		key      *pskKey
		req, rep [pskMACLen]byte
	}

	// listen is a listener's state (Listen).
	listen struct {
		backlog int
		pending int      // CONNECT_REQUESTs not answered yet
		limits  Limits   // half-open limits (limits.go)
		half    halfOpen // the half-open connections it counts
	}

	// active is the state of the side that calls Connect.
	active struct {
		est ConnParam // what ESTABLISHED reports
		// rep is what the REP said that the QP's RTR and RTS attributes
		// take (InitQPAttr); haveREP says it arrived.
		rep     repQPInfo
		haveREP bool
		// No-listener retries (SetNoListenerRetry): how long after
		// Connect a REJ 8 sends the REQ again, the REQ to send, and when
		// Connect ran.
		noListenFor time.Duration
		req         cmwire.REQFields
		connectedAt time.Time
	}

	// passive is the state of an ID made from a REQ (CONNECT_REQUEST).
	passive struct {
		req       cmwire.REQFields
		rkey      remoteKey // the peer's (CA GUID, comm ID)
		pendingOn *ID       // the listener counting it as pending
		// halfOn is the listener counting it as half-open while it is
		// (limits.go), halfPeer the peer address it is counted under.
		halfOn   *ID
		halfPeer netip.Addr
		// segOffer is the large-segment size the REQ offered, segAgreed
		// what Accept agreed to (segment.go).
		segOffer, segAgreed int
	}

	// ud is the UD (SIDR) state: on is set for PSUDP IDs and PSIB IDs with
	// a UD QP; sidr is the active side's resolution, req the passive
	// side's request.
	ud struct {
		on   bool
		sidr *fsm.SIDR
		req  *sidrRequest
	}
}

// CreateID creates an ID on vctx in port space ps (rdma_create_id). Its
// events arrive on ch. Destroy it when done.
func (ch *EventChannel) CreateID(vctx *verbs.Context, ps PortSpace) (*ID, error) {
	if vctx == nil {
		return nil, fmt.Errorf("rdmacm: create id: no verbs context: %w", ErrInvalidArgument)
	}
	if ps != PSTCP && ps != PSUDP && ps != PSIB {
		return nil, fmt.Errorf("rdmacm: create id: port space %v (use PSTCP, PSUDP or PSIB): %w", ps, ErrNotSupported)
	}
	ch.mu.Lock()
	closed := ch.closed
	ch.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	psk := ch.psk
	if psk == nil {
		psk = devicePSKOf(vctx)
	}
	d := acquire(vctx)
	id := &ID{ch: ch, ps: ps, vctx: vctx, d: d}
	id.ud.on, id.psk.key = ps == PSUDP, psk
	d.mu.Lock()
	removed := d.removed
	if !removed {
		d.ids[id] = struct{}{}
	}
	d.mu.Unlock()
	if removed {
		d.release()
		return nil, fmt.Errorf("rdmacm: create id: %w", ErrDeviceRemoved)
	}
	return id, nil
}

// Migrate moves the ID's events to ch (rdma_migrate_id): later events, and
// those of the ID still queued on its current channel, arrive on ch. A
// listener's CONNECT_REQUEST IDs keep the channel they were created on.
func (id *ID) Migrate(ch *EventChannel) error {
	if ch == nil {
		return fmt.Errorf("rdmacm: migrate: no channel: %w", ErrInvalidArgument)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state == stateDestroyed {
		return fmt.Errorf("rdmacm: migrate: %w", ErrClosed)
	}
	old := id.ch
	if old == ch {
		return nil
	}
	id.ch = ch
	old.mu.Lock()
	var moved []*Event
	kept := old.queue[:0]
	for _, ev := range old.queue {
		if ev.ID == id && ev.Type != EventConnectRequest {
			moved = append(moved, ev)
		} else {
			kept = append(kept, ev)
		}
	}
	clear(old.queue[len(kept):])
	old.queue = kept
	old.mu.Unlock()
	for _, ev := range moved {
		ch.post(ev)
	}
	return nil
}

// VerbsContext returns the verbs context the ID works on.
func (id *ID) VerbsContext() *verbs.Context { return id.vctx }

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QP returns the ID's QP (CreateQP), or nil.
func (id *ID) QP() *verbs.QP {
	id.d.mu.Lock()
	defer id.d.mu.Unlock()
	return id.qp
}

// LocalAddr returns the bound address and port.
func (id *ID) LocalAddr() netip.AddrPort {
	id.d.mu.Lock()
	defer id.d.mu.Unlock()
	return id.local
}

// RemoteAddr returns the peer's address and port.
func (id *ID) RemoteAddr() netip.AddrPort {
	id.d.mu.Lock()
	defer id.d.mu.Unlock()
	return id.remote
}

// PathMTU returns the path MTU of the resolved route or connection.
func (id *ID) PathMTU() verbs.MTU {
	id.d.mu.Lock()
	defer id.d.mu.Unlock()
	return id.pathMTU
}

// Bind binds the ID to addr (rdma_bind_addr). The address must be the
// verbs context's or unspecified; port 0 picks a free port.
func (id *ID) Bind(addr netip.AddrPort) error {
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateIdle || id.bound {
		return fmt.Errorf("rdmacm: bind: %w", ErrInvalidState)
	}
	return id.bindLocked(addr)
}

func (id *ID) bindLocked(addr netip.AddrPort) error {
	a := addr.Addr().Unmap()
	own := id.vctx.LocalAddr().Addr().Unmap()
	if a.IsValid() && !a.IsUnspecified() && a != own {
		return fmt.Errorf("rdmacm: bind %v: not the device's address %v: %w", addr, own, ErrInvalidArgument)
	}
	port, err := id.d.bind(id, id.ps, addr.Port())
	if err != nil {
		return fmt.Errorf("rdmacm: bind %v: %w", addr, err)
	}
	if !a.IsValid() {
		a = netip.IPv4Unspecified()
	}
	id.local, id.bound = netip.AddrPortFrom(a, port), true
	return nil
}

// ResolveAddr resolves dst ("host:port", host an IP literal or, with a
// Resolver on the channel, a name) and binds the ID if it is not bound
// (rdma_resolve_addr). ADDR_RESOLVED or ADDR_ERROR follows.
func (id *ID) ResolveAddr(dst string, timeout time.Duration) error {
	host, portStr, err := net.SplitHostPort(dst)
	if err != nil {
		return fmt.Errorf("rdmacm: resolve addr %q: %w", dst, ErrInvalidArgument)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return fmt.Errorf("rdmacm: resolve addr %q: bad port: %w", dst, ErrInvalidArgument)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateIdle {
		return fmt.Errorf("rdmacm: resolve addr: %w", ErrInvalidState)
	}
	if !id.bound {
		if err := id.bindLocked(netip.AddrPort{}); err != nil {
			return err
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		id.setRemoteLocked(netip.AddrPortFrom(a.Unmap(), uint16(port)))
		return nil
	}
	if id.ch.resolver == nil {
		return fmt.Errorf("rdmacm: resolve addr %q: not an IP address and no resolver: %w", host, ErrInvalidArgument)
	}
	id.state = stateAddrQuery
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		addrs, err := id.ch.resolver.LookupNetIP(ctx, host)
		d.mu.Lock()
		defer d.mu.Unlock()
		if id.state != stateAddrQuery {
			return // destroyed meanwhile
		}
		if err == nil && len(addrs) == 0 {
			err = fmt.Errorf("rdmacm: resolve %q: no addresses", host)
		}
		if err != nil {
			id.state = stateIdle
			id.ch.post(&Event{Type: EventAddrError, ID: id, Status: -113, Err: err}) // -EHOSTUNREACH
			return
		}
		id.setRemoteLocked(netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)))
	}()
	return nil
}

func (id *ID) setRemoteLocked(dst netip.AddrPort) {
	id.remote, id.peer = dst, dst.Addr()
	id.peerGID = wire.GIDFromAddr(dst.Addr())
	if id.local.Addr().IsUnspecified() {
		id.local = netip.AddrPortFrom(id.vctx.LocalAddr().Addr().Unmap(), id.local.Port())
	}
	id.state = stateAddrResolved
	id.ch.post(&Event{Type: EventAddrResolved, ID: id})
}

// ResolveRoute picks the path to the resolved address (rdma_resolve_route):
// the path MTU is the lesser of 4096 and the device's active MTU.
// ROUTE_RESOLVED follows, or ROUTE_ERROR (status -ENETUNREACH, a
// *RouteError) when the bound address cannot reach the peer (see
// checkRoute); the ID then stays address-resolved, as in rdma_cm.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	d := id.d
	d.mu.Lock()
	if id.state != stateAddrResolved {
		d.mu.Unlock()
		return fmt.Errorf("rdmacm: resolve route: %w", ErrInvalidState)
	}
	local, dst := id.local.Addr(), id.peer
	d.mu.Unlock()
	rerr := checkRoute(id.vctx, local, dst)
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateAddrResolved {
		return fmt.Errorf("rdmacm: resolve route: %w", ErrInvalidState)
	}
	if rerr != nil {
		id.ch.post(&Event{Type: EventRouteError, ID: id, Status: enetunreach, Err: rerr})
		return nil
	}
	id.pathMTU = min(verbs.MTU4096, id.vctx.ActiveMTU())
	id.state = stateRouteResolved
	id.ch.post(&Event{Type: EventRouteResolved, ID: id})
	return nil
}

// CreateQP creates the ID's QP on pd (rdma_create_qp). An RC QP goes to
// INIT and Connect or Accept moves it on to RTS. A UD QP (PSUDP, or PSIB
// with attr.Type UD) goes straight to RTS with Q_Key UDPQKey, as
// librdmacm does. attr.Type defaults to UD for PSUDP IDs and IDs from a
// SIDR_REQ, RC otherwise.
func (id *ID) CreateQP(pd *verbs.PD, attr *verbs.QPInitAttr) (*verbs.QP, error) {
	a := *attr
	ud := id.isUD() // PSUDP, or a PSIB ID from a SIDR_REQ
	if a.Type == 0 {
		a.Type = verbs.QPTypeRC
		if ud {
			a.Type = verbs.QPTypeUD
		}
	}
	switch {
	case a.Type == verbs.QPTypeRC && !ud:
	case a.Type == verbs.QPTypeUD && (id.ps == PSUDP || id.ps == PSIB):
		return id.createUDQP(pd, &a)
	default:
		return nil, fmt.Errorf("rdmacm: create qp: %v QP in port space %v (RC: PSTCP or PSIB; UD: PSUDP or PSIB): %w", a.Type, id.ps, ErrNotSupported)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.qp != nil || id.state == stateDestroyed {
		return nil, fmt.Errorf("rdmacm: create qp: %w", ErrInvalidState)
	}
	qp, err := pd.CreateQP(&a)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: create qp: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		qp.Close()
		return nil, fmt.Errorf("rdmacm: create qp: %w", err)
	}
	id.qp, id.srq = qp, a.SRQ != nil
	return qp, nil
}

// DestroyQP closes the ID's QP (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	id.d.mu.Lock()
	qp := id.qp
	id.qp = nil
	id.d.mu.Unlock()
	if qp == nil {
		return nil
	}
	return qp.Close()
}

// Listen starts listening for connection requests on the bound port
// (rdma_listen). backlog bounds the CONNECT_REQUESTs not yet accepted or
// rejected (≤ 0: 1024); more are rejected.
func (id *ID) Listen(backlog int) error {
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateIdle {
		return fmt.Errorf("rdmacm: listen: %w", ErrInvalidState)
	}
	if !id.bound {
		if err := id.bindLocked(netip.AddrPort{}); err != nil {
			return err
		}
	}
	if backlog <= 0 {
		backlog = 1024
	}
	id.listen.backlog, id.state = backlog, stateListen
	d.listeners[portKey{id.ps, id.local.Port()}] = id
	return nil
}

func clampRes(v uint8) uint8 {
	if v == MaxResources || v > verbs.MaxRdAtomic {
		return verbs.MaxRdAtomic
	}
	return v
}

// Connect sends a connection request to the resolved peer (rdma_connect).
// p nil means DefaultConnParam. A ConnParam's zero fields are passed on as
// zeros, as rdma_connect does: ResponderResources 0 refuses the peer's
// READs and atomics, RetryCount 0 gives up at the first lost packet, so
// start from DefaultConnParam rather than from ConnParam{}. ESTABLISHED,
// REJECTED, UNREACHABLE or CONNECT_ERROR follows; when the ID has a QP it
// is in RTS before ESTABLISHED.
//
// On a UD ID (PSUDP) Connect sends a SIDR_REQ with up to 180 bytes of
// private data after the CMA header, resent every 4.096 s up to 15 times;
// ESTABLISHED carries the peer's QPN, Q_Key and AH in Event.UD,
// UNREACHABLE a refusal (Status = the SIDR status) or the give-up (-110).
func (id *ID) Connect(p *ConnParam) error {
	if id.isUD() {
		return id.connectSIDR(p)
	}
	if p == nil {
		dp := DefaultConnParam()
		p = &dp
	}
	if len(p.PrivateData) > cmwire.REQUserDataSize {
		return fmt.Errorf("rdmacm: connect: %d bytes of private data, at most %d: %w", len(p.PrivateData), cmwire.REQUserDataSize, ErrInvalidArgument)
	}
	if p.SegmentSize != 0 {
		if !verbs.ValidSegmentSize(p.SegmentSize) {
			return fmt.Errorf("rdmacm: connect: segment size %d: want a multiple of 4096 from %d to %d: %w", p.SegmentSize, verbs.MinSegmentSize, verbs.SegmentSizeLimit, ErrInvalidArgument)
		}
		if len(p.PrivateData) > cmwire.REQUserDataSize-segTrailerLen {
			return fmt.Errorf("rdmacm: connect: %d bytes of private data, at most %d with a segment size offer: %w", len(p.PrivateData), cmwire.REQUserDataSize-segTrailerLen, ErrInvalidArgument)
		}
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateRouteResolved {
		return fmt.Errorf("rdmacm: connect: %w", ErrInvalidState)
	}
	if limit := reqUserLimit(id.psk.key != nil, p.SegmentSize != 0); len(p.PrivateData) > limit {
		return fmt.Errorf("rdmacm: connect: %d bytes of private data, at most %d with a pre-shared key (%d with a segment size offer too): %w", len(p.PrivateData), reqUserLimit(true, false), reqUserLimit(true, true), ErrInvalidArgument)
	}
	qpn := wire.QPN(p.QPNum)
	srq := p.SRQ
	if id.qp != nil {
		qpn, srq = id.qp.QPN(), id.srq
	}
	if qpn == 0 {
		return fmt.Errorf("rdmacm: connect: no QP: %w", ErrInvalidState)
	}
	id.param = *p
	id.param.PrivateData = nil
	id.param.ResponderResources = clampRes(p.ResponderResources)
	id.param.InitiatorDepth = clampRes(p.InitiatorDepth)
	id.rqPSN = wire.PSN(rand.Uint32()) & wire.PSNMask
	srcPort, dstPort := id.local.Port(), id.remote.Port()
	f := cmwire.REQFields{
		ServiceID:               cmwire.ServiceID(cmwire.PortSpace(id.ps), dstPort),
		LocalCAGUID:             d.guid,
		LocalQPN:                qpn,
		ResponderResources:      id.param.ResponderResources,
		InitiatorDepth:          id.param.InitiatorDepth,
		RemoteCMResponseTimeout: cmResponseTimeout,
		TransportType:           cmwire.TransportRC,
		EndToEndFlowControl:     p.FlowControl,
		StartingPSN:             id.rqPSN,
		LocalCMResponseTimeout:  cmResponseTimeout,
		RetryCount:              min(p.RetryCount, 7),
		PKey:                    wire.PKeyDefault,
		PathMTU:                 cmwire.MTU(id.pathMTU),
		RNRRetryCount:           min(p.RNRRetryCount, 7),
		MaxCMRetries:            maxCMRetries,
		SRQ:                     srq,
		Primary: cmwire.PathFields{
			LocalLID: 0xFFFF, RemoteLID: 0xFFFF,
			LocalGID: wire.GIDFromAddr(id.local.Addr()), RemoteGID: id.peerGID,
			FlowLabel:       (uint32(srcPort)*31 + uint32(dstPort)) & 0xFFFFF,
			HopLimit:        hopLimit,
			LocalACKTimeout: cmwire.AckTimeout(caAckDelay, packetLifetime),
		},
	}
	hdr := cmwire.NewCMAHeader(srcPort, id.local.Addr(), id.remote.Addr()).Append(f.PrivateData[:0])
	copy(f.PrivateData[len(hdr):], p.PrivateData)
	if p.SegmentSize != 0 {
		putSegTrailer(f.PrivateData[:], p.SegmentSize)
	}
	if id.psk.key != nil {
		reservePSK(f.PrivateData[:], p.SegmentSize != 0, false)
	}
	id.active.req = f
	id.active.connectedAt = time.Now()
	id.state = stateConnect
	id.sendREQ(id.active.connectedAt)
	return nil
}

// sendREQ starts the active side's state machine with a REQ built from
// id.active.req under a fresh local communication ID. d.mu is held.
func (id *ID) sendREQ(now time.Time) {
	d := id.d
	local := d.newCommID()
	f := id.active.req
	f.LocalCommID = local
	tid := cmwire.KernelTID(d.hiTID, local)
	mad := cmwire.AppendMAD(nil, tid, f)
	if id.psk.key != nil {
		id.psk.req = id.psk.key.sign(pskREQ, nil, mad)
	}
	id.conn = fsm.NewActive(local, tid, f.LocalQPN, fsm.ActiveTiming(cmResponseTimeout, packetLifetime, maxCMRetries))
	d.conns[local] = id
	id.apply(now, id.conn.Connect(now, mad))
	d.wake()
}

// noListenerRetryDelay is how long a connection refused for want of a
// listener waits before its REQ goes again (SetNoListenerRetry).
const noListenerRetryDelay = 50 * time.Millisecond

// SetNoListenerRetry makes Connect send its REQ again, every 50 ms, while
// the peer answers REJ 8 (nothing listens on the port), or the network an
// ICMP destination unreachable (no RoCE device there yet; Linux), and d has
// not passed since Connect; only then is REJECTED (or UNREACHABLE)
// reported. A client may then start
// together with its server, as perftest -R's test connection needs: it
// connects right after the exchange, before a slow server listens again,
// and its own retry reuses the IDs it has just destroyed. 0 (the default,
// as the kernel) reports the first REJ. Call it before Connect.
func (id *ID) SetNoListenerRetry(d time.Duration) {
	id.d.mu.Lock()
	id.active.noListenFor = max(d, 0)
	id.d.mu.Unlock()
}

// SetACKTimeout sets the local ACK timeout the ID's QP gets at RTS,
// 4.096 µs × 2^t, as librdmacm's rdma_set_option with
// RDMA_OPTION_ID_ACK_TIMEOUT: without it the timeout comes from the path
// (the packet lifetime and the responder's ACK delay in the REQ or REP;
// 19, 2.1 s, between two tbrdma ends, as between two rdma_rxe hosts). Here
// it changes nothing on the wire; the kernel's CM also puts t-1 in the
// route's packet lifetime when the option is set before the route is
// resolved, so its REQ then carries a different local ACK timeout, which
// tbrdma's does not. An ID made from a connection request takes its
// listener's (the kernel's starts without). t is at most 31 (a 5-bit
// field).
func (id *ID) SetACKTimeout(t uint8) error {
	if t > 31 {
		return fmt.Errorf("rdmacm: ACK timeout %d: want 0..31: %w", t, ErrInvalidArgument)
	}
	id.d.mu.Lock()
	id.ackTimeout, id.ackTimeoutSet = t, true
	id.d.mu.Unlock()
	return nil
}

// rtsTimeout is the QP's ACK timeout at RTS: SetACKTimeout's, or derived.
// d.mu is held.
func (id *ID) rtsTimeout(derived uint8) uint8 {
	if id.ackTimeoutSet {
		return id.ackTimeout
	}
	return derived
}

// retryNoListener reports whether a REJ with reason is to be answered by
// another REQ instead of REJECTED, and schedules it. d.mu is held.
func (id *ID) retryNoListener(now time.Time, reason RejectReason) bool {
	return reason == RejectInvalidServiceID && id.retryConnect(now)
}

// retryConnect reports whether a connection attempt that nobody took (REJ
// 8, or ICMP port unreachable: no RoCE device yet) is still within
// SetNoListenerRetry's window, and if so schedules the next REQ. d.mu is
// held.
func (id *ID) retryConnect(now time.Time) bool {
	if id.active.noListenFor == 0 || !id.conn.Active() ||
		now.Add(noListenerRetryDelay).Sub(id.active.connectedAt) > id.active.noListenFor {
		return false
	}
	conn := id.conn
	time.AfterFunc(noListenerRetryDelay, func() {
		d := id.d
		d.mu.Lock()
		defer d.mu.Unlock()
		if id.state != stateConnect || id.conn != conn {
			return // destroyed or disconnected meanwhile
		}
		id.sendREQ(time.Now())
	})
	return true
}

// accessFor is the QP access the CM grants (roce-wire.md §6.10): remote
// write always, remote read and atomics when the QP serves any.
func accessFor(respRes uint8) verbs.AccessFlags {
	a := verbs.AccessRemoteWrite
	if respRes > 0 {
		a |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	return a
}

// modifyQP moves qp INIT → INIT (access) → RTR → RTS.
func (id *ID) modifyQP(access verbs.AccessFlags, rtr, rts *verbs.QPAttr) error {
	qp := id.qp
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, AccessFlags: access}, verbs.QPAttrState|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("modify qp %v to INIT: %w", qp.QPN(), err)
	}
	rtr.State = verbs.QPStateRTR
	rtr.AH = verbs.AHAttr{DGID: id.peerGID, HopLimit: hopLimit, PortNum: 1}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
		verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	if rtr.SegmentSize != 0 {
		mask |= verbs.QPAttrSegmentSize
	}
	if err := qp.Modify(rtr, mask); err != nil {
		return fmt.Errorf("modify qp %v to RTR: %w", qp.QPN(), err)
	}
	rts.State = verbs.QPStateRTS
	if err := qp.Modify(rts, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("modify qp %v to RTS: %w", qp.QPN(), err)
	}
	return nil
}

// onREP moves the active QP to RTS from the REP and sends the RTU
// (roce-wire.md §6.10, §7.9).
func (id *ID) onREP(now time.Time, msg cmwire.Message) {
	rep := msg.REP()
	if id.psk.key != nil {
		mac, _, ok := id.psk.key.verify(pskREP, id.psk.req[:], rep)
		if !ok {
			id.authFailedREP(now)
			return
		}
		id.psk.rep = mac
	}
	pd := append([]byte(nil), rep.PrivateData()...)
	if id.psk.key != nil {
		stripPSK(pd)
	}
	seg := 0
	if id.param.SegmentSize != 0 { // only an offer is answered: a trailer is ours to read
		seg = agreeSegment(id.vctx, id.param.SegmentSize, stripSegTrailer(pd))
	}
	param := ConnParam{PrivateData: pd, ResponderResources: rep.InitiatorDepth(), InitiatorDepth: rep.ResponderResources(),
		FlowControl: rep.EndToEndFlowControl(), RNRRetryCount: rep.RNRRetryCount(), SRQ: rep.SRQ(), QPNum: uint32(rep.LocalQPN()),
		SegmentSize: seg}
	id.indexQP(rep.LocalQPN(), rep.LocalCAGUID())
	id.active.rep = repQPInfo{qpn: rep.LocalQPN(), psn: rep.StartingPSN(), ackDelay: rep.TargetACKDelay(),
		rnrRetry: rep.RNRRetryCount(), respRes: rep.ResponderResources()}
	id.active.haveREP = true
	if id.qp == nil {
		// The application moves its QP and calls Establish.
		id.ch.post(&Event{Type: EventConnectResponse, ID: id, Param: param})
		return
	}
	respRes := id.param.ResponderResources
	err := id.modifyQP(accessFor(respRes),
		&verbs.QPAttr{PathMTU: id.pathMTU, DestQPN: rep.LocalQPN(), RQPSN: id.rqPSN, MaxDestRdAtomic: respRes, SegmentSize: seg},
		&verbs.QPAttr{SQPSN: rep.StartingPSN(), Timeout: id.rtsTimeout(uint8(cmwire.AckTimeout(rep.TargetACKDelay(), packetLifetime))),
			RetryCnt: min(id.param.RetryCount, 7), RNRRetry: rep.RNRRetryCount(),
			MaxRdAtomic: min(id.param.InitiatorDepth, rep.ResponderResources())})
	if err != nil {
		id.apply(now, id.conn.Reject(now, cmwire.RejConsumerDefined, nil, nil))
		id.ch.post(&Event{Type: EventConnectError, ID: id, Status: einval, Err: fmt.Errorf("rdmacm: %w", err)})
		return
	}
	id.active.est = param
	id.apply(now, id.conn.SendRTU(now, id.rtuPrivateData()))
}

// Establish completes a connection whose ID has no QP, after
// CONNECT_RESPONSE, by sending the RTU (rdma_establish).
func (id *ID) Establish() error {
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.conn == nil || id.conn.State() != fsm.REPRcvd {
		return fmt.Errorf("rdmacm: establish: %w", ErrInvalidState)
	}
	id.apply(time.Now(), id.conn.SendRTU(time.Now(), id.rtuPrivateData()))
	return nil
}

// Accept accepts the connection request of an ID from a CONNECT_REQUEST
// (rdma_accept): the QP goes to RTS and the REP is sent; ESTABLISHED follows
// when the RTU arrives. p nil means librdmacm's defaults: the resources
// the peer offered (up to the device maximum) and RNR retry 7.
func (id *ID) Accept(p *ConnParam) error {
	if id.isUD() {
		return id.acceptSIDR(p)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateConnectRequest || id.conn == nil || id.conn.State() != fsm.REQRcvd && id.conn.State() != fsm.MRAREQSent {
		return fmt.Errorf("rdmacm: accept: %w", ErrInvalidState)
	}
	req := &id.passive.req
	if p == nil {
		p = &ConnParam{ResponderResources: min(req.InitiatorDepth, verbs.MaxRdAtomic),
			InitiatorDepth: min(req.ResponderResources, verbs.MaxRdAtomic), RNRRetryCount: 7}
	}
	if len(p.PrivateData) > cmwire.REPPrivateDataSize {
		return fmt.Errorf("rdmacm: accept: %d bytes of private data, at most %d: %w", len(p.PrivateData), cmwire.REPPrivateDataSize, ErrInvalidArgument)
	}
	if id.psk.key != nil && len(p.PrivateData) > cmwire.REPPrivateDataSize-pskTrailerLen {
		return fmt.Errorf("rdmacm: accept: %d bytes of private data, at most %d with a pre-shared key: %w", len(p.PrivateData), cmwire.REPPrivateDataSize-pskTrailerLen, ErrInvalidArgument)
	}
	seg := 0
	if id.passive.segOffer != 0 && p.SegmentSize != 0 {
		if n := repUserLimit(id.psk.key != nil, true); len(p.PrivateData) > n {
			return fmt.Errorf("rdmacm: accept: %d bytes of private data, at most %d when accepting a segment size: %w", len(p.PrivateData), n, ErrInvalidArgument)
		}
		seg = agreeSegment(id.vctx, p.SegmentSize, id.passive.segOffer)
	}
	qpn := wire.QPN(p.QPNum)
	srq := p.SRQ
	if id.qp != nil {
		qpn, srq = id.qp.QPN(), id.srq
	}
	if qpn == 0 {
		return fmt.Errorf("rdmacm: accept: no QP: %w", ErrInvalidState)
	}
	respRes, initDepth := clampRes(p.ResponderResources), clampRes(p.InitiatorDepth)
	// id.rqPSN was chosen with the request (createChild), so that InitQPAttr
	// can give it before Accept.
	if id.qp != nil {
		err := id.modifyQP(accessFor(respRes),
			&verbs.QPAttr{PathMTU: id.pathMTU, DestQPN: req.LocalQPN, RQPSN: id.rqPSN, MaxDestRdAtomic: respRes, SegmentSize: seg},
			&verbs.QPAttr{SQPSN: req.StartingPSN, Timeout: id.rtsTimeout(uint8(req.Primary.LocalACKTimeout)), RetryCnt: req.RetryCount,
				RNRRetry: req.RNRRetryCount, MaxRdAtomic: min(initDepth, req.ResponderResources)})
		if err != nil {
			return fmt.Errorf("rdmacm: accept: %w", err)
		}
	}
	f := cmwire.REPFields{
		LocalCommID: id.conn.LocalID, RemoteCommID: id.conn.RemoteID, LocalQPN: qpn, StartingPSN: id.rqPSN,
		ResponderResources: respRes, InitiatorDepth: initDepth, TargetACKDelay: caAckDelay,
		EndToEndFlowControl: p.FlowControl, RNRRetryCount: min(p.RNRRetryCount, 7), SRQ: srq, LocalCAGUID: d.guid,
	}
	copy(f.PrivateData[:], p.PrivateData)
	if seg != 0 {
		putSegTrailer(f.PrivateData[:], seg)
	}
	if id.psk.key != nil {
		reservePSK(f.PrivateData[:], seg != 0, false)
	}
	mad := cmwire.AppendMAD(nil, id.conn.TID, f)
	if id.psk.key != nil {
		id.psk.rep = id.psk.key.sign(pskREP, id.psk.req[:], mad)
	}
	id.passive.segAgreed = seg
	id.param = ConnParam{ResponderResources: respRes, InitiatorDepth: initDepth, FlowControl: p.FlowControl,
		RNRRetryCount: p.RNRRetryCount} // what InitQPAttr gives from now on
	id.conn.LocalQPN = qpn
	id.unpend()
	id.state = stateConnect
	id.apply(time.Now(), id.conn.Accept(time.Now(), mad))
	d.wake()
	return nil
}

// unpend stops counting the ID against its listener's backlog.
func (id *ID) unpend() {
	if id.passive.pendingOn != nil {
		id.passive.pendingOn.listen.pending--
		id.passive.pendingOn = nil
	}
}

// Reject rejects the connection request of an ID from a CONNECT_REQUEST
// with REJ reason 28 (consumer defined) and up to 148 bytes of private
// data (rdma_reject); on a UD ID, with a SIDR_REP of status SIDRReject and
// up to 136 bytes.
func (id *ID) Reject(privateData []byte) error {
	if id.isUD() {
		return id.rejectSIDR(privateData)
	}
	if len(privateData) > cmwire.REJPrivateDataSize {
		return fmt.Errorf("rdmacm: reject: %d bytes of private data, at most %d: %w", len(privateData), cmwire.REJPrivateDataSize, ErrInvalidArgument)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateConnectRequest || id.conn == nil {
		return fmt.Errorf("rdmacm: reject: %w", ErrInvalidState)
	}
	id.unpend()
	id.apply(time.Now(), id.conn.Reject(time.Now(), cmwire.RejConsumerDefined, nil, privateData))
	return nil
}

// Disconnect moves the QP to ERR and sends a DREQ, or the DREP when the
// peer disconnected first (rdma_disconnect). DISCONNECTED follows (once per
// connection), then TIMEWAIT_EXIT.
func (id *ID) Disconnect() error {
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.conn == nil {
		return fmt.Errorf("rdmacm: disconnect: %w", ErrInvalidState)
	}
	switch id.conn.State() {
	case fsm.Established, fsm.REPSent, fsm.DREQRcvd:
	default:
		return fmt.Errorf("rdmacm: disconnect in %v: %w", id.conn.State(), ErrInvalidState)
	}
	if id.qp != nil {
		id.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	}
	id.apply(time.Now(), id.conn.Disconnect(time.Now()))
	d.wake()
	return nil
}

// Destroy releases the ID (rdma_destroy_id): a connection in progress is
// rejected, an established one gets a DREQ (no wait), a received DREQ its
// DREP. The QP is not closed (DestroyQP). Destroy is idempotent.
func (id *ID) Destroy() error {
	d := id.d
	d.mu.Lock()
	if id.state == stateDestroyed {
		d.mu.Unlock()
		return nil
	}
	now := time.Now()
	if id.conn != nil {
		d.enterTimewait(now, id)
		r := id.conn.Destroy(now, d.guid)
		for _, m := range r.Send {
			d.send(id.peer, m)
		}
		d.forget(id)
	}
	id.destroySIDR()
	delete(d.ids, id)
	id.unpend()
	id.leaveHalfOpen()
	if id.bound && d.ports[portKey{id.ps, id.local.Port()}] == id {
		delete(d.ports, portKey{id.ps, id.local.Port()})
	}
	if id.state == stateListen {
		delete(d.listeners, portKey{id.ps, id.local.Port()})
	}
	id.state = stateDestroyed
	d.mu.Unlock()
	d.release()
	return nil
}

// forget removes the ID's connection from the dispatcher's tables.
func (d *dispatcher) forget(id *ID) {
	if id.conn == nil {
		return
	}
	if d.conns[id.conn.LocalID] == id {
		delete(d.conns, id.conn.LocalID)
	}
	if id.passive.rkey != (remoteKey{}) && d.remote[id.passive.rkey] == id {
		delete(d.remote, id.passive.rkey)
	}
	d.unindexQP(id)
}

// apply sends what a state machine step returned and reports its event.
func (id *ID) apply(now time.Time, r fsm.Result) {
	d := id.d
	for _, m := range r.Send {
		d.send(id.peer, m)
	}
	switch r.Event {
	case fsm.EvGotREP:
		id.onREP(now, r.Msg)
	case fsm.EvEstablished:
		ev := &Event{Type: EventEstablished, ID: id, Param: id.active.est}
		if !id.conn.Active() {
			ev.Param = ConnParam{ResponderResources: id.passive.req.InitiatorDepth, InitiatorDepth: id.passive.req.ResponderResources,
				RetryCount: id.passive.req.RetryCount, RNRRetryCount: id.passive.req.RNRRetryCount, QPNum: uint32(id.passive.req.LocalQPN),
				SegmentSize: id.passive.segAgreed}
		}
		id.ch.post(ev)
	case fsm.EvRejected:
		rej := r.Msg.REJ()
		pd := append([]byte(nil), rej.PrivateData()...)
		reason := RejectReason(rej.Reason())
		if id.retryNoListener(now, reason) {
			break
		}
		id.ch.post(&Event{Type: EventRejected, ID: id, Status: int(reason), Param: ConnParam{PrivateData: pd},
			Err: &RejectError{Reason: reason, PrivateData: pd, Auth: isAuthReject(reason, pd)}})
	case fsm.EvUnreachable:
		if !id.conn.Active() {
			// The REP's retries ran out: a half-open connection.
			d.halfOpenExpired++
			d.cm.HalfOpenExpired.Add(1)
		}
		id.ch.post(&Event{Type: EventUnreachable, ID: id, Status: etimedout, Err: &TimeoutError{Op: "connect"}})
	case fsm.EvDisconnected:
		id.ch.post(&Event{Type: EventDisconnected, ID: id})
	case fsm.EvTimewaitExit:
		id.ch.post(&Event{Type: EventTimewaitExit, ID: id})
	}
	id.settleHalfOpen()
	switch id.conn.State() {
	case fsm.Closed:
		id.unpend()
		d.forget(id)
	case fsm.TimeWait:
		// The kernel drops a connection from its (remote QPN, CA GUID)
		// index when it enters timewait (cm_enter_timewait).
		d.unindexQP(id)
	}
}
