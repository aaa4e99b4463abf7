package transporttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// Dir is one direction of traffic between two endpoints.
type Dir struct{ From, To netip.AddrPort }

func (d Dir) String() string { return d.From.String() + "->" + d.To.String() }

// Verdict is a filter's decision on a packet.
type Verdict int

const (
	Pass Verdict = iota // deliver the packet (subject to the other faults)
	Drop                // drop it (counted in NetStats.Filtered)
)

// GilbertElliott is a two-state burst-loss model. Before each packet the
// link moves from the good to the bad state with probability P and back
// with probability R; the packet is then lost with probability LossGood or
// LossBad depending on the state. The mean burst length is 1/R packets.
// The zero value is off.
type GilbertElliott struct {
	P, R              float64
	LossGood, LossBad float64
}

func (g GilbertElliott) enabled() bool { return g.P > 0 || g.LossGood > 0 }

// Faults describes what a link does to packets. Probabilities are per
// packet, in [0, 1]. The zero value is a perfect link. The stages run in
// this order: filter, DropNext, burst loss, loss, duplication, corruption
// (each copy independently), reordering, delay.
type Faults struct {
	Loss  float64        // independent loss
	Burst GilbertElliott // burst loss
	// Duplicate is the probability that a packet is delivered twice.
	Duplicate float64
	// Corrupt is the probability that one random bit of a packet (after
	// its ICRC was computed) is flipped. The receiver drops it and counts
	// wire.ReasonICRC. The bits of BTH byte 4 (FECN, BECN, reserved) are
	// spared: the ICRC does not cover them, so flipping one would go
	// undetected, on this link as on a real one.
	Corrupt float64
	// Reorder is the probability that a packet is held back and released
	// after ReorderAfter later packets of its direction have gone ahead
	// (0 means 1), or after ReorderDelay if that is set and comes first.
	// Without ReorderDelay a held packet waits for traffic to pass it.
	Reorder      float64
	ReorderAfter int
	ReorderDelay time.Duration
	// Delay is added to every packet, plus a uniform random part in
	// [0, Jitter). A constant delay keeps each direction's order (packets
	// due at the same instant leave in the order they were sent); jitter
	// reorders packets closer together than it, as netem does.
	Delay, Jitter time.Duration
}

// NetStats counts what the Network did to packets.
type NetStats struct {
	Sent       uint64 // packets written by endpoints
	Delivered  uint64 // packets queued at a receiving endpoint (duplicates included)
	Filtered   uint64 // dropped by the filter
	Lost       uint64 // dropped by DropNext, burst or independent loss
	Duplicated uint64 // extra copies made
	Corrupted  uint64 // copies with a flipped bit
	Reordered  uint64 // packets held back
	NoRoute    uint64 // no endpoint at the destination
	Overflow   uint64 // dropped because the receiver's queue was full
}

// bthMaskedByte is the BTH byte the ICRC masks out.
const bthMaskedByte = 4

// DefaultQueueLimit is the number of packets an endpoint queues before
// further packets are dropped (NetStats.Overflow).
const DefaultQueueLimit = 1 << 16

// Network is an in-memory link joining endpoints by address. Its methods
// are safe for concurrent use.
type Network struct {
	mu        sync.Mutex
	seed      uint64
	faults    Faults
	links     map[Dir]*link
	endpoints map[netip.AddrPort]*Endpoint
	timers    map[*time.Timer]struct{}
	stats     NetStats
	limit     int
	closed    bool
	filter    atomic.Pointer[func(Dir, []byte) Verdict]
	// egress, when set (by Faulty), receives every packet the fault
	// stages let through instead of an endpoint's queue. n.mu is held.
	egress func(q packet)
}

// NewNetwork returns an empty, perfect network whose random choices derive
// from seed.
func NewNetwork(seed uint64) *Network {
	return &Network{
		seed:      seed,
		links:     make(map[Dir]*link),
		endpoints: make(map[netip.AddrPort]*Endpoint),
		timers:    make(map[*time.Timer]struct{}),
		limit:     DefaultQueueLimit,
	}
}

// link is the state of one direction.
type link struct {
	dir      Dir
	rng      *rand.Rand
	faults   *Faults // nil: the network's
	bad      bool    // Gilbert-Elliott state
	dropNext int
	held     []*heldPacket
	// Delayed packets, by due time and, among equal due times, in the
	// order they were sent; one timer runs for the earliest.
	delayed []delayedPacket
	seq     uint64
	timer   *time.Timer
	timerAt time.Time
}

type delayedPacket struct {
	due time.Time
	seq uint64
	p   packet
}

type heldPacket struct {
	p     packet
	after int
	timer *time.Timer
}

// packet is a packet in flight.
type packet struct {
	buf  []byte
	from netip.AddrPort
	to   netip.AddrPort
}

// Attach creates the endpoint for addr (an IPv4 or IPv6 address and a
// port; port 0 means wire.UDPPort). It panics if the address is invalid or
// taken, or if the network is closed.
func (n *Network) Attach(addr netip.AddrPort) *Endpoint {
	a := addr.Addr().Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		panic(fmt.Sprintf("transporttest: Attach(%v): need a specific address", addr))
	}
	port := addr.Port()
	if port == 0 {
		port = wire.UDPPort
	}
	addr = netip.AddrPortFrom(a, port)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		panic("transporttest: Attach on a closed Network")
	}
	if _, ok := n.endpoints[addr]; ok {
		panic(fmt.Sprintf("transporttest: Attach(%v): address in use", addr))
	}
	e := &Endpoint{
		net:   n,
		addr:  addr,
		ready: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	n.endpoints[addr] = e
	return e
}

// SetFaults sets the faults of every direction that has none of its own.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	n.faults = f
	n.mu.Unlock()
}

// SetDirFaults sets the faults of one direction, overriding SetFaults.
func (n *Network) SetDirFaults(d Dir, f Faults) {
	n.mu.Lock()
	n.link(d).faults = &f
	n.mu.Unlock()
}

// SetFilter installs f, called with each packet written (its ICRC filled
// in) before any other fault; nil removes it. f may be called from several
// goroutines at once, must not retain pkt and must not call the Network.
func (n *Network) SetFilter(f func(d Dir, pkt []byte) Verdict) {
	if f == nil {
		n.filter.Store(nil)
		return
	}
	n.filter.Store(&f)
}

// DropNext drops the next count packets of direction d (a loss burst of
// exactly that length).
func (n *Network) DropNext(d Dir, count int) {
	n.mu.Lock()
	n.link(d).dropNext += count
	n.mu.Unlock()
}

// SetQueueLimit sets how many packets an endpoint queues before dropping.
func (n *Network) SetQueueLimit(limit int) {
	n.mu.Lock()
	n.limit = limit
	n.mu.Unlock()
}

// Stats returns a snapshot of the network's counters.
func (n *Network) Stats() NetStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Close closes every endpoint and stops every pending delivery; packets in
// flight are discarded.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	for t := range n.timers {
		t.Stop()
	}
	clear(n.timers)
	for _, l := range n.links {
		l.held = nil
		l.delayed = nil
		l.timer = nil
	}
	for _, e := range n.endpoints {
		e.closeLocked()
	}
	return nil
}

// link returns the state of direction d, creating it. n.mu is held.
func (n *Network) link(d Dir) *link {
	l := n.links[d]
	if l == nil {
		a, b := d.From.Addr().As16(), d.To.Addr().As16()
		var buf [36]byte
		copy(buf[:], a[:])
		copy(buf[16:], b[:])
		buf[32], buf[33] = byte(d.From.Port()>>8), byte(d.From.Port())
		buf[34], buf[35] = byte(d.To.Port()>>8), byte(d.To.Port())
		l = &link{dir: d, rng: rand.New(rand.NewPCG(n.seed, fnv64(buf[:])))}
		n.links[d] = l
	}
	return l
}

// fnv64 is FNV-1a, a fixed hash so that seeds do not vary between runs.
func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

func (l *link) f(n *Network) *Faults {
	if l.faults != nil {
		return l.faults
	}
	return &n.faults
}

// chance draws from l's generator: true with probability p.
func (l *link) chance(p float64) bool { return p > 0 && l.rng.Float64() < p }

// send runs the fault stages after the filter for one packet. n.mu is
// held.
func (n *Network) send(l *link, p packet) {
	f := l.f(n)
	if l.dropNext > 0 {
		l.dropNext--
		n.stats.Lost++
		return
	}
	if f.Burst.enabled() {
		if l.bad {
			l.bad = !l.chance(f.Burst.R)
		} else {
			l.bad = l.chance(f.Burst.P)
		}
		loss := f.Burst.LossGood
		if l.bad {
			loss = f.Burst.LossBad
		}
		if l.chance(loss) {
			n.stats.Lost++
			return
		}
	}
	if l.chance(f.Loss) {
		n.stats.Lost++
		return
	}
	copies := 1
	if l.chance(f.Duplicate) {
		copies = 2
		n.stats.Duplicated++
	}
	for i := range copies {
		q := p
		if i > 0 {
			q.buf = append([]byte(nil), p.buf...)
		}
		if l.chance(f.Corrupt) {
			// Any bit but those of BTH byte 4 (FECN, BECN, reserved),
			// which the ICRC does not cover.
			bit := l.rng.IntN((len(q.buf) - 1) * 8)
			if bit >= bthMaskedByte*8 {
				bit += 8
			}
			q.buf[bit/8] ^= 1 << (bit % 8)
			n.stats.Corrupted++
		}
		n.reorder(l, f, q)
	}
}

// reorder holds q back or passes it on, releasing held packets it
// overtakes. n.mu is held.
func (n *Network) reorder(l *link, f *Faults, q packet) {
	if l.chance(f.Reorder) {
		h := &heldPacket{p: q, after: max(f.ReorderAfter, 1)}
		if f.ReorderDelay > 0 {
			h.timer = n.afterFunc(f.ReorderDelay, func() { n.releaseHeld(l, h) })
		}
		l.held = append(l.held, h)
		n.stats.Reordered++
		return
	}
	n.delay(l, f, q)
	kept := l.held[:0]
	var release []*heldPacket
	for _, h := range l.held {
		if h.after--; h.after <= 0 {
			release = append(release, h)
		} else {
			kept = append(kept, h)
		}
	}
	clear(l.held[len(kept):])
	l.held = kept
	for _, h := range release {
		n.stopTimer(h.timer)
		n.delay(l, f, h.p)
	}
}

// releaseHeld releases h when its ReorderDelay expires.
func (n *Network) releaseHeld(l *link, h *heldPacket) {
	for i, x := range l.held {
		if x == h {
			l.held = append(l.held[:i], l.held[i+1:]...)
			n.delay(l, l.f(n), h.p)
			return
		}
	}
}

// delay delivers q now or after the link's delay. Packets due at the same
// instant are delivered in the order they were sent, so a constant delay
// never reorders; only jitter does. n.mu is held.
func (n *Network) delay(l *link, f *Faults, q packet) {
	d := f.Delay
	if f.Jitter > 0 {
		d += time.Duration(l.rng.Int64N(int64(f.Jitter)))
	}
	if d <= 0 {
		n.deliver(q)
		return
	}
	due := time.Now().Add(d)
	l.seq++
	// Insert after every packet due no later than this one.
	i := len(l.delayed)
	for i > 0 && l.delayed[i-1].due.After(due) {
		i--
	}
	l.delayed = slices.Insert(l.delayed, i, delayedPacket{due: due, seq: l.seq, p: q})
	if i == 0 {
		n.armLink(l)
	}
}

// armLink (re)starts l's timer for its earliest delayed packet. n.mu is
// held.
func (n *Network) armLink(l *link) {
	if len(l.delayed) == 0 {
		n.stopTimer(l.timer)
		l.timer, l.timerAt = nil, time.Time{}
		return
	}
	due := l.delayed[0].due
	if l.timer != nil && l.timerAt.Equal(due) {
		return
	}
	n.stopTimer(l.timer)
	l.timerAt = due
	l.timer = n.afterFunc(time.Until(due), func() {
		l.timer, l.timerAt = nil, time.Time{}
		n.releaseDelayed(l)
	})
}

// releaseDelayed delivers, in order, every delayed packet of l that is
// due. n.mu is held.
func (n *Network) releaseDelayed(l *link) {
	now := time.Now()
	k := 0
	for k < len(l.delayed) && !l.delayed[k].due.After(now) {
		n.deliver(l.delayed[k].p)
		k++
	}
	clear(l.delayed[:k])
	l.delayed = l.delayed[k:]
	n.armLink(l)
}

// afterFunc runs f with n.mu held after d, unless the network closes
// first. n.mu is held.
func (n *Network) afterFunc(d time.Duration, f func()) *time.Timer {
	// The callback takes n.mu, which the caller holds until t is recorded.
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if _, ok := n.timers[t]; !ok {
			return // stopped or the network closed
		}
		delete(n.timers, t)
		f()
	})
	n.timers[t] = struct{}{}
	return t
}

func (n *Network) stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
		delete(n.timers, t)
	}
}

// deliver queues q at its destination. n.mu is held.
func (n *Network) deliver(q packet) {
	if n.egress != nil {
		n.stats.Delivered++
		n.egress(q)
		return
	}
	e := n.endpoints[q.to]
	if e == nil {
		n.stats.NoRoute++
		return
	}
	if len(e.queue) >= n.limit {
		n.stats.Overflow++
		return
	}
	e.queue = append(e.queue, q)
	n.stats.Delivered++
	select {
	case e.ready <- struct{}{}:
	default:
	}
}

// Endpoint is one address on a Network. It implements transport.Conn.
type Endpoint struct {
	net   *Network
	addr  netip.AddrPort
	ready chan struct{} // a packet was queued
	done  chan struct{} // closed by Close

	// Guarded by net.mu.
	queue  []packet
	closed bool
	stats  transport.Stats
}

var _ transport.Conn = (*Endpoint)(nil)

var errClosed = fmt.Errorf("transporttest: endpoint closed: %w", net.ErrClosed)

// ReadBatch implements transport.Conn. The returned Bufs are owned by the
// caller from then on (the UDP endpoint only promises them until the next
// ReadBatch).
func (e *Endpoint) ReadBatch(msgs []transport.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	n := e.net
	for {
		n.mu.Lock()
		if e.closed {
			n.mu.Unlock()
			return 0, errClosed
		}
		k, used := 0, 0
		for _, q := range e.queue {
			if k == len(msgs) {
				break
			}
			used++
			if len(q.buf) < wire.BTHSize+wire.ICRCSize {
				e.stats.Drops[wire.ReasonShort]++
				continue
			}
			if id, ok := wire.VerifyICRC(q.buf, q.from, e.addr); !ok || id != 0 {
				e.stats.Drops[wire.ReasonICRC]++
				continue
			}
			msgs[k] = transport.Message{Buf: q.buf, Addr: q.from, Local: e.addr.Addr()}
			e.stats.PacketsIn++
			e.stats.BytesIn += uint64(len(q.buf))
			k++
		}
		clear(e.queue[:used])
		e.queue = e.queue[used:]
		if len(e.queue) == 0 {
			e.queue = nil
		} else {
			select {
			case e.ready <- struct{}{}:
			default:
			}
		}
		n.mu.Unlock()
		if k > 0 {
			return k, nil
		}
		select {
		case <-e.ready:
		case <-e.done:
		}
	}
}

// WriteBatch implements transport.Conn: it fills each packet's ICRC in
// place (IPv4 identification 0), copies it and sends it through the
// network's faults.
func (e *Endpoint) WriteBatch(msgs []transport.Message) (int, error) {
	n := e.net
	filter := n.filter.Load()
	for i := range msgs {
		m := &msgs[i]
		if len(m.Buf) < wire.BTHSize+wire.ICRCSize {
			return i, fmt.Errorf("transporttest: send: %d-byte packet: %w", len(m.Buf), wire.ErrShortPacket)
		}
		to := netip.AddrPortFrom(m.Addr.Addr().Unmap(), m.Addr.Port())
		if !to.IsValid() || to.Addr().Is4() != e.addr.Addr().Is4() {
			return i, fmt.Errorf("transporttest: send: bad destination %v", m.Addr)
		}
		wire.PutICRC(m.Buf, e.addr, to, 0)
		p := packet{buf: append([]byte(nil), m.Buf...), from: e.addr, to: to}
		d := Dir{e.addr, to}
		verdict := Pass
		if filter != nil {
			verdict = (*filter)(d, p.buf)
		}
		n.mu.Lock()
		if e.closed {
			n.mu.Unlock()
			return i, errClosed
		}
		e.stats.PacketsOut++
		e.stats.BytesOut += uint64(len(m.Buf))
		n.stats.Sent++
		if verdict == Drop {
			n.stats.Filtered++
		} else {
			n.send(n.link(d), p)
		}
		n.mu.Unlock()
	}
	return len(msgs), nil
}

// BatchSize implements transport.Conn.
func (e *Endpoint) BatchSize() int { return transport.IdealBatchSize }

// LocalAddr implements transport.Conn.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.addr }

// Stats implements transport.Conn. ReadCalls and WriteCalls are 0.
func (e *Endpoint) Stats() transport.Stats {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	return e.stats
}

// Close detaches the endpoint and wakes a pending ReadBatch, which returns
// an error matching net.ErrClosed. Packets still queued are discarded.
func (e *Endpoint) Close() error {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	e.closeLocked()
	return nil
}

func (e *Endpoint) closeLocked() {
	if e.closed {
		return
	}
	e.closed = true
	e.queue = nil
	if e.net.endpoints[e.addr] == e {
		delete(e.net.endpoints, e.addr)
	}
	close(e.done)
}
