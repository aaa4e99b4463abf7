package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/verbs"
)

// Network is the network name of the package's addresses.
const Network = "rdma"

// Addr is the address of a stream endpoint: the IP address of its RDMA
// device and its rdma_cm port (RDMA_PS_TCP). Its Network is "rdma".
type Addr struct{ AddrPort netip.AddrPort }

// Network returns "rdma".
func (Addr) Network() string { return Network }

func (a Addr) String() string { return a.AddrPort.String() }

// defaultTimeout bounds each step of a connection's setup when the
// caller's context has no deadline.
const defaultTimeout = 10 * time.Second

// device is a verbs context the package opened on an address, shared by
// the Dialers and Listeners that use that address (a context owns UDP
// port 4791 of its address).
type device struct {
	addr netip.Addr
	vctx *verbs.Context
	refs int
}

var devices struct {
	sync.Mutex
	m map[netip.Addr]*device
}

func openDevice(a netip.Addr) (*device, error) {
	devices.Lock()
	defer devices.Unlock()
	if d := devices.m[a]; d != nil {
		d.refs++
		return d, nil
	}
	// Large segments enabled, for connections that agree on them
	// (SegmentSize); the others stay standard.
	vctx, err := verbs.NewContext(&verbs.Options{Addr: a, MaxSegmentSize: verbs.SegmentSizeLimit})
	if err != nil {
		return nil, fmt.Errorf("open an RDMA device on %v: %w (is rdma_rxe or another program using UDP port 4791 there? pass a Device instead)", a, err)
	}
	if devices.m == nil {
		devices.m = map[netip.Addr]*device{}
	}
	d := &device{addr: a, vctx: vctx, refs: 1}
	devices.m[a] = d
	return d, nil
}

func (d *device) release() {
	devices.Lock()
	defer devices.Unlock()
	if d.refs--; d.refs == 0 {
		delete(devices.m, d.addr)
		d.vctx.Close()
	}
}

// ringSize checks and defaults a ring's geometry.
func ringSize(slots, size int) (int, int, error) {
	if slots == 0 {
		slots = DefaultSlots
	}
	if size == 0 {
		size = DefaultSlotSize
	}
	if slots < 1 || slots > MaxSlots || size < 1 || size > MaxSlotSize {
		return 0, 0, fmt.Errorf("stream: a ring of %d slots of %d bytes: want 1..%d slots of 1..%d bytes", slots, size, MaxSlots, MaxSlotSize)
	}
	return slots, size, nil
}

// A Dialer holds the options of Dial. The zero value is usable.
type Dialer struct {
	// Device is the RDMA device to dial from. Nil: the package opens one
	// on LocalAddr (shared with the package's other Dialers and
	// Listeners on that address) and closes it with its last connection.
	Device *verbs.Context
	// LocalAddr is the local IP address when Device is nil; the zero
	// value takes the kernel's source address for the peer.
	LocalAddr netip.Addr
	// PSK is the pre-shared key that authenticates the connection setup
	// (rdmacm.ChannelOptions.PSK); nil: Device's, if any.
	PSK []byte
	// Slots and SlotSize are the receive ring this end advertises: the
	// peer has at most Slots chunks of at most SlotSize bytes in flight
	// to it. Zero: DefaultSlots, DefaultSlotSize.
	Slots, SlotSize int
	// Timeout bounds each step of the setup when the context has no
	// deadline; zero: 10 s.
	Timeout time.Duration
	// SegmentSize is tbrdma's large-segment extension
	// (rdmacm.ConnParam.SegmentSize: packets of up to that many payload
	// bytes, a multiple of 4096 from verbs.MinSegmentSize to
	// verbs.SegmentSizeLimit, instead of one MTU). The link's MTU must
	// carry such packets (verbs.SegmentSizeForLink): loopback or
	// Thunderbolt, not a 1500-byte Ethernet. It cannot go with a PSK (the
	// REQ has no room for both). The connection is standard when the
	// peer does not agree. Zero: the largest the link carries when the
	// Dialer opens its own device and has no PSK (a stream's peer is
	// always tbrdma), else none; NoSegments: never.
	SegmentSize int

	tbs1 bool // tests: dial as a dialer from before "tbs2" does
}

// Dial connects to address ("host:port", the rdma_cm port a Listener
// listens on) with the zero Dialer.
func Dial(ctx context.Context, address string) (*Conn, error) {
	var d Dialer
	return d.Dial(ctx, address)
}

// DialContext is Dial as a net.Dialer's DialContext, for
// http.Transport and the like: network must be "rdma" or, so that such
// callers can use it unchanged, "tcp" or "tcp4".
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case Network, "tcp", "tcp4":
	default:
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	c, err := d.Dial(ctx, address)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// resolve turns "host:port" into an IPv4 address and port.
func resolve(ctx context.Context, address string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(address); err == nil {
		return ap, nil
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: want 0..65535", port)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("no IPv4 address for %q", host)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(p)), nil
}

// sourceFor returns the kernel's source address for peer.
func sourceFor(peer netip.Addr) (netip.Addr, error) {
	u, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, 4791)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer u.Close()
	return u.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// Dial connects to address ("host:port"). ctx bounds the setup; once
// connected, it has no effect on the connection.
func (d *Dialer) Dial(ctx context.Context, address string) (*Conn, error) {
	c, err := d.dial(ctx, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: Network, Err: err}
	}
	return c, nil
}

func (d *Dialer) dial(ctx context.Context, address string) (_ *Conn, err error) {
	slots, size, err := ringSize(d.Slots, d.SlotSize)
	if err != nil {
		return nil, err
	}
	if d.SegmentSize != 0 && d.SegmentSize != NoSegments && (!verbs.ValidSegmentSize(d.SegmentSize) || d.PSK != nil) {
		return nil, fmt.Errorf("stream: segment size %d: want a multiple of 4096 from %d to %d, and no PSK", d.SegmentSize, verbs.MinSegmentSize, verbs.SegmentSizeLimit)
	}
	peer, err := resolve(ctx, address)
	if err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", address, err)
	}
	vctx := d.Device
	var dev *device
	if vctx == nil {
		local := d.LocalAddr
		if !local.IsValid() {
			if local, err = sourceFor(peer.Addr()); err != nil {
				return nil, fmt.Errorf("stream: dial %s: no route: %w", address, err)
			}
		}
		if dev, err = openDevice(local); err != nil {
			return nil, fmt.Errorf("stream: dial %s: %w", address, err)
		}
		defer func() {
			if err != nil {
				dev.release()
			}
		}()
		vctx = dev.vctx
	}
	seg := d.SegmentSize
	switch {
	case seg == NoSegments:
		seg = 0
	case seg == 0 && d.Device == nil && d.PSK == nil:
		seg = autoSegment(vctx)
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(dl), time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(ctx, 4*timeout)
	defer cancel()
	ech, err := rdmacm.CreateEventChannel(&rdmacm.ChannelOptions{PSK: d.PSK})
	if err != nil {
		return nil, err
	}
	id, err := ech.CreateID(vctx, rdmacm.PSTCP)
	if err != nil {
		ech.Destroy()
		return nil, err
	}
	var c *Conn
	defer func() {
		if err != nil {
			if c != nil {
				c.freeVerbs()
			}
			id.Destroy()
			ech.Destroy()
		}
	}()
	where := peer.String()
	next := func(want rdmacm.EventType) (*rdmacm.Event, error) {
		ev, err := ech.GetEvent(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
				return nil, fmt.Errorf("stream: dial %s: no answer within %v: %w", where, timeout, err)
			}
			return nil, fmt.Errorf("stream: dial %s: %w", where, err)
		}
		if ev.Type == want {
			return ev, nil
		}
		var rej *rdmacm.RejectError
		switch {
		case errors.As(ev.Err, &rej) && rej.Reason == rdmacm.RejectInvalidServiceID:
			return nil, fmt.Errorf("stream: dial %s: nothing listens there (%w)", where, ev.Err)
		case ev.Type == rdmacm.EventRejected && bytes.HasPrefix(ev.PrivateData(), []byte(rejNotDialer)):
			return nil, fmt.Errorf("stream: dial %s: rejected %q: the listener does not speak stream protocol %s (a tbrdma from before it speaks only %s): run the same tbrdma version on both ends: %w",
				where, rejNotDialer, magicV2, magicV1, ev.Err)
		case ev.Type == rdmacm.EventRejected:
			msg := ""
			if pd := bytes.TrimRight(ev.PrivateData(), "\x00"); len(pd) > 0 && len(pd) < 100 {
				msg = fmt.Sprintf(" %q", pd)
			}
			return nil, fmt.Errorf("stream: dial %s: rejected%s: %w", where, msg, ev.Err)
		case errors.As(ev.Err, new(*transport.UnreachableError)):
			return nil, fmt.Errorf("stream: dial %s: %w", where, ev.Err) // an ICMP error: it says who answered what
		case ev.Type == rdmacm.EventUnreachable:
			return nil, fmt.Errorf("stream: dial %s: unreachable: no answer to the connection request (is a tbrdma stream listener there, on UDP port 4791?): %w", where, ev.Err)
		case ev.Err != nil:
			return nil, fmt.Errorf("stream: dial %s: %v: %w", where, ev.Type, ev.Err)
		}
		return nil, fmt.Errorf("stream: dial %s: %v, want %v", where, ev.Type, want)
	}
	if err = id.ResolveAddr(peer.String(), timeout); err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", where, err)
	}
	if _, err = next(rdmacm.EventAddrResolved); err != nil {
		return nil, err
	}
	if err = id.ResolveRoute(timeout); err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", where, err)
	}
	if _, err = next(rdmacm.EventRouteResolved); err != nil {
		return nil, err
	}
	if c, err = newConn(id, ech, slots, size); err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", where, err)
	}
	// We offer "tbs2", so selective retransmission goes on now, before
	// Connect: rdmacm moves the QP to RTS and sends the RTU before our
	// ESTABLISHED, and the listener may write as soon as the RTU reaches it.
	c.mine.sr = !d.tbs1
	if c.mine.sr {
		if err = c.setSR(true); err != nil {
			return nil, fmt.Errorf("stream: dial %s: %w", where, err)
		}
	}
	if err = id.Connect(&rdmacm.ConnParam{PrivateData: c.mine.marshal(), RetryCount: 7, RNRRetryCount: 7,
		SegmentSize: seg}); err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", where, err)
	}
	ev, err := next(rdmacm.EventEstablished)
	if err != nil {
		return nil, err
	}
	ring, err := parseRingInfo(ev.PrivateData())
	if err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", where, err)
	}
	switch {
	case ring.sr && !c.mine.sr:
		return nil, fmt.Errorf("stream: dial %s: the listener answered %s to a %s request (a broken peer)", where, magicV2, magicV1)
	case !ring.sr && c.sr:
		// A listener that declined: off again. Until now that can only
		// have held packets, dropped here and sent again by the
		// listener's go-back-N: a tbrdma requester without the extension
		// reads a gap NAK as a plain sequence NAK.
		if err = c.setSR(false); err != nil {
			return nil, fmt.Errorf("stream: dial %s: %w", where, err)
		}
	}
	if err = c.setPeer(ring); err != nil {
		return nil, fmt.Errorf("stream: dial %s: %w", where, err)
	}
	c.local, c.remote, c.dev = Addr{id.LocalAddr()}, Addr{id.RemoteAddr()}, dev
	c.start()
	return c, nil
}

// ListenConfig holds the options of Listen. The zero value is usable.
type ListenConfig struct {
	// Device is the RDMA device to listen on. Nil: the package opens one
	// on the address's host (shared as with Dialer.Device).
	Device *verbs.Context
	// PSK is the pre-shared key connections must present; nil: Device's,
	// if any.
	PSK []byte
	// Slots and SlotSize are the receive ring of each connection, as in
	// Dialer.
	Slots, SlotSize int
	// Backlog bounds the connections waiting for Accept (≤ 0: 16); more
	// are closed.
	Backlog int
	// Timeout bounds the wait from a connection request to the
	// established connection; zero: 10 s.
	Timeout time.Duration
	// SegmentSize is the largest large-segment size (see Dialer) to
	// accept when a dialer offers one. Zero: the largest the link carries
	// when the listener opens its own device and has no PSK, else none;
	// NoSegments: decline.
	SegmentSize int

	tbs1 bool // tests: listen as a listener from before "tbs2" does
}

// Listener accepts stream connections on one rdma_cm port. Its methods
// are safe for concurrent use.
type Listener struct {
	lc    ListenConfig
	dev   *device
	ech   *rdmacm.EventChannel
	id    *rdmacm.ID
	addr  Addr
	ready chan *Conn
	done  chan struct{} // closed by Close
	loop  chan struct{} // the event loop ended
	wg    sync.WaitGroup
	once  sync.Once
}

// Listen listens on address ("ip:port"; the IP is the device's and may
// not be unspecified unless ListenConfig.Device is set; port 0 picks
// one) with the zero ListenConfig.
func Listen(address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), address)
}

// Listen listens on address. ctx is only for the setup.
func (lc *ListenConfig) Listen(ctx context.Context, address string) (*Listener, error) {
	l, err := lc.listen(ctx, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: Network, Err: err}
	}
	return l, nil
}

func (lc *ListenConfig) listen(ctx context.Context, address string) (_ *Listener, err error) {
	l := &Listener{lc: *lc, done: make(chan struct{}), loop: make(chan struct{})}
	if l.lc.Slots, l.lc.SlotSize, err = ringSize(lc.Slots, lc.SlotSize); err != nil {
		return nil, err
	}
	if lc.SegmentSize != 0 && lc.SegmentSize != NoSegments && !verbs.ValidSegmentSize(lc.SegmentSize) {
		return nil, fmt.Errorf("stream: segment size %d: want a multiple of 4096 from %d to %d", lc.SegmentSize, verbs.MinSegmentSize, verbs.SegmentSizeLimit)
	}
	if l.lc.Backlog <= 0 {
		l.lc.Backlog = 16
	}
	if l.lc.Timeout <= 0 {
		l.lc.Timeout = defaultTimeout
	}
	ap, err := resolve(ctx, address)
	if err != nil {
		return nil, fmt.Errorf("stream: listen %s: %w", address, err)
	}
	vctx := lc.Device
	if vctx == nil {
		if ap.Addr().IsUnspecified() {
			return nil, fmt.Errorf("stream: listen %s: give the IP address of the device to listen on (or ListenConfig.Device)", address)
		}
		if l.dev, err = openDevice(ap.Addr()); err != nil {
			return nil, fmt.Errorf("stream: listen %s: %w", address, err)
		}
		defer func() {
			if err != nil {
				l.dev.release()
			}
		}()
		vctx = l.dev.vctx
	}
	switch {
	case l.lc.SegmentSize == NoSegments:
		l.lc.SegmentSize = 0
	case l.lc.SegmentSize == 0 && lc.Device == nil && lc.PSK == nil:
		l.lc.SegmentSize = autoSegment(vctx)
	}
	if l.ech, err = rdmacm.CreateEventChannel(&rdmacm.ChannelOptions{PSK: lc.PSK}); err != nil {
		return nil, fmt.Errorf("stream: listen %s: %w", address, err)
	}
	if l.id, err = l.ech.CreateID(vctx, rdmacm.PSTCP); err == nil {
		if err = l.id.Bind(ap); err == nil {
			err = l.id.Listen(l.lc.Backlog)
		}
		if err != nil {
			l.id.Destroy()
		}
	}
	if err != nil {
		l.ech.Destroy()
		return nil, fmt.Errorf("stream: listen %s: %w", address, err)
	}
	l.addr = Addr{l.id.LocalAddr()}
	l.ready = make(chan *Conn, l.lc.Backlog)
	go l.run()
	return l, nil
}

func (l *Listener) run() {
	defer close(l.loop)
	for {
		ev, err := l.ech.GetEvent(context.Background())
		if err != nil {
			return
		}
		if ev.Type != rdmacm.EventConnectRequest {
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.request(ev)
		}()
	}
}

// request answers a CONNECT_REQUEST: the child ID gets a channel, a QP,
// the ring, the REP; once ESTABLISHED the connection waits for Accept.
func (l *Listener) request(ev *rdmacm.Event) {
	child := ev.ID
	peer, err := parseRingInfo(ev.PrivateData())
	if err != nil || peer.sr && l.lc.tbs1 {
		child.Reject([]byte(rejNotDialer))
		child.Destroy()
		return
	}
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		child.Reject(nil)
		child.Destroy()
		return
	}
	if err := child.Migrate(ech); err != nil {
		child.Destroy()
		ech.Destroy()
		return
	}
	c, err := newConn(child, ech, l.lc.Slots, l.lc.SlotSize)
	if err == nil {
		err = c.setPeer(peer)
	}
	if err == nil && peer.sr {
		// "tbs2": answered in kind, and on before Accept lets the QP
		// receive. A "tbs1" dialer gets "tbs1" and no extension.
		c.mine.sr = true
		err = c.setSR(true)
	}
	if err == nil {
		err = child.Accept(&rdmacm.ConnParam{PrivateData: c.mine.marshal(), RNRRetryCount: 7, SegmentSize: l.lc.SegmentSize})
	}
	fail := func() {
		if c != nil {
			c.freeVerbs()
		}
		child.Destroy()
		ech.Destroy()
	}
	if err != nil {
		child.Reject(nil)
		fail()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.lc.Timeout)
	defer cancel()
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		ev, err := ech.GetEvent(ctx)
		if err != nil {
			fail()
			return
		}
		if ev.Type == rdmacm.EventEstablished {
			break
		}
		if ev.Type != rdmacm.EventTimewaitExit {
			fail()
			return
		}
	}
	c.local, c.remote = Addr{child.LocalAddr()}, Addr{child.RemoteAddr()}
	if l.dev != nil {
		l.dev.addRef()
		c.dev = l.dev
	}
	c.start()
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
	default:
		c.Close() // the backlog is full
	}
}

func (d *device) addRef() {
	devices.Lock()
	d.refs++
	devices.Unlock()
}

// Accept waits for the next connection; it implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptConn()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AcceptConn waits for the next connection. After Close it returns an
// error matching net.ErrClosed.
func (l *Listener) AcceptConn() (*Conn, error) {
	select {
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: Network, Addr: l.addr, Err: net.ErrClosed}
	default:
	}
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: Network, Addr: l.addr, Err: net.ErrClosed}
	}
}

// Addr returns the listening address (network "rdma").
func (l *Listener) Addr() net.Addr { return l.addr }

// Close stops listening and closes the connections not yet accepted;
// pending Accepts return an error matching net.ErrClosed. Accepted
// connections are not touched.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.id.Destroy()
		l.ech.Destroy()
		<-l.loop
		l.wg.Wait()
		for {
			select {
			case c := <-l.ready:
				c.Close()
				continue
			default:
			}
			break
		}
		if l.dev != nil {
			l.dev.release()
		}
	})
	return nil
}

var _ net.Listener = (*Listener)(nil)

// rejNotDialer is the private data of the REJ of a request that is not
// a stream dialer's in a version this listener speaks.
const rejNotDialer = "tbrdma stream: not a stream dialer"

// NoSegments as Dialer.SegmentSize or ListenConfig.SegmentSize keeps a
// connection at the path MTU.
const NoSegments = -1

// autoSegment is the segment size a stream end that opened its own device
// offers or accepts by default: the largest its link carries (0 on a link
// too small for large segments). Measured on the veth pair, large segments
// made io.Copy over a stream 1.85x TCP's rate, against 1.12x at the path
// MTU (docs/performance.md).
func autoSegment(vctx *verbs.Context) int {
	if d := vctx.Device(); d != nil && d.LinkMTU > 0 {
		return verbs.SegmentSizeForLink(d.LinkMTU)
	}
	return verbs.SegmentSizeForLink(linkMTU(vctx.LocalAddr().Addr()))
}

// linkMTU is the MTU of the interface whose network holds addr (0: none
// found).
func linkMTU(addr netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			// Contains, not equality: a loopback address such as
			// 127.80.1.2 is lo's through 127.0.0.1/8.
			if p, ok := a.(*net.IPNet); ok && p.Contains(addr.Unmap().AsSlice()) {
				return ifc.MTU
			}
		}
	}
	return 0
}
