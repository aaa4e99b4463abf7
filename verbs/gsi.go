package verbs

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// gsi is a context's QP1 (internal/hooks.GSI): the general services
// interface, which carries management datagrams (MADs) such as the IB CM
// messages package rdmacm speaks. It is reached through hooks.Of(ctx).GSI().
type gsi struct {
	ctx  *Context
	recv chan hooks.MADPacket
	psn  atomic.Uint32
	once sync.Once
	done chan struct{}

	dropped atomic.Uint64 // MADs discarded because the receiver fell behind
}

// gsiQueue bounds the MADs waiting for the GSI's reader.
const gsiQueue = 1024

// gsiPort returns the context's QP1, creating it on first use. MADs that
// arrive before then are dropped, as they would be with no MAD agent
// registered.
func (c *Context) gsiPort() *gsi {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gsi == nil {
		c.gsi = &gsi{ctx: c, recv: make(chan hooks.MADPacket, gsiQueue), done: make(chan struct{})}
	}
	return c.gsi
}

// Recv waits for the next MAD.
func (g *gsi) Recv(ctx context.Context) (hooks.MADPacket, error) {
	select {
	case m := <-g.recv:
		return m, nil
	case <-ctx.Done():
		return hooks.MADPacket{}, ctx.Err()
	case <-g.done:
		return hooks.MADPacket{}, ErrClosed
	case <-g.ctx.done:
		return hooks.MADPacket{}, ErrClosed
	}
}

// Send sends a 256-byte MAD from QP1 to QP1 at dst (UDP port 0 means 4791).
func (g *gsi) Send(dst netip.AddrPort, mad []byte) error {
	if len(mad) != wire.MADSize {
		return fmt.Errorf("verbs: GSI send: MAD of %d bytes, want %d: %w", len(mad), wire.MADSize, ErrInvalidArgument)
	}
	if dst.Port() == 0 {
		dst = netip.AddrPortFrom(dst.Addr(), wire.UDPPort)
	}
	select {
	case <-g.done:
		return ErrClosed
	default:
	}
	c := g.ctx
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.PKeyDefault, DestQP: wire.QPNGSI,
		PSN: PSN(g.psn.Add(1)-1) & wire.PSNMask}
	h.DETH = wire.DETHFields{QKey: wire.QKeyGSI, SrcQP: wire.QPNGSI}
	c.queue(wire.AppendPacket(c.getBuf(), &h, mad), dst)
	c.ctr.madsOut.Add(1)
	c.flush()
	return nil
}

// Close stops delivery; pending and later Recv calls return ErrClosed.
func (g *gsi) Close() error {
	g.once.Do(func() { close(g.done) })
	return nil
}

// Dropped counts MADs discarded because the receiver fell behind.
func (g *gsi) Dropped() uint64 { return g.dropped.Load() }

// deliverGSI hands a UD packet addressed to QP1 to the GSI reader.
func (c *Context) deliverGSI(pkt *wire.Packet, from netip.AddrPort) {
	c.mu.RLock()
	g := c.gsi
	c.mu.RUnlock()
	if g == nil {
		c.ctr.drop(DropUnknownQP)
		return
	}
	if pkt.BTH.Opcode() != wire.UDSendOnly || pkt.DETH.QKey() != wire.QKeyGSI {
		c.ctr.drop(DropQKey)
		return
	}
	if _, _, err := wire.ParseMAD(pkt.Payload); err != nil || len(pkt.Payload) != wire.MADSize {
		c.ctr.drop(DropMAD)
		return
	}
	c.ctr.madsIn.Add(1)
	m := hooks.MADPacket{From: from, SrcQP: pkt.DETH.SrcQP()}
	copy(m.MAD[:], pkt.Payload)
	select {
	case g.recv <- m:
	default:
		g.dropped.Add(1)
	}
}
