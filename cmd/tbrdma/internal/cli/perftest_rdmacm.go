package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// perftestCM is the -R (--rdma_cm) mode of the perftest commands, as
// perftest 4.5 runs it (perftest_communication.c: create_comm_struct,
// establish_connection, rdma_client_connect / rdma_server_connect,
// rdma_write_keys / rdma_read_keys, ctx_xchg_data_rdma):
//
//   - No TCP. The server listens with rdma_cm on -p in RDMA_PS_TCP; the
//     client resolves the address and route (2 s each) and connects. This
//     first connection is the "comm" QP: RC, one SEND and one receive
//     posted at a time, the receive as large as the key message.
//   - Every message of the TCP exchange (version, page size, cache line,
//     MTU, BW report values) travels as one SEND of the same size; the key
//     message becomes perftest's struct pingpong_dest, 56 bytes binary
//     (perf.MarshalBinaryKey); the closing handshake has no "done".
//   - After the MTU exchange and the header block: a key exchange of zeroed
//     descriptions, then the test QP's own connection on the same port (the
//     client retries while the server is not listening yet: perftest 10
//     times 100 ms apart, tbrdma 30 times), then another zeroed key
//     exchange. From there the
//     sequence is the TCP mode's, except that nobody moves the test QP: the
//     CM brought it to RTS.
//   - Connection parameters, both connections: responder resources and
//     initiator depth -o for READ and atomic tests (else 0), retry count 7,
//     RNR retry count 7, no private data of perftest's own; for RC the QP's
//     ACK timeout is --qp-timeout (RDMA_OPTION_ID_ACK_TIMEOUT, as perftest
//     24.10 and later; 4.5 left the CM's).
//   - At the end both sides disconnect both connections (DREQ/DREP).
//
// testdata/rxe/write_bw_rdma_cm.pcap (two rdma_rxe guests) shows all of it.
type perftestCM struct {
	t         *perftest
	ech       *rdmacm.EventChannel
	listeners []*rdmacm.ID
	extra     []*verbs.Context // devices a server without --bind opened and did not use
	comm      *rdmacm.ID
	test      *rdmacm.ID
	peer      netip.AddrPort // the client's: the server's address and port
	// commChannel carries the exchange on the comm QP.
	commChannel *perf.QPChannel
}

// cmTestRetries and cmTestRetryDelay bound the client's tries of the test
// QP's connection while the server is not listening yet (REJ, invalid
// service ID). perftest tries 10 times, 100 ms apart
// (rdma_cm_client_connection); tbrdma tries for 3 s, which also covers a
// slow (emulated) stock server.
const (
	cmTestRetries    = 30
	cmTestRetryDelay = 100 * time.Millisecond
	cmResolveTimeout = 2 * time.Second
	cmDisconnectWait = 2 * time.Second
)

// connParam is perftest's rdma_conn_param for both connections: the
// stock tools' values, not rdmacm.DefaultConnParam (no READ resources
// unless the test reads), so that a stock peer sees the same REQ and REP.
func (cm *perftestCM) connParam() *rdmacm.ConnParam {
	o := cm.t.o
	p := &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if o.Kind.verb == perf.VerbRead || o.Kind.verb == perf.VerbAtomic {
		p.ResponderResources, p.InitiatorDepth = uint8(min(o.OutReads, 255)), uint8(min(o.OutReads, 255))
	}
	return p
}

// connectComm opens the device and connects the comm QP: the server
// listens and accepts one client, the client connects. It returns the
// exchange over that QP.
func (cm *perftestCM) connectComm(ctx context.Context) (*perf.Comm, error) {
	t := cm.t
	o := t.o
	var err error
	if cm.ech, err = rdmacm.CreateEventChannel(nil); err != nil {
		return nil, err
	}
	var id *rdmacm.ID
	if o.Peer == "" {
		id, err = cm.accept(ctx)
	} else {
		id, err = cm.dial(ctx)
	}
	if err != nil {
		return nil, err
	}
	cm.comm = id
	var m perf.MsgConn = cm.commChannel
	if o.wrapMsg != nil {
		m = o.wrapMsg(m)
	}
	return perf.NewMsgComm(m, o.Peer == ""), nil
}

// accept listens on every serving address (one device each) and accepts
// the first connection request as the comm connection.
func (cm *perftestCM) accept(ctx context.Context) (*rdmacm.ID, error) {
	t := cm.t
	o := t.o
	devs, err := openServingDevices(o.Kind.name, o.bind, o.Addrs, o.OpenDevice, o.IO.ErrOut)
	if err != nil {
		closeDevices(devs)
		return nil, err
	}
	cm.extra = devs
	for _, d := range devs {
		l, err := cm.ech.CreateID(d, rdmacm.PSTCP)
		if err != nil {
			return nil, err
		}
		cm.listeners = append(cm.listeners, l)
		if err := cm.setACKTimeout(l); err != nil { // the comm and test connections take it from here
			return nil, err
		}
		if err := l.Bind(netip.AddrPortFrom(d.LocalAddr().Addr(), uint16(o.Port))); err != nil {
			return nil, fmt.Errorf("couldn't listen to rdma_cm port %d on %v: %w", o.Port, d.LocalAddr().Addr(), err)
		}
		if err := l.Listen(1); err != nil {
			return nil, fmt.Errorf("couldn't listen to rdma_cm port %d on %v: %w", o.Port, d.LocalAddr().Addr(), err)
		}
		if o.Port == 0 && o.Listening == nil { // -p 0: say which port (listenOneAllowed)
			announcePort(o.Kind.name, "rdma_cm", o.IO.ErrOut)(net.TCPAddrFromAddrPort(l.LocalAddr()))
		}
	}
	// The banner says the server is ready: the listeners are up.
	fmt.Fprint(t.human(), perf.WaitBanner)
	if o.Listening != nil {
		a := cm.listeners[0].LocalAddr()
		o.Listening(&net.TCPAddr{IP: a.Addr().AsSlice(), Port: int(a.Port())})
	}
	ev, err := cm.waitRequest(ctx, nil)
	if err != nil {
		return nil, err
	}
	// The device the client reached is the test's; the others go.
	dev := ev.ID.VerbsContext()
	keep := cm.listeners[:0]
	for _, l := range cm.listeners {
		if l == ev.Listen {
			keep = append(keep, l)
		} else {
			l.Destroy()
		}
	}
	cm.listeners = keep
	for _, d := range cm.extra {
		if d != dev {
			d.Close()
		}
	}
	cm.extra = nil
	if err := t.setup(dev); err != nil {
		ev.ID.Reject(nil)
		ev.ID.Destroy()
		return nil, err
	}
	if err := cm.newCommQP(ctx, ev.ID); err != nil {
		ev.ID.Reject(nil)
		ev.ID.Destroy()
		return nil, err
	}
	if err := ev.ID.Accept(cm.connParam()); err != nil {
		ev.ID.Destroy()
		return nil, fmt.Errorf("rdma_cm accept: %w", err)
	}
	if _, err := cm.waitFor(ctx, ev.ID, rdmacm.EventEstablished); err != nil {
		ev.ID.Destroy()
		return nil, err
	}
	return ev.ID, nil
}

// dial opens the device on the local address for the peer and connects
// the comm QP to the peer's port.
func (cm *perftestCM) dial(ctx context.Context) (*rdmacm.ID, error) {
	t := cm.t
	o := t.o
	addr, dev, err := openForPeer(ctx, o.Kind.name, o.Peer, o.bind, resolveHost, routeSource, o.OpenDevice)
	if err != nil {
		return nil, err
	}
	if err := t.setup(dev); err != nil {
		return nil, err
	}
	cm.peer = netip.AddrPortFrom(addr, uint16(o.Port))
	// The whole connection, retries included, within connectTimeout.
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	id, err := cm.dialWithin(ctx, cctx)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return nil, fmt.Errorf("no rdma_cm connection to %v port %d within %v: is the server (tbrdma %s -R, or perftest -R) running there with the same -p, and UDP port 4791 reachable (rdma_rxe or tbrdma on that address)?",
			cm.peer.Addr(), cm.peer.Port(), connectTimeout, o.Kind.name)
	}
	return id, err
}

// dialWithin connects the comm QP (dial's loop): ctx is the run's, for
// what outlives the connection; cctx bounds the connection.
func (cm *perftestCM) dialWithin(ctx, cctx context.Context) (*rdmacm.ID, error) {
	id, err := cm.resolve(cctx)
	if err != nil {
		return nil, err
	}
	if err := cm.newCommQP(ctx, id); err != nil {
		id.Destroy()
		return nil, err
	}
	// perftest does not retry this connection; tbrdma retries a REJ
	// (nothing listening yet) as it does the test QP's, for 3 s, so that
	// it may start together with its server.
	for try := 1; ; try++ {
		err := cm.connect(cctx, id)
		if err == nil {
			return id, nil
		}
		id.Destroy()
		id.DestroyQP()
		if !cmRejected(err) || try == cmTestRetries {
			return nil, err
		}
		select {
		case <-time.After(cmTestRetryDelay):
		case <-cctx.Done():
			return nil, cctx.Err()
		}
		// A new ID and comm QP (and CQ: the old ones go with the device).
		if id, err = cm.resolve(cctx); err != nil {
			return nil, err
		}
		if err := cm.newCommQP(ctx, id); err != nil {
			id.Destroy()
			return nil, err
		}
	}
}

// cmRejected reports a connection the peer rejected (nothing listening),
// which the client tries again; tbrdma serve's refusal is final.
func cmRejected(err error) bool {
	var ce *cmConnectError
	return errors.As(err, &ce) && ce.ev.Type == rdmacm.EventRejected && !serveRefusedR(ce.ev)
}

// newCommQP creates the comm QP on id, with its own CQ, and its message
// channel, whose receives are posted before the connection is made.
func (cm *perftestCM) newCommQP(ctx context.Context, id *rdmacm.ID) error {
	t := cm.t
	ch, err := t.dev.CreateCompChannel()
	if err != nil {
		return err
	}
	cq, err := t.dev.CreateCQ(perf.ChannelSendWR+perf.ChannelRecvWR+1, ch)
	if err != nil {
		return fmt.Errorf("couldn't create the rdma_cm exchange's CQ: %w", err)
	}
	qp, err := id.CreateQP(t.pd, &verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: perf.ChannelSendWR, MaxRecvWR: perf.ChannelRecvWR, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create the rdma_cm exchange's QP: %w", err)
	}
	cm.commChannel, err = perf.NewQPChannel(ctx, t.pd, qp, cq, ch)
	return err
}

// resolve creates an ID and resolves the peer's address and route.
func (cm *perftestCM) resolve(ctx context.Context) (*rdmacm.ID, error) {
	id, err := cm.ech.CreateID(cm.t.dev, rdmacm.PSTCP)
	if err != nil {
		return nil, err
	}
	err = id.ResolveAddr(cm.peer.String(), cmResolveTimeout)
	if err == nil {
		_, err = cm.waitFor(ctx, id, rdmacm.EventAddrResolved)
	}
	if err == nil {
		if err = id.ResolveRoute(cmResolveTimeout); err == nil {
			_, err = cm.waitFor(ctx, id, rdmacm.EventRouteResolved)
		}
	}
	if err != nil {
		id.Destroy()
		return nil, err
	}
	return id, nil
}

// setACKTimeout gives an RC connection's QP the test's --qp-timeout (on a
// listener: the QPs of the connections it accepts), as
// perftest 24.10 and later do (rdma_set_option with
// RDMA_OPTION_ID_ACK_TIMEOUT) where 4.5 left the CM's (19, 2.1 s: a loss
// that the tail-loss probe of selective retransmission does not cover
// waited that long).
func (cm *perftestCM) setACKTimeout(id *rdmacm.ID) error {
	if cm.t.o.Conn != "RC" {
		return nil
	}
	return id.SetACKTimeout(uint8(cm.t.o.QPTimeout))
}

// connect sends the connection request and waits for ESTABLISHED.
func (cm *perftestCM) connect(ctx context.Context, id *rdmacm.ID) error {
	if err := cm.setACKTimeout(id); err != nil {
		return err
	}
	if err := id.Connect(cm.connParam()); err != nil {
		return fmt.Errorf("rdma_cm connect: %w", err)
	}
	_, err := cm.waitFor(ctx, id, rdmacm.EventEstablished)
	return err
}

// connectTest connects the test QP between two zeroed key exchanges.
func (cm *perftestCM) connectTest(ctx context.Context, comm *perf.Comm) error {
	t := cm.t
	if _, err := comm.HandShake(perf.Dest{}); err != nil {
		return fmt.Errorf("sync before the rdma_cm connection of the test QP: %w", err)
	}
	var err error
	if t.o.Peer == "" {
		err = cm.acceptTest(ctx)
	} else {
		err = cm.dialTest(ctx)
	}
	if err != nil {
		return err
	}
	// The CM moved the QP to RTS with its own PSNs: print and send those.
	t.setMy(uint32(t.qp.Query().SQPSN))
	if _, err := comm.HandShake(perf.Dest{}); err != nil {
		return fmt.Errorf("sync after the rdma_cm connection of the test QP: %w", err)
	}
	return nil
}

func (cm *perftestCM) acceptTest(ctx context.Context) error {
	t := cm.t
	ev, err := cm.waitRequest(ctx, cm.comm)
	if err != nil {
		return err
	}
	id := ev.ID
	if t.qp, err = id.CreateQP(t.pd, t.qpInitAttr()); err != nil {
		id.Reject(nil)
		id.Destroy()
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	// As perftest's server (rdma_cm_connection_request_handler): the
	// READ/atomic depths no larger than what the client offered.
	p := cm.connParam()
	p.ResponderResources = min(p.ResponderResources, ev.Param.ResponderResources)
	p.InitiatorDepth = min(p.InitiatorDepth, ev.Param.InitiatorDepth)
	if err := id.Accept(p); err != nil {
		id.Destroy()
		return fmt.Errorf("rdma_cm accept: %w", err)
	}
	cm.test = id
	// As perftest's server: min_rnr_timer 12 (0.64 ms) once in RTS.
	if err := t.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, MinRNRTimer: 12}, verbs.QPAttrState|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("modify QP min_rnr_timer: %w", err)
	}
	// perftest's server does not wait for ESTABLISHED (the RTU): the
	// next key exchange, over the comm QP, synchronises both ends.
	return nil
}

func (cm *perftestCM) dialTest(ctx context.Context) error {
	t := cm.t
	var last error
	for try := range cmTestRetries {
		if try > 0 {
			select {
			case <-time.After(cmTestRetryDelay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		id, err := cm.resolve(ctx)
		if err != nil {
			return err
		}
		qp, err := id.CreateQP(t.pd, t.qpInitAttr())
		if err != nil {
			id.Destroy()
			return fmt.Errorf("couldn't create QP: %w", err)
		}
		err = cm.connect(ctx, id)
		if err == nil {
			t.qp, cm.test = qp, id
			return nil
		}
		id.Destroy()
		id.DestroyQP()
		if !cmRejected(err) {
			return err
		}
		last = err // not listening yet: try again
	}
	return fmt.Errorf("%w (tried %d times)", last, cmTestRetries)
}

// cmConnectError is a connection attempt that ended with an event other
// than the one awaited.
type cmConnectError struct {
	peer netip.AddrPort
	test string // the test's command (read-lat), for the client's messages
	ev   *rdmacm.Event
}

func (e *cmConnectError) Error() string {
	where := "the rdma_cm peer"
	if e.peer.IsValid() {
		where = fmt.Sprintf("%v port %d", e.peer.Addr(), e.peer.Port())
	}
	if msg, ok := unreachableText(e.ev.Err, "the server (perftest -R, or tbrdma with -R)"); ok {
		return msg
	}
	var re *rdmacm.RejectError
	switch {
	case serveRefusedR(e.ev):
		return fmt.Sprintf("%v runs tbrdma serve, which does not host -R tests: run a one-test server there (tbrdma %s -R, or perftest's with -R), or drop -R", e.peer.Addr(), e.test)
	case e.ev.Type == rdmacm.EventRejected && errors.As(e.ev.Err, &re) && re.Reason == rdmacm.RejectInvalidServiceID:
		return fmt.Sprintf("no rdma_cm listener on %s (rejected: %v) — is the server (perftest -R, or tbrdma with -R) running there, with the same -p?", where, re.Reason)
	case e.ev.Type == rdmacm.EventRejected:
		return fmt.Sprintf("%s rejected the rdma_cm connection: %v", where, e.ev)
	case e.ev.Type == rdmacm.EventUnreachable:
		return fmt.Sprintf("%s is unreachable: no answer to the rdma_cm connection request (is rdma_rxe or tbrdma running there, on UDP port 4791?)", where)
	case e.ev.Type == rdmacm.EventDisconnected:
		return fmt.Sprintf("%s disconnected", where)
	}
	return fmt.Sprintf("rdma_cm connection to %s: %v", where, e.ev)
}

func (e *cmConnectError) Unwrap() error { return e.ev.Err }

// waitFor reads events until one of type want arrives for id; an error
// event for id (or DISCONNECTED of the comm connection) ends the wait.
// Events of other IDs are dropped, except connection requests, which are
// rejected: a -R server serves one client.
func (cm *perftestCM) waitFor(ctx context.Context, id *rdmacm.ID, want rdmacm.EventType) (*rdmacm.Event, error) {
	for {
		ev, err := cm.ech.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		switch {
		case ev.ID == id && ev.Type == want:
			return ev, nil
		case ev.Type == rdmacm.EventConnectRequest:
			ev.ID.Reject(nil)
			ev.ID.Destroy()
		case ev.ID == id || (ev.ID == cm.comm && ev.Type == rdmacm.EventDisconnected):
			if ev.Type == rdmacm.EventEstablished || ev.Type == rdmacm.EventTimewaitExit {
				continue
			}
			return nil, &cmConnectError{peer: cm.peer, test: cm.t.o.Kind.name, ev: ev}
		}
	}
}

// waitRequest waits for a connection request on our listeners; a
// DISCONNECTED of comm (when not nil) ends the wait.
func (cm *perftestCM) waitRequest(ctx context.Context, comm *rdmacm.ID) (*rdmacm.Event, error) {
	for {
		ev, err := cm.ech.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		switch {
		case ev.Type == rdmacm.EventConnectRequest:
			return ev, nil
		case comm != nil && ev.ID == comm && ev.Type == rdmacm.EventDisconnected:
			return nil, &cmConnectError{ev: ev}
		}
	}
}

// close disconnects both connections (waiting up to two seconds for the
// peer's answer) and releases the IDs, the listeners and the channel.
func (cm *perftestCM) close() {
	if cm.ech == nil {
		return
	}
	var ids []*rdmacm.ID
	for _, id := range []*rdmacm.ID{cm.test, cm.comm} {
		if id != nil && id.Disconnect() == nil {
			ids = append(ids, id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmDisconnectWait)
	defer cancel()
	for len(ids) > 0 {
		ev, err := cm.ech.GetEvent(ctx)
		if err != nil {
			break
		}
		if ev.Type != rdmacm.EventDisconnected {
			continue
		}
		for i, id := range ids {
			if ev.ID == id {
				ids = append(ids[:i], ids[i+1:]...)
				break
			}
		}
	}
	for _, id := range []*rdmacm.ID{cm.test, cm.comm} {
		if id != nil {
			id.Destroy()
		}
	}
	for _, l := range cm.listeners {
		l.Destroy()
	}
	cm.ech.Destroy()
	closeDevices(cm.extra)
}

// awaitDisconnect waits, at most d, for the peer to disconnect the test
// connection: write-lat's server with -R, which must not tear its QP down
// while the client's last WRITE still waits for its ACK (perftestloops.go,
// awaitPeerDone).
func (cm *perftestCM) awaitDisconnect(ctx context.Context, d time.Duration) {
	if cm.ech == nil || cm.test == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		ev, err := cm.ech.GetEvent(ctx)
		if err != nil {
			return
		}
		if ev.Type == rdmacm.EventDisconnected && ev.ID == cm.test {
			return
		}
	}
}
