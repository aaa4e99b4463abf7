package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// IdealBatchSize is the batch size of the Linux UDP endpoint: the number of
// messages a ReadBatch or WriteBatch call handles well.
const IdealBatchSize = 128

// DefaultSocketBuffer is the socket receive and send buffer size Open asks
// for when Options leaves it 0. Linux caps the request at
// net.core.rmem_max / wmem_max unless the process has CAP_NET_ADMIN.
const DefaultSocketBuffer = 4 << 20

// DefaultMaxPacketSize is the largest UDP payload the endpoint receives
// when Options leaves MaxPacketSize 0: enough for a 4096-byte IB MTU and
// for 9000-byte jumbo frames. Larger datagrams are dropped and counted as
// wire.ReasonPayload.
const DefaultMaxPacketSize = 9216

// maxUDPPayload is the largest UDP payload that fits an IPv4 datagram.
const maxUDPPayload = 0xffff - 20 - 8

// Options configures Open. The zero value (or nil) is a plain endpoint on
// port 4791 with every offload the kernel offers and ICRC checking on.
type Options struct {
	// Port, when not 0, is the UDP port to bind (laddr's port must then be 0
	// or equal). With both 0 the port is wire.UDPPort (4791). Stock rdma_rxe
	// peers always send to 4791; other ports only work between tbrdma
	// peers.
	Port uint16
	// Interface, when set, binds the socket to that network interface
	// (SO_BINDTODEVICE on Linux, IP_BOUND_IF / IPV6_BOUND_IF on macOS).
	Interface string
	// DisableGSO and DisableGRO turn off UDP generic segmentation offload
	// on send and generic receive offload on receive (Linux only; other
	// systems never use them).
	DisableGSO, DisableGRO bool
	// NoNetpoll (Linux) opens the socket outside the Go runtime's network
	// poller: a reader waits in poll(2) only while it waits, and a datagram
	// that arrives while another thread reads the socket itself (an
	// InlineReader) wakes no one. Package net's sockets are in the poller's
	// epoll set, so each datagram wakes the thread in epoll_wait, two
	// context switches per packet on a program's core. Elsewhere it is
	// ignored.
	NoNetpoll bool
	// SkipICRCCheck accepts received packets without verifying their ICRC.
	// Message.IPID is then 0.
	SkipICRCCheck bool
	// ReadBuffer and WriteBuffer are the socket buffer sizes in bytes: 0
	// means DefaultSocketBuffer, a negative value keeps the system default.
	ReadBuffer, WriteBuffer int
	// MaxPacketSize is the largest UDP payload accepted without GRO;
	// 0 means DefaultMaxPacketSize. The receive buffers (allocated by Open)
	// are sized from it.
	MaxPacketSize int
	// OnUnreachable, when set, receives the ICMP "destination unreachable"
	// messages that answer datagrams the endpoint sends (Linux, where it
	// turns on IP_RECVERR; elsewhere an unconnected socket learns nothing
	// of them and it is never called). It is called on the goroutine that
	// is reading or writing, inside the system call's callback: it must
	// return at once and must not call the Conn. The error it gets is its
	// own to keep.
	OnUnreachable func(*UnreachableError)
	// Logger receives the few events worth reporting (an offload falling
	// back). Nil means silent.
	Logger *slog.Logger

	// forcePortable selects the portable one-datagram-per-call path on
	// Linux too (tests only).
	forcePortable bool
}

// Offloads reports which kernel offloads a UDP endpoint uses. When one is
// off, its error (an *OffloadError) says why; it matches ErrNotSupported
// unless an option turned the offload off.
type Offloads struct {
	GSO, GRO           bool
	GSOError, GROError error
}

// OffloadsOf returns the offloads of c if c is (or wraps, through an
// Unwrap() Conn method) a UDP endpoint returned by Open: whether the GSO
// and GRO that Options leaves on are in use, and if not, why.
func OffloadsOf(c Conn) (Offloads, bool) {
	if v, ok := endpointAs[interface{ Offloads() Offloads }](c); ok {
		return v.Offloads(), true
	}
	return Offloads{}, false
}

// endpointAs returns c, or the first Conn that c wraps (through Unwrap()
// Conn methods), that implements T.
func endpointAs[T any](c Conn) (T, bool) {
	for c != nil {
		if v, ok := c.(T); ok {
			return v, true
		}
		u, ok := c.(interface{ Unwrap() Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	var zero T
	return zero, false
}

// udpConn is the UDP endpoint. The platform files (batch_linux.go,
// batch_default.go) supply initSys, readBatch and writeBatch and the sys
// field's type; portable.go the one-datagram-per-call path; everything else
// is here.
type udpConn struct {
	pc     *net.UDPConn // nil with Options.NoNetpoll
	rc     syscall.RawConn
	sock   sockCloser     // pc, or the socket rc is
	laddr  netip.AddrPort // unmapped; the source of every packet sent
	is6    bool
	verify bool
	maxPkt int
	log    *slog.Logger
	closed atomic.Bool
	// onUnreach is Options.OnUnreachable.
	onUnreach func(*UnreachableError)

	offMu    sync.Mutex
	offloads Offloads

	ctr  counters
	sys  sysConn
	flat []byte // the portable path's send buffer for messages with a Payload
	// icrc is the ICRC's share for the last destination written to; like
	// flat it belongs to the goroutine in WriteBatch.
	icrc     wire.ICRCPath
	portable *portableState // the portable path's state, if it is in use
}

var _ Conn = (*udpConn)(nil)

// sockCloser is what the endpoint needs of its socket beyond RawConn.
type sockCloser interface {
	Close() error
	SetReadDeadline(time.Time) error
}

// rawSocket is a socket that is its own RawConn (Options.NoNetpoll).
type rawSocket interface {
	syscall.RawConn
	sockCloser
}

// counters are the endpoint's statistics, updated once per batch.
type counters struct {
	packetsIn, packetsOut atomic.Uint64
	bytesIn, bytesOut     atomic.Uint64
	readCalls, writeCalls atomic.Uint64
	kwaits, kwaitSlices   atomic.Uint64
	drops                 [wire.NumReasons]atomic.Uint64
}

// tally accumulates one batch's receive counts before they are published.
type tally struct {
	pkts, bytes uint64
	drops       [wire.NumReasons]uint64
}

func (c *counters) addIn(t *tally) {
	if t.pkts != 0 {
		c.packetsIn.Add(t.pkts)
		c.bytesIn.Add(t.bytes)
	}
	for i, d := range t.drops {
		if d != 0 {
			c.drops[i].Add(d)
		}
	}
	*t = tally{}
}

// Open binds a UDP endpoint to laddr, which must be a specific IPv4 or IPv6
// address of this host (an interface address, not 0.0.0.0 or ::). Port 0
// means wire.UDPPort. opts may be nil.
//
// On Linux the socket is unconnected with IP_PMTUDISC_DO, so the kernel
// sends every datagram with DF set and IPv4 identification 0 (segment k of
// a GSO send gets k) — the values the ICRC covers. When the address and
// port are taken the error is a *PortInUseError (errors.Is ErrPortInUse).
func Open(laddr netip.AddrPort, opts *Options) (Conn, error) {
	if opts == nil {
		opts = &Options{}
	}
	a := laddr.Addr()
	if !a.IsValid() {
		return nil, errors.New("transport: no local address: pass the address of a network interface (for example the Thunderbolt link's IPv4 address)")
	}
	a = a.Unmap()
	if a.IsUnspecified() || a.IsMulticast() {
		return nil, fmt.Errorf("transport: local address %v is not a unicast interface address: pass the address of a network interface (RoCE needs a specific source address, which the ICRC covers)", a)
	}
	port := laddr.Port()
	switch {
	case opts.Port != 0 && port != 0 && port != opts.Port:
		return nil, fmt.Errorf("transport: local port %d conflicts with Options.Port %d", port, opts.Port)
	case opts.Port != 0:
		port = opts.Port
	case port == 0:
		port = wire.UDPPort
	}
	ap := netip.AddrPortFrom(a, port)
	maxPkt := opts.MaxPacketSize
	if maxPkt <= 0 {
		maxPkt = DefaultMaxPacketSize
	}
	maxPkt = min(max(maxPkt, wire.BTHSize+wire.ICRCSize), maxUDPPayload)

	is6 := a.Is6()
	network := "udp4"
	if is6 {
		network = "udp6"
	}
	ifindex := 0
	if opts.Interface != "" {
		ifi, err := net.InterfaceByName(opts.Interface)
		if err != nil {
			return nil, fmt.Errorf("transport: interface %q: %w", opts.Interface, err)
		}
		ifindex = ifi.Index
	}
	var c *udpConn
	if opts.NoNetpoll && !opts.forcePortable {
		rs, ok, err := openNoNetpoll(ap, is6, opts, ifindex, bufSize(opts.ReadBuffer), bufSize(opts.WriteBuffer))
		switch {
		case err != nil:
			return nil, bindError(ap, err)
		case ok:
			c = &udpConn{rc: rs, sock: rs}
		}
	}
	if c == nil {
		pc, rc, err := openNet(ap, network, is6, opts, ifindex)
		if err != nil {
			return nil, err
		}
		c = &udpConn{pc: pc, rc: rc, sock: pc}
	}
	c.laddr, c.is6, c.verify, c.maxPkt, c.log = ap, is6, !opts.SkipICRCCheck, maxPkt, opts.Logger
	c.onUnreach = opts.OnUnreachable
	if opts.forcePortable {
		c.portable = newPortableState(maxPkt)
		c.offloads = Offloads{
			GSOError: &OffloadError{Offload: "UDP GSO", Err: errDisabledByOption},
			GROError: &OffloadError{Offload: "UDP GRO", Err: errDisabledByOption},
		}
	} else if err := c.initSys(opts); err != nil {
		c.sock.Close()
		return nil, fmt.Errorf("transport: open %v: %w", ap, err)
	}
	if c.log != nil {
		off := c.Offloads()
		for _, e := range []error{off.GSOError, off.GROError} {
			if e == nil {
				continue
			}
			lvl := slog.LevelInfo
			if errors.Is(e, errDisabledByOption) {
				lvl = slog.LevelDebug
			}
			c.log.Log(context.Background(), lvl, "offload unavailable", "addr", ap, "err", e)
		}
	}
	return c, nil
}

// bindError says what went wrong opening a socket on ap: the port taken
// (a *PortInUseError), an address that is not this host's, or else.
func bindError(ap netip.AddrPort, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return &PortInUseError{Addr: ap, Err: err}
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("transport: %v is not an address of this host (pass the address of a local interface): %w", ap.Addr(), err)
	}
	return fmt.Errorf("transport: open %v: %w", ap, err)
}

// openNet opens the endpoint's socket through package net.
func openNet(ap netip.AddrPort, network string, is6 bool, opts *Options, ifindex int) (*net.UDPConn, syscall.RawConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = setupSocket(fd, is6, opts, ifindex) }); err != nil {
			return err
		}
		return serr
	}}
	pconn, err := lc.ListenPacket(context.Background(), network, ap.String())
	if err != nil {
		return nil, nil, bindError(ap, err)
	}
	pc := pconn.(*net.UDPConn)
	rc, err := pc.SyscallConn()
	if err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("transport: open %v: %w", ap, err)
	}
	if err := setBuffers(pc, rc, bufSize(opts.ReadBuffer), bufSize(opts.WriteBuffer)); err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("transport: open %v: socket buffers: %w", ap, err)
	}
	return pc, rc, nil
}

func bufSize(n int) int {
	if n == 0 {
		return DefaultSocketBuffer
	}
	return n
}

// MaxPacketSize is the largest UDP payload the endpoint receives: any
// datagram when GRO is on (its receive slots hold 64 KiB), else the
// MaxPacketSize it was opened with.
func (c *udpConn) MaxPacketSize() int {
	if c.portable == nil && c.sys.groOn() {
		return maxUDPPayload
	}
	return c.maxPkt
}

// Offloads reports the offloads in use. GSO may be turned off after Open
// if the first GSO send fails (a device without checksum offload).
func (c *udpConn) Offloads() Offloads {
	c.offMu.Lock()
	defer c.offMu.Unlock()
	return c.offloads
}

func (c *udpConn) setOffloads(f func(*Offloads)) {
	c.offMu.Lock()
	f(&c.offloads)
	c.offMu.Unlock()
}

// accept checks one received packet and fills m. It counts a drop in t and
// returns false for a packet to drop. path is the reader's ICRC share for
// the last source it checked.
func (c *udpConn) accept(t *tally, path *wire.ICRCPath, pkt []byte, src netip.AddrPort, m *Message, idGuess uint16) bool {
	if len(pkt) < wire.BTHSize+wire.ICRCSize {
		t.drops[wire.ReasonShort]++
		return false
	}
	var id uint16
	if c.verify {
		var ok bool
		if !path.For(src, c.laddr) {
			path.Reset(src, c.laddr)
		}
		if id, ok = path.VerifyExpect(pkt, idGuess); !ok {
			t.drops[wire.ReasonICRC]++
			return false
		}
	}
	*m = Message{Buf: pkt, Addr: src, Local: c.laddr.Addr(), IPID: id}
	t.pkts++
	t.bytes += uint64(len(pkt))
	return true
}

func (c *udpConn) gathersPayload() {}

// msgLen is the length of the packet m carries (Buf and Payload).
func msgLen(m *Message) int { return len(m.Buf) + len(m.Payload) }

// tailLen is the length of the pad and trailer at the end of the Buf of a
// message with a Payload (0 when Buf cannot hold a BTH and a trailer).
func tailLen(m *Message) int {
	if len(m.Buf) < wire.BTHSize+wire.ICRCSize {
		return 0
	}
	return int(m.Buf[1]>>4&3) + wire.ICRCSize
}

// putICRC fills m's trailer for a datagram from the endpoint to dst with
// IPv4 identification id.
func (c *udpConn) putICRC(m *Message, dst netip.AddrPort, id uint16) {
	p := &c.icrc
	if !p.For(c.laddr, dst) {
		p.Reset(c.laddr, dst)
	}
	if m.Payload == nil {
		p.Put(m.Buf, id)
		return
	}
	t := len(m.Buf) - tailLen(m)
	p.PutParts(m.Buf[:t], m.Payload, m.Buf[t:], id)
}

// checkOut validates a message to send and returns its unmapped
// destination.
func (c *udpConn) checkOut(m *Message) (netip.AddrPort, error) {
	n := msgLen(m)
	if len(m.Buf) < wire.BTHSize+wire.ICRCSize || m.Payload != nil && len(m.Buf)-tailLen(m) < wire.BTHSize {
		return netip.AddrPort{}, fmt.Errorf("transport: send: %d-byte packet: %w", n, wire.ErrShortPacket)
	}
	if n > maxUDPPayload {
		return netip.AddrPort{}, fmt.Errorf("transport: send: %d-byte packet exceeds the %d-byte UDP limit", n, maxUDPPayload)
	}
	dst := netip.AddrPortFrom(m.Addr.Addr().Unmap(), m.Addr.Port())
	if !dst.IsValid() || dst.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("transport: send: invalid destination %v", m.Addr)
	}
	if dst.Addr().Is6() != c.is6 {
		return netip.AddrPort{}, fmt.Errorf("transport: send: destination %v is not of the local address family (%v)", m.Addr, c.laddr.Addr())
	}
	return dst, nil
}

// ReadBatch implements Conn.
func (c *udpConn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	var n int
	var err error
	if c.portable != nil {
		n, err = c.readPortable(c.portable, msgs)
	} else {
		n, err = c.readBatch(msgs)
	}
	if err != nil && c.closed.Load() && !errors.Is(err, net.ErrClosed) {
		err = fmt.Errorf("%w: %w", net.ErrClosed, err)
	}
	return n, err
}

// WriteBatch implements Conn. Each message's Buf gets its ICRC in place,
// computed for the IP header the kernel will write; Buf is not retained.
func (c *udpConn) WriteBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	if c.portable != nil {
		return c.writePortable(msgs)
	}
	return c.writeBatch(msgs)
}

// BatchSize implements Conn.
func (c *udpConn) BatchSize() int {
	if c.portable != nil {
		return 1
	}
	return defaultBatchSize
}

// LocalAddr implements Conn.
func (c *udpConn) LocalAddr() netip.AddrPort { return c.laddr }

// Stats implements Conn.
func (c *udpConn) Stats() Stats {
	s := Stats{
		PacketsIn:  c.ctr.packetsIn.Load(),
		PacketsOut: c.ctr.packetsOut.Load(),
		BytesIn:    c.ctr.bytesIn.Load(),
		BytesOut:   c.ctr.bytesOut.Load(),
		ReadCalls:  c.ctr.readCalls.Load(),
		WriteCalls: c.ctr.writeCalls.Load(),

		KernelWaits:      c.ctr.kwaits.Load(),
		KernelWaitSlices: c.ctr.kwaitSlices.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = c.ctr.drops[i].Load()
	}
	return s
}

// Close closes the socket and unblocks a pending ReadBatch. Closing twice
// is not an error.
func (c *udpConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.sock.Close()
}

// setBuffersPortable sets the socket buffer sizes through net.UDPConn (a
// size < 0 keeps the default).
func setBuffersPortable(pc *net.UDPConn, rb, wb int) error {
	if rb > 0 {
		if err := pc.SetReadBuffer(rb); err != nil {
			return err
		}
	}
	if wb > 0 {
		return pc.SetWriteBuffer(wb)
	}
	return nil
}

var errNoInlineRead = errors.New("transport: inline reads need the Linux batched path")

// InlineReader returns the endpoint's inline reader, with which a caller
// takes over the receive path for a while (package verbs' inline receive,
// through internal/hooks.InlineReaderOf): TryReadBatch is ReadBatch
// without waiting (0 when nothing is queued; like ReadBatch it must not run
// concurrently with another read), and SetReadDeadline makes ReadBatch
// calls, a blocked one included, return an error matching
// os.ErrDeadlineExceeded once t has passed (TryReadBatch ignores it). Only
// the Linux batched path has one.
func (c *udpConn) InlineReader() (r interface {
	TryReadBatch([]Message) (int, error)
	SetReadDeadline(time.Time) error
}, ok bool) {
	if c.portable != nil || runtime.GOOS != "linux" {
		return nil, false
	}
	return inlineReader{c}, true
}

type inlineReader struct{ c *udpConn }

func (r inlineReader) TryReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	return r.c.tryReadBatch(msgs)
}

func (r inlineReader) SetReadDeadline(t time.Time) error {
	// A reader spinning inside its receive call (busy poll, kernel wait)
	// would not see the deadline until its window closed.
	r.c.kick(!t.IsZero() && !t.After(time.Now()))
	return r.c.sock.SetReadDeadline(t)
}
