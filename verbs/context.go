package verbs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs/internal/mem"
)

// Limits of a soft device (ibv_query_device).
const (
	MaxQP           = 4096
	MaxMR           = 65536
	MaxQPWR         = 16384
	MaxSGE          = 32
	MaxInlineData   = 256
	MaxCQE          = 1 << 20
	MaxRdAtomic     = 128
	MaxMessageSize  = 1 << 31
	MaxSRQWR        = 16384
	firstQPN        = 0x11
	defaultRingSize = 256
)

// Options configure a Context.
type Options struct {
	// Conn carries the context's packets. It defaults to a UDP endpoint on
	// Addr:4791.
	Conn transport.Conn
	// Addr is the local address for the default UDP endpoint.
	Addr netip.Addr
	// Interface, when set, binds the default UDP endpoint to that network
	// interface, so that only packets arriving on it are processed (a
	// packet for Addr that comes in on another interface is not seen).
	// Device.Open sets it to the device's netdev unless AnyInterface is set.
	Interface string
	// AnyInterface makes Device.Open leave the endpoint unbound from the
	// device's interface: packets for the device's address are processed
	// whichever interface they arrive on, and packets leave along the
	// kernel's route for their destination. That is what a host in the
	// middle of a routed chain of links needs when a peer picks the
	// "wrong" one of its addresses (rdma_rxe, like the default, accepts a
	// packet only on the address's own link and sends only out of it).
	AnyInterface bool
	// NoNetpoll opens the default UDP endpoint outside the Go runtime's
	// network poller (transport.Options.NoNetpoll, Linux): for a process
	// whose own threads read the socket while they spin (SetInlineReceive),
	// so that arriving datagrams wake no poller thread.
	NoNetpoll bool
	// ActiveMTU is the port's active IB MTU; it defaults to 4096.
	ActiveMTU MTU
	// MaxSegmentSize, when not 0, enables the large-segment extension (see
	// SetMaxSegmentSize) and sizes the default UDP endpoint's receive
	// buffers for such packets. 0 keeps the context standard.
	MaxSegmentSize int
	// Logger receives debug and error messages; nil means silent.
	Logger *slog.Logger
	// WrapConn, when set, wraps the default UDP endpoint once it is open
	// (for example with transporttest.Faulty, the CLI's --fault); the
	// context then uses what it returns. It is not applied to Conn.
	WrapConn func(transport.Conn) transport.Conn
}

// Context is an open soft RDMA device (struct ibv_context): it owns the
// transport endpoint, the memory region table and every QP, CQ and SRQ
// created on it. Its methods are safe for concurrent use.
type Context struct {
	conn      transport.Conn
	local     netip.AddrPort
	gid       GID
	activeMTU MTU
	log       *slog.Logger
	mrs       *mem.Table

	mu      sync.RWMutex
	qps     map[QPN]*QP
	nextQPN QPN
	nextPD  uint32
	closed  bool

	outMu sync.Mutex
	out   []transport.Message
	// pending is set while out holds packets or a flush sends them: set
	// under outMu when out turns non-empty, cleared under it by the flush
	// that finds out empty. A flush with nothing to send, as a busy poll
	// makes one per round, reads it and returns without locking anything
	// (its three lock pairs were 18 % of BenchmarkEngineReadRoundTrip64B);
	// one that finds another flush sending still waits for it, so that
	// what its caller queued has left when it returns.
	pending atomic.Bool
	flushMu sync.Mutex
	spare   []transport.Message
	bufMu   sync.Mutex
	free    [][]byte     // packet buffers of maxPacket bytes ready for reuse
	freeBig [][]byte     // packet buffers of bufCap bytes (large segments) ready for reuse
	bufCap  atomic.Int64 // capacity of packet buffers: maxPacket, more with large segments
	maxSeg  atomic.Int32 // largest QP segment size allowed; 0 = extension off
	// spinners counts goroutines spinning on this context's results
	// (hooks.Engine.Spinning).
	spinners atomic.Int32
	// busyHold is the endpoint that Spinning holds busy-polling (nil:
	// none), found once (hooks.BusyHolderOf).
	busyHold hooks.BusyHolder
	// woke is set by a CQ that wakes a completion-channel waiter (CQ.push):
	// the receive loop then lets that goroutine run before its own flush
	// and next receive call (see recvLoop).
	woke atomic.Bool
	// gathers: the endpoint sends Message.Payload from where it lies, so
	// payloads of at least zeroCopyMin bytes are not copied into packets.
	gathers bool
	// in is the inline receive state (inline.go).
	in inlineState

	gsi      *gsi
	unreach  *unreachableSink // ICMP errors from the default endpoint (hooks.Engine.OnUnreachable)
	async    chan AsyncEvent
	done     chan struct{}
	loopDone chan struct{}

	ctr counters

	// dev is the device the context was opened on by Device.Open (set once,
	// before Open returns); nil for contexts made by NewContext. See
	// device.go.
	dev *Device
}

// maxPacket is the largest packet a context builds: headers, a 4096-byte
// payload, pad and ICRC.
const maxPacket = wire.MaxHeaderRoom + 4096 + 8

// NewContext opens a context on opts.Conn, or on a UDP endpoint at
// opts.Addr:4791.
func NewContext(opts *Options) (*Context, error) {
	if opts == nil {
		opts = &Options{}
	}
	conn := opts.Conn
	sink := new(unreachableSink)
	if conn == nil {
		if !opts.Addr.IsValid() {
			return nil, errors.New("verbs: no transport: set Options.Conn or Options.Addr to an interface address")
		}
		to := &transport.Options{Interface: opts.Interface, NoNetpoll: opts.NoNetpoll, OnUnreachable: sink.deliver}
		if opts.MaxSegmentSize > 0 {
			to.MaxPacketSize = opts.MaxSegmentSize + wire.MaxHeaderRoom + 3 + wire.ICRCSize
		}
		c, err := transport.Open(netip.AddrPortFrom(opts.Addr, wire.UDPPort), to)
		if err != nil {
			return nil, err
		}
		conn = c
		if opts.WrapConn != nil {
			conn = opts.WrapConn(c)
		}
	}
	mtu := opts.ActiveMTU
	if mtu == 0 {
		mtu = MTU4096
	}
	if !mtu.Valid() {
		return nil, fmt.Errorf("verbs: invalid active MTU %d", mtu)
	}
	local := conn.LocalAddr()
	c := &Context{
		conn:      conn,
		local:     local,
		gid:       wire.GIDFromAddr(local.Addr()),
		activeMTU: mtu,
		log:       opts.Logger,
		mrs:       mem.New(MaxMR),
		qps:       make(map[QPN]*QP),
		nextQPN:   firstQPN,
		unreach:   sink,
		async:     make(chan AsyncEvent, 64),
		done:      make(chan struct{}),
		loopDone:  make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(discardHandler{})
	}
	c.bufCap.Store(maxPacket)
	c.gathers = transport.PayloadCapable(conn)
	if opts.MaxSegmentSize != 0 {
		if err := c.SetMaxSegmentSize(opts.MaxSegmentSize); err != nil {
			if opts.Conn == nil {
				conn.Close()
			}
			return nil, err
		}
	}
	c.in.init(c.conn, max(c.conn.BatchSize(), 1))
	c.busyHold, _ = hooks.BusyHolderOf(c.conn)
	go c.recvLoop()
	return c, nil
}

type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }

// GID returns the context's GID (index 0 of its GID table).
func (c *Context) GID() GID { return c.gid }

// LocalAddr returns the UDP address the context receives on.
func (c *Context) LocalAddr() netip.AddrPort { return c.local }

// ActiveMTU returns the port's active MTU.
func (c *Context) ActiveMTU() MTU { return c.activeMTU }

// Close destroys every QP (flushing outstanding work), stops the receive
// loop and closes the transport. It is idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	qps := make([]*QP, 0, len(c.qps))
	for _, qp := range c.qps {
		qps = append(qps, qp)
	}
	c.mu.Unlock()
	for _, qp := range qps {
		qp.Close()
	}
	close(c.done)
	err := c.conn.Close()
	<-c.loopDone
	return err
}

// AsyncEvent is an asynchronous event (struct ibv_async_event).
type AsyncEvent struct {
	Type AsyncEventType
	QP   *QP
	SRQ  *SRQ
	CQ   *CQ
}

// AsyncEventType names an asynchronous event (enum ibv_event_type).
type AsyncEventType uint8

const (
	EventCQErr            AsyncEventType = 0
	EventQPFatal          AsyncEventType = 1
	EventQPReqErr         AsyncEventType = 2
	EventQPAccessErr      AsyncEventType = 3
	EventCommEst          AsyncEventType = 4
	EventSQDrained        AsyncEventType = 5
	EventSRQLimitReached  AsyncEventType = 13
	EventQPLastWQEReached AsyncEventType = 15
)

// GetAsyncEvent waits for the next asynchronous event.
func (c *Context) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	select {
	case ev := <-c.async:
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	case <-c.done:
		return AsyncEvent{}, ErrClosed
	}
}

func (c *Context) postAsync(ev AsyncEvent) {
	select {
	case c.async <- ev:
	default:
	}
}

// PD is a protection domain (struct ibv_pd).
type PD struct {
	ctx *Context
	id  uint32

	mu     sync.Mutex
	closed bool
	uses   [numPDUses]int // live objects created on the PD, by kind
}

// pdUse names a kind of object a PD counts.
type pdUse uint8

const (
	useMR pdUse = iota
	useQP
	useSRQ
	useAH
	numPDUses
)

var pdUseNames = [numPDUses]string{"MR", "QP", "SRQ", "AH"}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.nextPD++
	return &PD{ctx: c, id: c.nextPD}, nil
}

// Context returns the context the PD belongs to.
func (pd *PD) Context() *Context { return pd.ctx }

// Close deallocates the PD. It refuses with ErrBusy while MRs, QPs, SRQs
// or AHs created on it are alive: deregister and close them first.
// Closing a closed PD does nothing.
func (pd *PD) Close() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil
	}
	var live []string
	for k, n := range pd.uses {
		switch {
		case n == 1:
			live = append(live, "1 "+pdUseNames[k])
		case n > 1:
			live = append(live, fmt.Sprintf("%d %ss", n, pdUseNames[k]))
		}
	}
	if live != nil {
		return fmt.Errorf("verbs: close PD: %s still use it: close them first: %w", strings.Join(live, ", "), ErrBusy)
	}
	pd.closed = true
	return nil
}

// use counts an object of kind k that is created on (d = 1) or destroyed
// from (d = -1) the PD. Creating fails on a closed PD.
func (pd *PD) use(k pdUse, d int) error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if d > 0 && pd.closed {
		return fmt.Errorf("verbs: PD %w", ErrClosed)
	}
	pd.uses[k] += d
	return nil
}

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	pd     *PD
	region *mem.Region
	closed atomic.Bool
}

// RegMR registers buf for the given access rights. The MR's LKey names it
// in local scatter/gather lists and its RKey (equal to LKey) in remote
// requests from peers, at addresses Addr() .. Addr()+len(buf). The caller
// must not let buf be garbage collected or reused for anything else until
// Deregister returns. REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE,
// as in ibverbs.
func (pd *PD) RegMR(buf []byte, access AccessFlags) (*MR, error) {
	return pd.regMR(buf, mem.AddrOf(buf), access)
}

// RegMRAt is RegMR with the region answering at virtual address iova
// instead of buf's own address (ibv_reg_mr_iova2): SGEs and remote
// requests name its bytes from iova to iova+len(buf).
func (pd *PD) RegMRAt(buf []byte, iova uint64, access AccessFlags) (*MR, error) {
	if iova+uint64(len(buf)) < iova {
		return nil, fmt.Errorf("verbs: register MR: iova %#x + %d bytes wraps around: %w", iova, len(buf), ErrInvalidArgument)
	}
	return pd.regMR(buf, iova, access)
}

func (pd *PD) regMR(buf []byte, va uint64, access AccessFlags) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("verbs: register MR: empty buffer: %w", ErrInvalidArgument)
	}
	if access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		return nil, fmt.Errorf("verbs: register MR: unknown access flags %#x: %w", uint32(access), ErrInvalidArgument)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("verbs: register MR: %v needs LOCAL_WRITE: %w", access, ErrInvalidArgument)
	}
	if err := pd.use(useMR, 1); err != nil {
		return nil, fmt.Errorf("verbs: register MR: %w", err)
	}
	r, ok := pd.ctx.mrs.Register(buf, va, uint32(access), pd.id)
	if !ok {
		pd.use(useMR, -1)
		return nil, fmt.Errorf("verbs: register MR: %d regions registered, the device maximum (verbs.MaxMR): deregister MRs no longer in use, or register one larger buffer instead of many small ones: %w", MaxMR, ErrResourceLimit)
	}
	return &MR{pd: pd, region: r}, nil
}

// LKey returns the local key.
func (mr *MR) LKey() LKey { return LKey(mr.region.Key) }

// RKey returns the remote key.
func (mr *MR) RKey() RKey { return RKey(mr.region.Key) }

// Addr returns the virtual address of the region's first byte.
func (mr *MR) Addr() uint64 { return mr.region.VA }

// Len returns the length of the region.
func (mr *MR) Len() int { return len(mr.region.Buf) }

// Buf returns the registered buffer.
func (mr *MR) Buf() []byte { return mr.region.Buf }

// Access returns the region's access rights.
func (mr *MR) Access() AccessFlags { return AccessFlags(mr.region.Access) }

// SGE returns a scatter/gather element for n bytes at offset off.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.region.VA + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// Deregister removes the registration. Once it returns, remote accesses
// with the RKey fail with REM_ACCESS_ERR and no access is in progress. It
// is idempotent.
func (mr *MR) Deregister() error {
	if mr.closed.Swap(true) {
		return nil
	}
	mr.pd.ctx.mrs.Deregister(mr.region.Key)
	mr.pd.use(useMR, -1)
	return nil
}

// Close is Deregister.
func (mr *MR) Close() error { return mr.Deregister() }

// AH is an address handle for UD sends (struct ibv_ah).
type AH struct {
	pd     *PD
	attr   AHAttr
	dst    netip.AddrPort
	closed atomic.Bool
}

// AHAttr describes a remote port (struct ibv_ah_attr with its GRH).
type AHAttr struct {
	DGID         GID
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	PortNum      uint8
	// UDPPort is the peer's RoCEv2 UDP port; 0 means 4791. Only tbrdma
	// peers listen anywhere else.
	UDPPort uint16
}

func (a *AHAttr) addr() netip.AddrPort {
	port := a.UDPPort
	if port == 0 {
		port = wire.UDPPort
	}
	return netip.AddrPortFrom(a.DGID.Addr(), port)
}

// CreateAH creates an address handle.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	if attr.DGID.IsZero() {
		return nil, fmt.Errorf("verbs: create AH: zero destination GID: %w", ErrInvalidArgument)
	}
	if err := pd.use(useAH, 1); err != nil {
		return nil, fmt.Errorf("verbs: create AH: %w", err)
	}
	return &AH{pd: pd, attr: attr, dst: attr.addr()}, nil
}

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Close destroys the AH (ibv_destroy_ah), so that its PD can be closed.
// Sends already posted with it are not affected. Closing a closed AH does
// nothing.
func (ah *AH) Close() error {
	if ah.pd != nil && !ah.closed.Swap(true) {
		ah.pd.use(useAH, -1)
	}
	return nil
}

// Errors.
var (
	// ErrClosed reports an object used after Close (or whose Context is
	// closed). errors.Is(err, net.ErrClosed) matches it too.
	ErrClosed error = closedError{}
	// ErrBusy reports a Close refused because the object is still in use
	// (ibverbs returns EBUSY): the message says what to close first.
	// errors.Is(err, syscall.EBUSY) matches it too.
	ErrBusy            error = busyError{}
	ErrInvalidArgument       = errors.New("invalid argument")
	ErrInvalidState          = errors.New("invalid state")
	ErrResourceLimit         = errors.New("resource limit reached")
	ErrQueueFull             = errors.New("queue full")
)

// StateError reports a QP operation that its state does not allow.
type StateError struct {
	QPN      QPN
	From, To QPState
	Msg      string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("verbs: QP %v: %v -> %v: %s", e.QPN, e.From, e.To, e.Msg)
}

func (e *StateError) Unwrap() error { return ErrInvalidState }

// --- packet I/O -------------------------------------------------------------

// maxFreeBufs and maxFreeBytes bound the packet buffers a context keeps
// for reuse (the byte bound matters with large segments).
const (
	maxFreeBufs  = 4096
	maxFreeBytes = 32 << 20
)

// getBuf returns an empty packet buffer with room for a packet of up to
// 4096 payload bytes (every packet a QP on the path MTU builds).
func (c *Context) getBuf() []byte { return c.getBufFor(0) }

// getBufFor returns an empty packet buffer with room for a packet of n
// payload bytes. Packets of up to 4096 bytes get buffers of maxPacket
// bytes even on a context with large segments, so that the QPs on the path
// MTU (every stock peer's, and every client of a serve that also hosts
// large-segment ones) do not allocate and recycle 60 KiB for each of them.
func (c *Context) getBufFor(n int) []byte {
	want, list := maxPacket, &c.free
	if n > 4096 {
		want, list = int(c.bufCap.Load()), &c.freeBig
	}
	c.bufMu.Lock()
	for k := len(*list); k > 0; k = len(*list) {
		b := (*list)[k-1]
		*list = (*list)[:k-1]
		if cap(b) >= want {
			c.bufMu.Unlock()
			return b
		}
	}
	c.bufMu.Unlock()
	return make([]byte, 0, want)
}

func (c *Context) putBuf(b []byte) {
	bc := int(c.bufCap.Load())
	c.bufMu.Lock()
	c.putBufLocked(b, bc)
	c.bufMu.Unlock()
}

// putBufs is putBuf for the packet buffers of a sent batch, under one
// lock, and clears the batch.
func (c *Context) putBufs(batch []transport.Message) {
	bc := int(c.bufCap.Load())
	c.bufMu.Lock()
	for i := range batch {
		c.putBufLocked(batch[i].Buf, bc)
	}
	c.bufMu.Unlock()
	clear(batch)
}

// putBufLocked keeps b for reuse if it is of a size the free lists hold
// and they are not full; bc is bufCap. c.bufMu is held.
func (c *Context) putBufLocked(b []byte, bc int) {
	switch {
	case cap(b) >= bc && bc > maxPacket:
		if len(c.freeBig) < min(maxFreeBufs, maxFreeBytes/bc) {
			c.freeBig = append(c.freeBig, b[:0])
		}
	case cap(b) >= maxPacket:
		if len(c.free) < min(maxFreeBufs, maxFreeBytes/maxPacket) {
			c.free = append(c.free, b[:0])
		}
	}
}

// queue adds a built packet to the outgoing batch; flush sends it.
func (c *Context) queue(pkt []byte, dst netip.AddrPort) {
	c.outMu.Lock()
	c.out = append(c.out, transport.Message{Buf: pkt, Addr: dst})
	if len(c.out) == 1 {
		c.pending.Store(true)
	}
	c.outMu.Unlock()
}

// zeroCopyMin is the smallest payload sent from registered memory rather
// than copied into the packet buffer: below it the copy is cheaper than
// the kernel's extra iovec. The profile of a 1 MiB WRITE stream in
// 61440-byte segments had 12 % of its time in that copy.
const zeroCopyMin = 2048

// queuePayload adds a packet whose payload stays in registered memory: hdr
// holds its headers, pad and trailer room (transport.Message.Payload).
func (c *Context) queuePayload(hdr, payload []byte, dst netip.AddrPort) {
	c.outMu.Lock()
	c.out = append(c.out, transport.Message{Buf: hdr, Payload: payload, Addr: dst})
	if len(c.out) == 1 {
		c.pending.Store(true)
	}
	c.outMu.Unlock()
}

// nothingQueued reports whether no packet waits for flush.
func (c *Context) nothingQueued() bool {
	if !c.pending.Load() {
		return true
	}
	c.outMu.Lock()
	n := len(c.out)
	c.outMu.Unlock()
	return n == 0
}

// flush sends every queued packet (whoever queues packets flushes
// after).
func (c *Context) flush() {
	if !c.pending.Load() {
		return // nothing queued, no flush sending
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	for {
		c.outMu.Lock()
		batch := c.out
		c.out = c.spare[:0]
		if len(batch) == 0 {
			c.pending.Store(false)
		}
		c.outMu.Unlock()
		if len(batch) == 0 {
			c.spare = batch
			return
		}
		for off, tries := 0, 0; off < len(batch); {
			n, err := c.conn.WriteBatch(batch[off:])
			off += n
			if n > 0 {
				tries = 0
			}
			if err == nil {
				continue
			}
			if k := refusedPackets(err); k > 0 {
				// The system refused one datagram (a firewall rule
				// that drops on output, a route that cannot take
				// it): it was not sent, and the sender knows. It
				// goes again at once, as TCP sends a segment its
				// output path refused again (and as sendmmsg does
				// itself for every message but its first), at most
				// refusedTries times; then it is lost, as on the
				// link, and the packets after it still go (they
				// used to be lost with it).
				if tries++; tries < refusedTries {
					continue
				}
				c.log.Debug("datagram refused", "err", err, "packets", k)
				off, tries = off+k, 0
				continue
			}
			c.log.Debug("send failed", "err", err, "packets", len(batch)-off)
			break
		}
		c.ctr.packetsQueuedOut.Add(uint64(len(batch)))
		c.putBufs(batch)
		c.spare = batch[:0]
	}
}

// refusedTries is how often flush sends a datagram the system refused
// before it counts it lost.
const refusedTries = 3

// refusedPackets returns how many packets the datagram that err says the
// system refused carried (transport.RefusedError), or 0.
func refusedPackets(err error) int {
	var refused *transport.RefusedError
	if errors.As(err, &refused) {
		return max(refused.Packets, 1)
	}
	return 0
}

func (c *Context) recvLoop() {
	defer close(c.loopDone)
	n := c.conn.BatchSize()
	if n < 1 {
		n = 1
	}
	msgs := make([]transport.Message, n)
	var pkt wire.Packet
	var lk qpLookup
	for {
		if !c.in.loopMayRead(c.done) {
			return
		}
		k, err := c.conn.ReadBatch(msgs)
		if err != nil {
			c.in.rx.Unlock()
			select {
			case <-c.done:
				return
			default:
			}
			if c.in.kicked(err) {
				continue
			}
			if errors.Is(err, ErrClosed) || isClosed(err) {
				return
			}
			c.log.Debug("receive failed", "err", err)
			time.Sleep(time.Millisecond)
			continue
		}
		// One clock read and one QP table look-up per batch and QP rather
		// than per packet (the profile of a 1 MiB WRITE stream showed both).
		now := engineNow()
		lk = qpLookup{}
		for i := 0; i < k; i++ {
			c.handle(&msgs[i], &pkt, &lk, now)
		}
		if c.spinners.Load() > 0 || c.woke.Load() && c.woke.Swap(false) && c.nothingQueued() {
			// A goroutine spins on what this batch delivered, or sleeps
			// on a completion channel this batch signalled while the batch
			// left nothing to send (a READ response or an ACK ends a
			// round trip): let it run first, rather than after this loop's
			// flush and its next (usually empty) recvmmsg. If it posts
			// (write-lat answers a WRITE with a WRITE; read-lat posts the
			// next READ), its flush carries what was queued here in the
			// same system call, one send instead of two on the round
			// trip's path. When the batch queued packets (a stream's
			// next window), they leave first rather than wait behind
			// the woken goroutine (docs/performance.md, issue 9's second
			// pass).
			runtime.Gosched()
		}
		c.flush()
		c.in.rx.Unlock()
	}
}

// qpLookup remembers the last QP the receive loop looked up in this batch.
type qpLookup struct {
	qpn QPN
	qp  *QP
}

func (c *Context) handle(m *transport.Message, pkt *wire.Packet, lk *qpLookup, now time.Time) {
	c.ctr.packetsHandled.Add(1)
	if err := pkt.Parse(m.Buf); err != nil {
		c.ctr.drop(dropReasonOf(wire.ReasonOf(err)))
		return
	}
	qpn := pkt.BTH.DestQP()
	if qpn == wire.QPNGSI {
		c.deliverGSI(pkt, m.Addr)
		return
	}
	qp := lk.qp
	if qp == nil || lk.qpn != qpn {
		c.mu.RLock()
		qp = c.qps[qpn]
		c.mu.RUnlock()
		*lk = qpLookup{qpn, qp}
	}
	if qp == nil {
		c.ctr.drop(DropUnknownQP)
		return
	}
	if pk := pkt.BTH.PKey(); pk&0x7FFF != 0x7FFF {
		c.ctr.drop(DropPKey)
		return
	}
	qp.receive(pkt, m.Addr, m.IPID, now)
}

// TransportStats returns the counters of the context's endpoint: packets,
// bytes, system calls and drops by reason (bad ICRC, short packets …).
func (c *Context) TransportStats() transport.Stats { return c.conn.Stats() }

// clockBase anchors engineNow.
var clockBase = time.Now()

// engineNow is time.Now for the engine's deadlines and timers, from one
// clock reading instead of two: time.Now reads the wall clock and the
// monotonic clock, and the engine only ever compares and subtracts its
// times, which Go does on the monotonic reading. The wall reading of the
// result is clockBase's plus the monotonic time since, so it drifts from
// the system's clock if that is set; nothing shows it. A READ round trip
// reads the clock four times on this path (post, two receive batches, the
// CLI's own timestamp): 57 ns each with both readings on the benchmark's
// VM, 31 with one.
func engineNow() time.Time { return clockBase.Add(time.Since(clockBase)) }
