package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// The Go-shaped layer: Dial and Listen/Accept hand out connected RC
// endpoints (*Conn), with context cancellation, on top of the rdma_cm API
// above. Each Conn owns an event channel and a goroutine that follows its
// ID: it answers the peer's disconnect with a DREP (what an rdma_cm
// program does on DISCONNECTED) and ends the Conn.

// ErrPeerClosed is the reason of a Conn the peer disconnected.
var ErrPeerClosed = errors.New("rdmacm: connection closed by the peer")

// CloseTimeout bounds how long Conn.Close waits for the peer to confirm
// the disconnect (its DREP) before it destroys the connection anyway.
const CloseTimeout = 3 * time.Second

// defaultCap is the QP size Dial and Listen use when the options give
// none.
var defaultCap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}

// EndpointOptions say how Dial and Listen build a connection's verbs
// resources. The zero value is usable.
type EndpointOptions struct {
	// PD is the protection domain of the QP; nil: a new one per
	// connection.
	PD *verbs.PD
	// QP describes the RC QP. Type must be 0 or RC. Nil SendCQ/RecvCQ: one
	// CQ of Cap.MaxSendWR + Cap.MaxRecvWR entries, made per connection,
	// serves both. A zero Cap means 64 send and receive WRs of one SGE.
	QP verbs.QPInitAttr
	// PSK is the pre-shared key that authenticates the connection setup
	// (ChannelOptions.PSK); nil: the device's (SetDevicePSK), if any.
	PSK []byte
}

// DialOptions configure Dial. A nil *DialOptions is the zero value.
type DialOptions struct {
	EndpointOptions
	// Resolver resolves a host name in Dial's address; nil: IP literals
	// only.
	Resolver Resolver
	// LocalAddr binds the connection (an unspecified address or port 0
	// picks them).
	LocalAddr netip.AddrPort
	// Param are the connection parameters (private data ≤ 56 bytes,
	// resources, retry counts); nil: Connect(nil)'s defaults.
	Param *ConnParam
}

// ListenOptions configure Listen. A nil *ListenOptions is the zero value.
type ListenOptions struct {
	EndpointOptions
	// Backlog bounds the requests being answered and the connections
	// waiting for Accept (≤ 0: 128); more are rejected or dropped.
	Backlog int
	// Limits bound the half-open connections per peer address and in
	// total (limits.go); zero fields take the defaults.
	Limits Limits
	// Param chooses Accept's parameters for a CONNECT_REQUEST (req.Param
	// is what the peer offered; req.PrivateData() its 56 bytes). A
	// non-nil error rejects the request, with the private data of a
	// *RejectError. Fields left zero are zero, as with rdma_accept: in
	// particular RNRRetryCount becomes the peer's rnr_retry (use 7). Nil
	// Param accepts everything with Accept(nil)'s defaults.
	Param func(req *Event) (*ConnParam, error)
}

// Conn is a connected RC endpoint: the QP in RTS and its CQs, PD and ID.
// Post work on QP() and poll the CQs directly. Its methods are safe for
// concurrent use.
type Conn struct {
	ch       *EventChannel
	id       *ID
	pd       *verbs.PD
	qp       *verbs.QP
	scq, rcq *verbs.CQ
	// ownCQ and ownPD are what newConn made (nil: the caller's), which
	// release closes after the QP.
	ownCQ  *verbs.CQ
	ownPD  *verbs.PD
	local  netip.AddrPort
	remote netip.AddrPort

	established chan struct{}
	done        chan struct{}
	watched     chan struct{}
	onEst       func(*Conn) // called by the watcher on ESTABLISHED

	mu        sync.Mutex
	param     ConnParam
	err       error
	ended     bool
	watching  bool
	closing   bool
	closeOnce sync.Once
	closeErr  error
}

// QP returns the connection's QP (RTS while connected).
func (c *Conn) QP() *verbs.QP { return c.qp }

// PD returns the protection domain of the QP.
func (c *Conn) PD() *verbs.PD { return c.pd }

// SendCQ returns the QP's send CQ.
func (c *Conn) SendCQ() *verbs.CQ { return c.scq }

// RecvCQ returns the QP's receive CQ (the same as SendCQ unless the
// options gave two).
func (c *Conn) RecvCQ() *verbs.CQ { return c.rcq }

// ID returns the underlying rdma_cm ID. Its events belong to the Conn: do
// not Migrate or Destroy it.
func (c *Conn) ID() *ID { return c.id }

// LocalAddr returns this end's address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr returns the peer's address and port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// Param returns what the peer sent: its private data (196 bytes from the
// REP on the dialing side, 56 from the REQ on the accepting side, zero
// padded) and the resources it offered, from this side's view.
func (c *Conn) Param() ConnParam {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.param
}

// PrivateData returns Param().PrivateData.
func (c *Conn) PrivateData() []byte { return c.Param().PrivateData }

// Done is closed when the connection ends: the peer disconnected, Close
// was called, or the device went away. Err says which.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is up, then why it ended
// (ErrPeerClosed, ErrClosed, ErrDeviceRemoved, or the failure).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Conn) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.ended, c.err = true, err
		close(c.done)
	}
}

// newConn makes the channel-owning Conn of id and its QP.
func newConn(ch *EventChannel, id *ID, o *EndpointOptions) (*Conn, error) {
	c := &Conn{ch: ch, id: id, established: make(chan struct{}), done: make(chan struct{}), watched: make(chan struct{})}
	vctx := id.VerbsContext()
	c.pd = o.PD
	if c.pd == nil {
		pd, err := vctx.AllocPD()
		if err != nil {
			return nil, err
		}
		c.pd, c.ownPD = pd, pd
	}
	attr := o.QP
	if attr.Type != 0 && attr.Type != verbs.QPTypeRC {
		return nil, fmt.Errorf("rdmacm: %v QP: Dial and Listen make RC connections: %w", attr.Type, ErrNotSupported)
	}
	if attr.Cap == (verbs.QPCap{}) {
		attr.Cap = defaultCap
	}
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		cq, err := vctx.CreateCQ(attr.Cap.MaxSendWR+attr.Cap.MaxRecvWR, nil)
		if err != nil {
			if c.ownPD != nil {
				c.ownPD.Close()
			}
			return nil, err
		}
		c.ownCQ = cq
		if attr.SendCQ == nil {
			attr.SendCQ = cq
		}
		if attr.RecvCQ == nil {
			attr.RecvCQ = cq
		}
	}
	c.scq, c.rcq = attr.SendCQ, attr.RecvCQ
	qp, err := id.CreateQP(c.pd, &attr)
	if err != nil {
		if c.ownCQ != nil {
			c.ownCQ.Close()
		}
		if c.ownPD != nil {
			c.ownPD.Close()
		}
		return nil, err
	}
	c.qp = qp
	return c, nil
}

// watch follows the Conn's events until its channel is destroyed.
func (c *Conn) watch() {
	defer close(c.watched)
	for {
		ev, err := c.ch.GetEvent(context.Background())
		if err != nil {
			c.end(ErrClosed)
			return
		}
		switch ev.Type {
		case EventEstablished:
			c.mu.Lock()
			if len(ev.Param.PrivateData) > 0 { // the passive side keeps the REQ's
				c.param = ev.Param
			}
			c.mu.Unlock()
			close(c.established)
			if c.onEst != nil {
				c.onEst(c)
			}
		case EventDisconnected:
			c.id.Disconnect() // the DREP, if the peer started; nothing to do otherwise
			c.mu.Lock()
			why := ErrPeerClosed
			if c.closing {
				why = ErrClosed
			}
			c.mu.Unlock()
			c.end(why)
		case EventDeviceRemoval:
			c.end(ErrDeviceRemoved)
		case EventRejected, EventUnreachable, EventConnectError, EventAddrError, EventRouteError:
			c.end(ev.Err)
		}
	}
}

// Close disconnects (DREQ), waits up to CloseTimeout for the peer's
// DREP, and releases the ID, QP and channel. See CloseContext.
func (c *Conn) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	return c.CloseContext(ctx)
}

// CloseContext is Close with the wait for the peer's confirmation bounded
// by ctx instead of CloseTimeout. It releases everything in any case; the
// error says the peer did not confirm in time. Later calls return the
// first one's result.
func (c *Conn) CloseContext(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		if err := c.id.Disconnect(); err == nil {
			select {
			case <-c.done:
			case <-ctx.Done():
				c.closeErr = fmt.Errorf("rdmacm: close %v: the peer did not confirm the disconnect: %w", c.remote, ctx.Err())
			}
		}
		c.release()
		c.end(ErrClosed)
	})
	return c.closeErr
}

// release destroys the ID (with what rdma_destroy_id sends in its
// state), the QP and the channel, and waits for the watcher.
func (c *Conn) release() {
	c.id.Destroy()
	c.id.DestroyQP()
	c.ch.Destroy()
	c.mu.Lock()
	watching := c.watching
	c.mu.Unlock()
	if watching {
		<-c.watched
	}
	if c.ownCQ != nil {
		c.ownCQ.Close()
	}
	if c.ownPD != nil {
		// Busy (and left open) while the caller's MRs on it live.
		c.ownPD.Close()
	}
}

// Dial connects to addr ("host:port"; host an IP literal or, with
// opts.Resolver, a name) from vctx and returns the connected endpoint
// (rdma_resolve_addr, rdma_resolve_route, rdma_create_qp, rdma_connect).
// ctx bounds the whole setup: when it ends first, Dial abandons the
// connection as rdma_destroy_id would (a REJ to the peer if the REQ is
// out) and returns an error wrapping ctx.Err(). A refusal is a
// *RejectError, a silent peer a *TimeoutError (after 16 REQs, ~98 s,
// unless ctx ends earlier).
func Dial(ctx context.Context, vctx *verbs.Context, addr string, opts *DialOptions) (*Conn, error) {
	if opts == nil {
		opts = &DialOptions{}
	}
	ch, err := CreateEventChannel(&ChannelOptions{Resolver: opts.Resolver, PSK: opts.PSK})
	if err != nil {
		return nil, err
	}
	id, err := ch.CreateID(vctx, PSTCP)
	if err != nil {
		ch.Destroy()
		return nil, fmt.Errorf("rdmacm: dial %s: %w", addr, err)
	}
	fail := func(c *Conn, err error) (*Conn, error) {
		if c != nil {
			c.release()
		} else {
			id.Destroy()
			ch.Destroy()
		}
		return nil, fmt.Errorf("rdmacm: dial %s: %w", addr, err)
	}
	step := func(want EventType) error {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return err
		}
		if ev.Type != want {
			if ev.Err != nil {
				return ev.Err
			}
			return fmt.Errorf("%v, want %v", ev.Type, want)
		}
		return nil
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	if opts.LocalAddr.IsValid() {
		if err := id.Bind(opts.LocalAddr); err != nil {
			return fail(nil, err)
		}
	}
	if err := id.ResolveAddr(addr, timeout); err != nil {
		return fail(nil, err)
	}
	if err := step(EventAddrResolved); err != nil {
		return fail(nil, err)
	}
	if err := id.ResolveRoute(timeout); err != nil {
		return fail(nil, err)
	}
	if err := step(EventRouteResolved); err != nil {
		return fail(nil, err)
	}
	c, err := newConn(ch, id, &opts.EndpointOptions)
	if err != nil {
		return fail(nil, err)
	}
	c.local, c.remote = id.LocalAddr(), id.RemoteAddr()
	c.setWatching()
	go c.watch()
	if err := id.Connect(opts.Param); err != nil {
		return fail(c, err)
	}
	select {
	case <-c.established:
		return c, nil
	case <-c.done:
		select {
		case <-c.established:
			return c, nil // established, then disconnected at once
		default:
		}
		return fail(c, c.Err())
	case <-ctx.Done():
		return fail(c, ctx.Err())
	}
}

func (c *Conn) setWatching() {
	c.mu.Lock()
	c.watching = true
	c.mu.Unlock()
}

// Listener accepts RC connections on one port (rdma_listen); Accept hands
// them out once ESTABLISHED. Its methods are safe for concurrent use.
type Listener struct {
	ch   *EventChannel
	id   *ID
	opts ListenOptions

	ready chan *Conn
	gone  chan struct{} // closed by Close or a device removal
	loop  chan struct{} // closed when the event loop ends

	mu      sync.Mutex
	err     error
	closed  bool
	waiting map[*Conn]struct{} // connections not handed out by Accept
	wg      sync.WaitGroup     // goroutines closing failed connections
}

// Listen listens for RC connections on addr of vctx (the context's
// address or an unspecified one; port 0 picks one) and accepts every
// request that opts.Param does not refuse.
func Listen(vctx *verbs.Context, addr netip.AddrPort, opts *ListenOptions) (*Listener, error) {
	l := &Listener{gone: make(chan struct{}), loop: make(chan struct{}), waiting: map[*Conn]struct{}{}}
	if opts != nil {
		l.opts = *opts
	}
	if l.opts.Backlog <= 0 {
		l.opts.Backlog = 128
	}
	l.ready = make(chan *Conn, l.opts.Backlog)
	ch, err := CreateEventChannel(&ChannelOptions{PSK: l.opts.PSK})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: listen %v: %w", addr, err)
	}
	id, err := ch.CreateID(vctx, PSTCP)
	if err == nil {
		if err = id.Bind(addr); err == nil {
			if err = id.SetLimits(l.opts.Limits); err == nil {
				err = id.Listen(l.opts.Backlog)
			}
		}
		if err != nil {
			id.Destroy()
		}
	}
	if err != nil {
		ch.Destroy()
		return nil, fmt.Errorf("rdmacm: listen %v: %w", addr, err)
	}
	l.ch, l.id = ch, id
	go l.run()
	return l, nil
}

// Addr returns the bound address and port.
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// ID returns the listening rdma_cm ID; its events belong to the Listener.
func (l *Listener) ID() *ID { return l.id }

func (l *Listener) run() {
	defer close(l.loop)
	for {
		ev, err := l.ch.GetEvent(context.Background())
		if err != nil {
			return
		}
		switch ev.Type {
		case EventConnectRequest:
			l.request(ev)
		case EventDeviceRemoval:
			if ev.ID == l.id {
				l.fail(ErrDeviceRemoved)
			}
		}
	}
}

func (l *Listener) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
		close(l.gone)
	}
}

// request answers one CONNECT_REQUEST: the child ID moves to a channel of
// its own, gets a QP and is accepted; its watcher hands it to Accept when
// ESTABLISHED.
func (l *Listener) request(ev *Event) {
	child := ev.ID
	param := (*ConnParam)(nil)
	if l.opts.Param != nil {
		p, err := l.opts.Param(ev)
		if err != nil {
			var rej *RejectError
			var pd []byte
			if errors.As(err, &rej) {
				pd = rej.PrivateData
			}
			child.Reject(pd)
			child.Destroy()
			return
		}
		param = p
	}
	ch, _ := CreateEventChannel(nil)
	if err := child.Migrate(ch); err != nil {
		child.Destroy()
		ch.Destroy()
		return
	}
	c, err := newConn(ch, child, &l.opts.EndpointOptions)
	if err != nil {
		child.Reject(nil)
		child.Destroy()
		ch.Destroy()
		return
	}
	c.local, c.remote, c.param = child.LocalAddr(), child.RemoteAddr(), ev.Param
	c.onEst = l.deliver
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.release()
		return
	}
	l.waiting[c] = struct{}{}
	l.mu.Unlock()
	c.setWatching()
	go c.watch()
	if err := child.Accept(param); err != nil {
		l.drop(c)
		return
	}
	// A connection that fails before ESTABLISHED is dropped.
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		select {
		case <-c.established:
		case <-c.done:
			select {
			case <-c.established:
			default:
				l.drop(c)
			}
		}
	}()
}

// deliver queues an established connection for Accept, or drops it when
// the queue is full.
func (l *Listener) deliver(c *Conn) {
	select {
	case l.ready <- c:
	default:
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.drop(c)
		}()
	}
}

// drop closes a connection nobody accepted.
func (l *Listener) drop(c *Conn) {
	l.mu.Lock()
	_, mine := l.waiting[c]
	delete(l.waiting, c)
	l.mu.Unlock()
	if mine {
		c.Close()
	}
}

// Accept waits for the next established connection. It returns an error
// wrapping ctx.Err() when ctx ends first, ErrClosed after Close, and
// ErrDeviceRemoved when the verbs.Context was closed.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	for {
		select {
		case c := <-l.ready:
			l.mu.Lock()
			_, mine := l.waiting[c]
			delete(l.waiting, c)
			l.mu.Unlock()
			if mine {
				return c, nil
			}
		case <-l.gone:
			return nil, fmt.Errorf("rdmacm: accept on %v: %w", l.Addr(), l.err)
		case <-ctx.Done():
			return nil, fmt.Errorf("rdmacm: accept on %v: %w", l.Addr(), ctx.Err())
		}
	}
}

// Close stops listening: requests get REJ 8 from then on, connections not
// yet returned by Accept are closed, and pending Accepts return
// ErrClosed. Connections already accepted are not touched.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.id.Destroy()
	l.ch.Destroy()
	<-l.loop
	l.fail(ErrClosed)
	l.mu.Lock()
	var left []*Conn
	for c := range l.waiting {
		left = append(left, c)
	}
	clear(l.waiting)
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range left {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
	l.wg.Wait()
	return nil
}
