package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// ConnectError reports a connection that was not established: the
// event that ended it (REJECTED, UNREACHABLE, CONNECT_ERROR, ADDR_ERROR,
// ROUTE_ERROR) with its error, or no event and a timeout.
type ConnectError struct {
	Peer    netip.AddrPort
	Event   *rdmacm.Event // nil when Timeout is set
	Timeout time.Duration // no event within it
}

func (e *ConnectError) Error() string {
	if e.Event == nil {
		return fmt.Sprintf("rping: connect to %v: no answer within %v", e.Peer, e.Timeout)
	}
	return fmt.Sprintf("rping: connect to %v: %v", e.Peer, e.Event)
}

// Unwrap returns the event's error (a *rdmacm.RejectError for REJECTED).
func (e *ConnectError) Unwrap() error {
	if e.Event == nil {
		return nil
	}
	return e.Event.Err
}

// RejectReason returns the peer's REJ reason and true for a REJECTED
// connection.
func (e *ConnectError) RejectReason() (rdmacm.RejectReason, bool) {
	if e.Event == nil || e.Event.Type != rdmacm.EventRejected {
		return 0, false
	}
	var re *rdmacm.RejectError
	if errors.As(e.Event.Err, &re) {
		return re.Reason, true
	}
	return rdmacm.RejectReason(e.Event.Status), true
}

// TimeoutError reports an iteration whose reply did not come in time.
type TimeoutError struct {
	Seq     int
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("rping: no reply to ping %d within %v", e.Seq, e.Timeout)
}

// MismatchError reports an echo that differs from what was sent.
type MismatchError struct {
	Seq       int
	Offset    int // first differing byte
	Want, Got byte
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("rping: ping %d: echo differs at byte #%d: want 0x%02x, got 0x%02x", e.Seq, e.Offset, e.Want, e.Got)
}

// Client is the active side of one rping connection.
type Client struct {
	ech  *rdmacm.EventChannel
	id   *rdmacm.ID
	c    *conn
	peer netip.AddrPort
	size int

	// ctx lives as long as the connection; it is cancelled with
	// ErrDisconnected when the peer disconnects.
	ctx          context.Context
	cancel       context.CancelCauseFunc
	events       chan *rdmacm.Event // the events before ESTABLISHED
	disconnected chan struct{}      // closed on DISCONNECTED
	established  bool
}

// Dial connects from vctx to peer with rping's parameters (RDMA_PS_TCP,
// responder resources and initiator depth 1, retry counts 7, no private
// data) and size-byte buffers, waiting at most timeout for each step. The
// error is a *ConnectError when the peer refused or never answered, or
// ctx's error.
func Dial(ctx context.Context, vctx *verbs.Context, peer netip.AddrPort, size int, timeout time.Duration) (*Client, error) {
	if size < MinSize || size > MaxSize {
		return nil, fmt.Errorf("rping: size %d: want %d..%d", size, MinSize, MaxSize)
	}
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return nil, err
	}
	cl := &Client{ech: ech, peer: peer, size: size,
		events: make(chan *rdmacm.Event, 16), disconnected: make(chan struct{})}
	cl.ctx, cl.cancel = context.WithCancelCause(context.Background())
	go cl.pump()
	ok := false
	defer func() {
		if !ok {
			cl.Close()
		}
	}()
	if cl.id, err = ech.CreateID(vctx, rdmacm.PSTCP); err != nil {
		return nil, err
	}
	if err := cl.id.ResolveAddr(peer.String(), 2*time.Second); err != nil {
		return nil, err
	}
	if err := cl.next(ctx, rdmacm.EventAddrResolved, timeout); err != nil {
		return nil, err
	}
	if err := cl.id.ResolveRoute(2 * time.Second); err != nil {
		return nil, err
	}
	if err := cl.next(ctx, rdmacm.EventRouteResolved, timeout); err != nil {
		return nil, err
	}
	if cl.c, err = newConn(cl.id, size, size, false); err != nil {
		return nil, err
	}
	// rping's own rdma_conn_param (not rdmacm.DefaultConnParam): one READ
	// each way, so that a stock peer sees the REQ it expects.
	if err := cl.id.Connect(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return nil, err
	}
	if err := cl.next(ctx, rdmacm.EventEstablished, timeout); err != nil {
		return nil, err
	}
	cl.established, ok = true, true
	return cl, nil
}

// pump reads the channel until Close destroys it.
func (cl *Client) pump() {
	for {
		ev, err := cl.ech.GetEvent(context.Background())
		if err != nil {
			return
		}
		if ev.Type == rdmacm.EventDisconnected {
			cl.cancel(ErrDisconnected)
			close(cl.disconnected)
			continue
		}
		select {
		case cl.events <- ev:
		default: // nobody listens once the connection is up
		}
	}
}

// next waits for an event of type want.
func (cl *Client) next(ctx context.Context, want rdmacm.EventType, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ev := <-cl.events:
		if ev.Type != want {
			return &ConnectError{Peer: cl.peer, Event: ev}
		}
		return nil
	case <-t.C:
		return &ConnectError{Peer: cl.peer, Timeout: timeout}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LocalAddr returns the connection's local address and port.
func (cl *Client) LocalAddr() netip.AddrPort { return cl.id.LocalAddr() }

// Ping runs iteration seq of rping's protocol: it advertises the source
// buffer (holding rping's pattern for seq), waits for the server's "go
// ahead" (after its RDMA READ), advertises the sink buffer, waits for the
// second "go ahead" (after its RDMA WRITE of the echo) and checks the echo
// byte for byte. It returns the time from the first SEND to the second
// "go ahead", measured with now. Each of the two waits lasts at most
// timeout (*TimeoutError). A *MismatchError comes with the time; after any
// other error the connection is unusable: ErrDisconnected when the peer
// disconnected, ctx's error, or a failed completion.
func (cl *Client) Ping(ctx context.Context, seq int, timeout time.Duration, now func() time.Time) (time.Duration, error) {
	start, sink := cl.c.startMR.Buf(), cl.c.rdmaMR.Buf()
	Fill(start, seq)
	clear(sink)
	t0 := now()
	if err := cl.c.sendInfo(cl.c.startMR, cl.size); err != nil {
		return 0, err
	}
	if err := cl.wait(ctx, seq, timeout); err != nil { // go ahead: the server has read the source
		return 0, err
	}
	if err := cl.c.sendInfo(cl.c.rdmaMR, cl.size); err != nil {
		return 0, err
	}
	if err := cl.wait(ctx, seq, timeout); err != nil { // go ahead: the echo is in the sink
		return 0, err
	}
	rtt := now().Sub(t0)
	if !bytes.Equal(sink, start) {
		for j := range sink {
			if sink[j] != start[j] {
				return rtt, &MismatchError{Seq: seq, Offset: j, Want: start[j], Got: sink[j]}
			}
		}
	}
	return rtt, nil
}

// wait waits for a RECV, at most timeout, while the connection is up and
// ctx is not done.
func (cl *Client) wait(ctx context.Context, seq int, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(cl.ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	err := cl.c.wait(wctx, verbs.WCRecv)
	switch {
	case err == nil:
		return nil
	case context.Cause(cl.ctx) == ErrDisconnected:
		return ErrDisconnected
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return &TimeoutError{Seq: seq, Timeout: timeout}
	}
	return err
}

// Close disconnects (or answers the peer's disconnect), waits up to two
// seconds for the DISCONNECTED event, and releases everything. It is safe
// on a Client that Dial did not finish.
func (cl *Client) Close() error {
	if cl.id != nil && cl.established {
		if err := cl.id.Disconnect(); err == nil {
			select {
			case <-cl.disconnected:
			case <-time.After(2 * time.Second):
			}
		}
	}
	if cl.c != nil {
		cl.c.free()
	}
	if cl.id != nil {
		cl.id.Destroy()
	}
	cl.ech.Destroy()
	cl.cancel(rdmacm.ErrClosed)
	return nil
}
