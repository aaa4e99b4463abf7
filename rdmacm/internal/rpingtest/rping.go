// Package rpingtest speaks rping's protocol (librdmacm/examples/rping.c,
// tools-and-discovery.md §3.3) over package rdmacm, as client and server,
// so tbrdma can be checked against a stock rping on rdma_rxe.
package rpingtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// Options configure a run.
type Options struct {
	Port    uint16 // default 7174
	Size    int    // ping buffer size, default 64
	Count   int    // iterations (client), default 10
	Verbose bool   // print the ping data
	Out     io.Writer
}

func (o *Options) defaults() {
	if o.Port == 0 {
		o.Port = 7174
	}
	if o.Size == 0 {
		o.Size = 64
	}
	if o.Count == 0 {
		o.Count = 10
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// cb is rping's control block: the QP and its four buffers.
type cb struct {
	ch                 *rdmacm.EventChannel
	id                 *rdmacm.ID
	cq                 *verbs.CQ
	recvMR, sendMR     *verbs.MR
	startMR, rdmaMR    *verbs.MR
	events             chan *rdmacm.Event
	disconnected       bool
	size               int
	pendingRecv, sends int
}

func setup(id *rdmacm.ID, size int) (*cb, error) {
	vctx := id.VerbsContext()
	pd, err := vctx.AllocPD()
	if err != nil {
		return nil, err
	}
	c := &cb{id: id, size: size}
	if c.cq, err = vctx.CreateCQ(32, nil); err != nil {
		return nil, err
	}
	if _, err = id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	for _, m := range []struct {
		mr  **verbs.MR
		n   int
		acc verbs.AccessFlags
	}{{&c.recvMR, 16, verbs.AccessLocalWrite}, {&c.sendMR, 16, 0}, {&c.startMR, size, rw}, {&c.rdmaMR, size, rw}} {
		if *m.mr, err = pd.RegMR(make([]byte, m.n), m.acc); err != nil {
			return nil, err
		}
	}
	return c, c.postRecv()
}

func (c *cb) postRecv() error {
	_, err := c.id.QP().PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{c.recvMR.SGE(0, 16)}})
	return err
}

// send sends the 16-byte rping_rdma_info {buf, rkey, size}, big-endian.
func (c *cb) send(mr *verbs.MR) error {
	b := c.sendMR.Buf()
	binary.BigEndian.PutUint64(b[0:], mr.Addr())
	binary.BigEndian.PutUint32(b[8:], uint32(mr.RKey()))
	binary.BigEndian.PutUint32(b[12:], uint32(mr.Len()))
	_, err := c.id.QP().PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.sendMR.SGE(0, 16)}})
	return err
}

var errDisconnected = errors.New("rping: disconnected")

// wait polls for a completion of the wanted opcode, re-posting the receive
// after each RECV and skipping send completions. It watches the CM events
// meanwhile.
func (c *cb) wait(ctx context.Context, want verbs.WCOpcode) (verbs.WC, error) {
	var wc [1]verbs.WC
	for {
		n, err := c.cq.Poll(wc[:])
		if err != nil {
			return wc[0], err
		}
		if n == 1 {
			if err := wc[0].Err(); err != nil {
				return wc[0], fmt.Errorf("rping: %v completion: %w", wc[0].Opcode, err)
			}
			if wc[0].Opcode == verbs.WCRecv {
				if wc[0].ByteLen != 16 {
					return wc[0], fmt.Errorf("rping: received bogus data, size %d", wc[0].ByteLen)
				}
				if err := c.postRecv(); err != nil {
					return wc[0], err
				}
			}
			if wc[0].Opcode == want {
				return wc[0], nil
			}
			continue
		}
		select {
		case ev := <-c.events:
			if ev.Type == rdmacm.EventDisconnected {
				c.disconnected = true
				return wc[0], errDisconnected
			}
		case <-ctx.Done():
			return wc[0], ctx.Err()
		case <-time.After(50 * time.Microsecond):
		}
	}
}

func pump(ctx context.Context, ch *rdmacm.EventChannel, out chan<- *rdmacm.Event) {
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			close(out)
			return
		}
		out <- ev
	}
}

func next(ctx context.Context, events <-chan *rdmacm.Event, want rdmacm.EventType) (*rdmacm.Event, error) {
	select {
	case ev, ok := <-events:
		if !ok {
			return nil, rdmacm.ErrClosed
		}
		if ev.Type != want {
			return ev, fmt.Errorf("rping: event %v (status %d), want %v", ev, ev.Status, want)
		}
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fill writes rping's pattern for ping n: "rdma-ping-<n>: " then ASCII
// 65..122 cycling from 65 + n mod 58, NUL at the end.
func fill(b []byte, n int) {
	cc := copy(b, "rdma-ping-"+strconv.Itoa(n)+": ")
	c := byte(65 + n%58)
	for i := cc; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Client connects to server (an address; the port is o.Port) from vctx and
// runs o.Count pings, as `rping -c -a server -C count`.
func Client(ctx context.Context, vctx *verbs.Context, server netip.Addr, o Options) error {
	o.defaults()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, _ := rdmacm.CreateEventChannel(nil)
	defer ch.Destroy()
	events := make(chan *rdmacm.Event, 16)
	go pump(ctx, ch, events)
	id, err := ch.CreateID(vctx, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	defer id.Destroy()
	defer id.DestroyQP()
	if err := id.ResolveAddr(netip.AddrPortFrom(server, o.Port).String(), 2*time.Second); err != nil {
		return err
	}
	if _, err := next(ctx, events, rdmacm.EventAddrResolved); err != nil {
		return err
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		return err
	}
	if _, err := next(ctx, events, rdmacm.EventRouteResolved); err != nil {
		return err
	}
	c, err := setup(id, o.Size)
	if err != nil {
		return err
	}
	c.events = events
	if err := id.Connect(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return err
	}
	if _, err := next(ctx, events, rdmacm.EventEstablished); err != nil {
		return err
	}
	for ping := range o.Count {
		start, sink := c.startMR.Buf(), c.rdmaMR.Buf()
		fill(start, ping)
		clear(sink)
		if err := c.send(c.startMR); err != nil {
			return err
		}
		if _, err := c.wait(ctx, verbs.WCRecv); err != nil { // go ahead
			return err
		}
		if err := c.send(c.rdmaMR); err != nil {
			return err
		}
		if _, err := c.wait(ctx, verbs.WCRecv); err != nil { // write done
			return err
		}
		if cstr(sink) != cstr(start) {
			return fmt.Errorf("rping: data mismatch: %q != %q", cstr(sink), cstr(start))
		}
		if o.Verbose {
			fmt.Fprintf(o.Out, "ping data: %s\n", cstr(sink))
		}
	}
	if err := id.Disconnect(); err != nil {
		return err
	}
	_, err = next(ctx, events, rdmacm.EventDisconnected)
	return err
}

// Server listens on addr:o.Port of vctx, serves one client until it
// disconnects, as `rping -s -a addr`. ready, if not nil, is called once the
// listener is up.
func Server(ctx context.Context, vctx *verbs.Context, addr netip.Addr, o Options, ready func()) error {
	o.defaults()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, _ := rdmacm.CreateEventChannel(nil)
	defer ch.Destroy()
	events := make(chan *rdmacm.Event, 16)
	go pump(ctx, ch, events)
	lid, err := ch.CreateID(vctx, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	if err := lid.Bind(netip.AddrPortFrom(addr, o.Port)); err != nil {
		return err
	}
	if err := lid.Listen(3); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	ev, err := next(ctx, events, rdmacm.EventConnectRequest)
	if err != nil {
		return err
	}
	id := ev.ID
	defer id.Destroy()
	defer id.DestroyQP()
	c, err := setup(id, o.Size)
	if err != nil {
		return err
	}
	c.events = events
	if err := id.Accept(nil); err != nil {
		return err
	}
	if _, err := next(ctx, events, rdmacm.EventEstablished); err != nil {
		return err
	}
	buf := c.rdmaMR.Buf()
	for {
		wc, err := c.wait(ctx, verbs.WCRecv) // source advert
		if errors.Is(err, errDisconnected) {
			break
		}
		if err != nil {
			return err
		}
		_ = wc
		info := c.recvMR.Buf()
		raddr, rkey, rlen := binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:]), binary.BigEndian.Uint32(info[12:])
		n := min(int(rlen), len(buf))
		if _, err := id.QP().PostSend(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{c.rdmaMR.SGE(0, n)}, RemoteAddr: raddr, RKey: verbs.RKey(rkey)}); err != nil {
			return err
		}
		if _, err := c.wait(ctx, verbs.WCRDMARead); err != nil {
			return err
		}
		if o.Verbose {
			fmt.Fprintf(o.Out, "server ping data: %s\n", cstr(buf))
		}
		if err := c.send(c.rdmaMR); err != nil {
			return err
		}
		if _, err := c.wait(ctx, verbs.WCRecv); err != nil { // sink advert
			return err
		}
		raddr, rkey = binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:])
		n = len(cstr(buf)) + 1
		if _, err := id.QP().PostSend(verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{c.rdmaMR.SGE(0, n)}, RemoteAddr: raddr, RKey: verbs.RKey(rkey)}); err != nil {
			return err
		}
		if _, err := c.wait(ctx, verbs.WCRDMAWrite); err != nil {
			return err
		}
		if err := c.send(c.rdmaMR); err != nil {
			return err
		}
	}
	// The client disconnected: answer with a DREP.
	return id.Disconnect()
}
