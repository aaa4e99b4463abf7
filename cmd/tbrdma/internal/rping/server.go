package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// ServerOptions configure Serve.
type ServerOptions struct {
	// Ready, if set, is called with the bound address once listening.
	Ready func(netip.AddrPort)
	// Accepted and Closed, if set, are called (from the connection's
	// goroutine) when a connection is established and when it is gone:
	// pings is how many iterations it served, err why it ended (nil: the
	// peer disconnected; ErrShutdown: Serve is stopping).
	Accepted func(peer netip.AddrPort)
	Closed   func(peer netip.AddrPort, pings int, err error)
	// Verbose, if set, receives rping -v's "server ping data: ..." lines.
	Verbose io.Writer
	// MaxConns bounds the connections served at once; more are rejected
	// (REJ, consumer defined). 0 means 64.
	MaxConns int
}

// ErrShutdown is the reason Closed reports for connections Serve ended
// because its context was done.
var ErrShutdown = errors.New("rping: server shutting down")

// Serve listens on addr (the address of vctx, or unspecified; port 0 picks
// one) and answers rping clients, each connection in its own goroutine, as
// `rping -s -P` does, until ctx is done. It then disconnects every peer,
// waits up to two seconds for them to answer, and returns nil.
func Serve(ctx context.Context, vctx *verbs.Context, addr netip.AddrPort, o ServerOptions) error {
	if o.MaxConns <= 0 {
		o.MaxConns = 64
	}
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return err
	}
	defer ech.Destroy()
	lid, err := ech.CreateID(vctx, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	if err := lid.Bind(addr); err != nil {
		return err
	}
	if err := lid.Listen(backlog); err != nil {
		return err
	}
	if o.Ready != nil {
		o.Ready(lid.LocalAddr())
	}

	// The connections' events come on the listener's channel; one
	// goroutine reads them and this one hands them to the connections.
	events, quit := make(chan *rdmacm.Event, 16), make(chan struct{})
	defer close(quit)
	go func() {
		defer close(events)
		for {
			ev, err := ech.GetEvent(context.Background())
			if err != nil {
				return
			}
			select {
			case events <- ev:
			case <-quit:
				return
			}
		}
	}()
	conns := map[*rdmacm.ID]*serverConn{}
	done := make(chan *serverConn, o.MaxConns)
	shutdown, stop := false, ctx.Done()
	var deadline <-chan time.Time
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return rdmacm.ErrClosed
			}
			if ev.Type == rdmacm.EventConnectRequest {
				if shutdown || len(conns) >= o.MaxConns {
					ev.ID.Reject(nil)
					ev.ID.Destroy()
					continue
				}
				sc := newServerConn(ev.ID)
				conns[ev.ID] = sc
				go func() {
					sc.run(&o)
					done <- sc
				}()
				continue
			}
			if sc := conns[ev.ID]; sc != nil {
				sc.event(ev)
			}
		case sc := <-done:
			delete(conns, sc.id)
			if shutdown && len(conns) == 0 {
				return nil
			}
		case <-stop:
			shutdown, stop = true, nil
			lid.Destroy() // no more requests
			for _, sc := range conns {
				sc.cancel(ErrShutdown)
			}
			if len(conns) == 0 {
				return nil
			}
			deadline = time.After(5 * time.Second)
		case <-deadline:
			return fmt.Errorf("rping: %d connections did not close in time", len(conns))
		}
	}
}

// serverConn is one connection of Serve.
type serverConn struct {
	id           *rdmacm.ID
	peer         netip.AddrPort
	ctx          context.Context
	cancel       context.CancelCauseFunc
	established  chan struct{}
	disconnected chan struct{}
	once         [2]sync.Once
}

func newServerConn(id *rdmacm.ID) *serverConn {
	sc := &serverConn{id: id, peer: id.RemoteAddr(), established: make(chan struct{}), disconnected: make(chan struct{})}
	sc.ctx, sc.cancel = context.WithCancelCause(context.Background())
	return sc
}

// event takes one of the connection's events, on Serve's goroutine.
func (sc *serverConn) event(ev *rdmacm.Event) {
	switch ev.Type {
	case rdmacm.EventEstablished:
		sc.once[0].Do(func() { close(sc.established) })
	case rdmacm.EventDisconnected:
		sc.cancel(ErrDisconnected)
		sc.once[1].Do(func() { close(sc.disconnected) })
	case rdmacm.EventConnectError, rdmacm.EventUnreachable, rdmacm.EventRejected:
		sc.cancel(fmt.Errorf("rping: %v", ev))
	}
}

// run accepts the connection, serves it, and tears it down.
func (sc *serverConn) run(o *ServerOptions) {
	pings, err := sc.serve(o)
	if err == nil || errors.Is(err, context.Canceled) {
		err = context.Cause(sc.ctx)
	}
	if errors.Is(err, ErrDisconnected) {
		err = nil
	}
	// Disconnect sends our DREQ, or the DREP to the peer's.
	if sc.id.Disconnect() == nil {
		select {
		case <-sc.disconnected:
		case <-time.After(2 * time.Second):
		}
	}
	sc.id.Destroy()
	if o.Closed != nil {
		o.Closed(sc.peer, pings, err)
	}
}

func (sc *serverConn) serve(o *ServerOptions) (pings int, err error) {
	c, err := newConn(sc.id, 0, MaxSize+1, true)
	if err != nil {
		sc.id.Reject(nil)
		return 0, err
	}
	defer c.free()
	if err := sc.id.Accept(nil); err != nil {
		return 0, err
	}
	select {
	case <-sc.established:
	case <-sc.ctx.Done():
		return 0, context.Cause(sc.ctx)
	}
	if o.Accepted != nil {
		o.Accepted(sc.peer)
	}
	ctx := sc.ctx
	qp := sc.id.QP()
	buf := c.rdmaMR.Buf()
	for ; ; pings++ {
		if err := c.wait(ctx, verbs.WCRecv); err != nil { // source advert
			return pings, err
		}
		raddr, rkey, rlen := c.peerInfo()
		if int(rlen) > len(buf) || rlen == 0 {
			return pings, fmt.Errorf("rping: client advertised %d bytes; at most %d", rlen, len(buf))
		}
		n := int(rlen)
		if _, err := qp.PostSend(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{c.rdmaMR.SGE(0, n)}, RemoteAddr: raddr, RKey: rkey}); err != nil {
			return pings, err
		}
		if err := c.wait(ctx, verbs.WCRDMARead); err != nil {
			return pings, err
		}
		data := cstr(buf[:n])
		if o.Verbose != nil {
			fmt.Fprintf(o.Verbose, "server ping data: %s\n", data)
		}
		if err := c.goAhead(); err != nil {
			return pings, err
		}
		if err := c.wait(ctx, verbs.WCRecv); err != nil { // sink advert
			return pings, err
		}
		raddr, rkey, rlen = c.peerInfo()
		// rping writes strlen(rdma_buf)+1 bytes: the string and its NUL.
		m := min(len(data)+1, n, int(rlen))
		if bytes.IndexByte(buf[:n], 0) < 0 {
			m = min(n, int(rlen))
		}
		if _, err := qp.PostSend(verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{c.rdmaMR.SGE(0, m)}, RemoteAddr: raddr, RKey: rkey}); err != nil {
			return pings, err
		}
		if err := c.wait(ctx, verbs.WCRDMAWrite); err != nil {
			return pings, err
		}
		if err := c.goAhead(); err != nil {
			return pings, err
		}
	}
}
