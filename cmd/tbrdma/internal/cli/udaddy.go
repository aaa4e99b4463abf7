package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// librdmacm's udaddy example (rdma-core, librdmacm/examples/udaddy.c):
// defaults and the room a UD receive keeps for the GRH.
const (
	udaddyDefaultPort  = 7174
	udaddyDefaultCount = 10
	udaddyDefaultSize  = 100
	udaddyGRH          = 40
)

type udaddyOptions struct {
	IO         *ui.IO
	OpenDevice func(netip.Addr) (*verbs.Context, error)
	Resolve    func(ctx context.Context, host string) (netip.Addr, error)
	Source     func(peer netip.Addr) (netip.Addr, error)

	Server  string // -s or the argument: connect to it; empty: listen
	Bind    string // -b
	Count   int    // -C
	Size    int    // -S
	Port    int    // -p
	Timeout float64

	// Listening, when set, is called once the server listens (tests).
	Listening func(netip.AddrPort)

	bind    netip.Addr
	timeout time.Duration
}

func newCmdUdaddy(f *Factory, runF func(*udaddyOptions) error) *cobra.Command {
	opts := &udaddyOptions{Resolve: resolveHost, Source: routeSource}
	cmd := &cobra.Command{
		Use:   "udaddy [flags] [server]",
		Short: "Exchange UD datagrams through rdma_cm's UD port space, as librdmacm's udaddy",
		Long: `Speak librdmacm's udaddy example protocol. Without a server (no argument,
no -s) listen on rdma_cm port -p of the -b address in RDMA_PS_UDP; with one,
connect to it. The client resolves the server with SIDR (a SIDR_REQ answered
by a SIDR_REP carrying the server's UD QPN and Q_Key), then sends -C
datagrams of -S bytes with SEND_WITH_IMM, the immediate data being its own
QPN; the server receives them all (each behind the 40 bytes a UD receive
keeps for the GRH) and answers with -C datagrams to the QPN of that
immediate. Either side can be the stock udaddy ("udaddy -b ADDR" serves,
"udaddy -s ADDR" connects). The lines printed are udaddy's.

The message bytes are not checked (udaddy sends whatever its buffer holds);
each datagram's length and immediate data are. -W bounds the connection's
setup and each wait for datagrams; the server waits for its client without
a limit.

Exit status: 0 when all datagrams went both ways, 1 otherwise (no server
there, refused, a datagram missing), 2 for bad usage.`,
		Example: `  tbrdma udaddy -b 198.18.0.1                 # server, for "udaddy -s 198.18.0.1"
  tbrdma udaddy -b 198.18.0.1 -s 198.18.0.2   # client of "udaddy -b 198.18.0.2"
  tbrdma udaddy -C 100 -S 1000 198.18.0.2`,
		Args:              maxArgs(1),
		ValidArgsFunction: completePeers(f),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				if opts.Server != "" && opts.Server != args[0] {
					return FlagErrorf("two servers: -s %s and the argument %s", opts.Server, args[0])
				}
				opts.Server = args[0]
			}
			opts.IO = f.IO
			opts.OpenDevice = f.OpenDevice
			if err := opts.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runUdaddy(c.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Server, "server", "s", "", "connect to the udaddy server at `address` (as the argument)")
	_ = cmd.RegisterFlagCompletionFunc("server", completePeerFlag(f))
	fl.StringVarP(&opts.Bind, "bind", "b", "", "local IP `address` (the server's listening address; default for a client: the kernel's source address for the server)")
	fl.IntVarP(&opts.Count, "count", "C", udaddyDefaultCount, "number of datagrams each way (0: connect only)")
	fl.IntVarP(&opts.Size, "size", "S", udaddyDefaultSize, "datagram size in bytes, at most the port's active MTU (0: connect only)")
	fl.IntVarP(&opts.Port, "port", "p", udaddyDefaultPort, "rdma_cm `port` (udaddy's is fixed: 7174; its -p is a port space)")
	fl.VarP(newSecondsFlag(&opts.Timeout, 60), "timeout", "W", "wait at most `seconds` for the connection and for each side's datagrams")
	return cmd
}

func (o *udaddyOptions) check() error {
	var err error
	if o.bind, err = parseBind(o.Bind); err != nil {
		return FlagErrorf("invalid -b %q: want a local IP address", o.Bind)
	}
	if o.Server == "" && !o.bind.IsValid() {
		return FlagErrorf("the server needs -b: the local IP address to listen on (or give a server to connect to)")
	}
	if o.Count < 0 || o.Count > 1<<16 {
		return FlagErrorf("invalid -C %d: want 0..65536", o.Count)
	}
	if o.Size < 0 || o.Size > 4096 {
		return FlagErrorf("invalid -S %d: want 0..4096 (one packet, at most the port's active MTU)", o.Size)
	}
	if o.Port < 1 || o.Port > 65535 {
		return FlagErrorf("invalid -p %d: want 1..65535", o.Port)
	}
	if !(o.Timeout > 0) || o.Timeout > 1e6 || math.IsInf(o.Timeout, 0) {
		return FlagErrorf("invalid -W %v: want seconds, more than 0", o.Timeout)
	}
	o.timeout = time.Duration(o.Timeout * float64(time.Second))
	return nil
}

// messages is the number of datagrams each way: none when -C or -S is 0
// (udaddy's create_message).
func (o *udaddyOptions) messages() int {
	if o.Size == 0 {
		return 0
	}
	return o.Count
}

// udaddyNode is one end's UD resources: its QP lives on the rdma_cm ID.
type udaddyNode struct {
	id   *rdmacm.ID
	pd   *verbs.PD
	ch   *verbs.CompChannel
	cq   *verbs.CQ
	mr   *verbs.MR
	ah   *verbs.AH
	n    int // datagrams each way
	size int
	wc   [8]verbs.WC
}

// udaddySend and udaddyRecv are the work request IDs.
const (
	udaddySend = 1
	udaddyRecv = 2
)

// newUdaddyNode creates the UD QP of id with queues for n datagrams each
// way, one buffer (GRH room + message) shared by every receive, as udaddy
// does, and posts the n receives.
func newUdaddyNode(id *rdmacm.ID, n, size int) (*udaddyNode, error) {
	vctx := id.VerbsContext()
	if mtu := vctx.ActiveMTU().Bytes(); n > 0 && size > mtu {
		return nil, fmt.Errorf("message size %d is larger than the active MTU %d: use -S %d or less", size, mtu, mtu)
	}
	nd := &udaddyNode{id: id, n: n, size: size}
	var err error
	if nd.pd, err = vctx.AllocPD(); err != nil {
		return nil, err
	}
	if nd.ch, err = vctx.CreateCompChannel(); err != nil {
		return nil, err
	}
	if nd.cq, err = vctx.CreateCQ(max(2*n, 2), nd.ch); err != nil {
		return nil, err
	}
	depth := max(n, 1)
	if _, err = id.CreateQP(nd.pd, &verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: nd.cq, RecvCQ: nd.cq,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if n == 0 {
		return nd, nil
	}
	// Receives land at 0 (GRH, then the message); sends go from behind
	// them, so a reply never carries what was just received.
	buf := make([]byte, 2*(udaddyGRH+size))
	for i := range size {
		buf[udaddyGRH+size+i] = byte(i)
	}
	if nd.mr, err = nd.pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	for range n {
		if _, err := id.QP().PostRecv(verbs.RecvWR{WRID: udaddyRecv, SGList: []verbs.SGE{nd.mr.SGE(0, udaddyGRH+size)}}); err != nil {
			return nil, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return nd, nil
}

// close releases the node's objects, each after those that use it.
func (nd *udaddyNode) close() {
	if nd.id.QP() != nil {
		nd.id.DestroyQP()
	}
	if nd.mr != nil {
		nd.mr.Deregister()
	}
	if nd.ah != nil {
		nd.ah.Close()
	}
	if nd.cq != nil {
		nd.cq.Close()
	}
	if nd.ch != nil {
		nd.ch.Close()
	}
	if nd.pd != nil {
		nd.pd.Close()
	}
}

// sendAll posts the n datagrams to qpn through the node's AH, each with
// the node's QPN as immediate data.
func (nd *udaddyNode) sendAll(qpn verbs.QPN, qkey verbs.QKey) error {
	qp := nd.id.QP()
	for range nd.n {
		if _, err := qp.PostSend(verbs.SendWR{WRID: udaddySend, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
			ImmData: uint32(qp.QPN()), SGList: []verbs.SGE{nd.mr.SGE(udaddyGRH+nd.size, nd.size)},
			AH: nd.ah, RemoteQPN: qpn, RemoteQKey: qkey}); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// udaddyCounts are the completions seen so far; imm is the first
// receive's immediate data.
type udaddyCounts struct {
	sent, received int
	imm            uint32
}

// poll waits until done(c) holds, counting completions; every receive
// must hold the GRH room plus a message of the node's size, with
// immediate data (the sender's QPN), the same in all of them.
func (nd *udaddyNode) poll(ctx context.Context, c *udaddyCounts, done func(*udaddyCounts) bool) error {
	for !done(c) {
		n, err := nd.cq.Wait(ctx, nd.wc[:])
		if err != nil {
			return err
		}
		for _, wc := range nd.wc[:n] {
			if err := wc.Err(); err != nil {
				if wc.Status == verbs.WCLocLenErr && wc.Opcode == verbs.WCRecv {
					return fmt.Errorf("%w: a datagram larger than the %d bytes of -S %d and the GRH: does the peer use the same -S?", err, udaddyGRH+nd.size, nd.size)
				}
				return err
			}
			switch wc.Opcode {
			case verbs.WCSend:
				c.sent++
			case verbs.WCRecv:
				if int(wc.ByteLen) != udaddyGRH+nd.size {
					return fmt.Errorf("datagram %d: %d bytes, want %d (the GRH's 40 and -S %d): does the peer use the same -S?", c.received+1, wc.ByteLen, udaddyGRH+nd.size, nd.size)
				}
				if wc.Flags&verbs.WCFlagWithImm == 0 {
					return fmt.Errorf("datagram %d came without immediate data: the peer does not speak udaddy's protocol", c.received+1)
				}
				if c.received == 0 {
					c.imm = wc.ImmData
				} else if wc.ImmData != c.imm {
					return fmt.Errorf("datagram %d: immediate data %#x, the first had %#x (the sender's QPN)", c.received+1, wc.ImmData, c.imm)
				}
				c.received++
			default:
				return fmt.Errorf("unexpected completion %v", wc.Opcode)
			}
		}
	}
	return nil
}

// within runs f with the -W limit; a deadline reached says what was
// waited for and what to check.
func (o *udaddyOptions) within(ctx context.Context, what, hint string, f func(context.Context) error) error {
	c, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	err := f(c)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return &udaddyTimeoutError{fmt.Sprintf("no %s within %v (-W): %s", what, o.timeout, hint)}
	}
	return err
}

// udaddyTimeoutError is a -W limit reached; its message is complete.
type udaddyTimeoutError struct{ msg string }

func (e *udaddyTimeoutError) Error() string { return e.msg }

// nextEvent returns the next rdma_cm event, which must be want; any other
// is reported as udaddy reports it.
func nextEvent(ctx context.Context, ch *rdmacm.EventChannel, want rdmacm.EventType) (*rdmacm.Event, error) {
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	if ev.Type != want {
		return ev, &udaddyEventError{ev: ev, want: want}
	}
	return ev, nil
}

// udaddyEventError is an rdma_cm event other than the one awaited.
type udaddyEventError struct {
	ev   *rdmacm.Event
	want rdmacm.EventType
}

func (e *udaddyEventError) Error() string {
	s := fmt.Sprintf("event %v (status %d) while waiting for %v", e.ev.Type, e.ev.Status, e.want)
	if e.ev.Err != nil {
		s += ": " + e.ev.Err.Error()
	}
	return s
}

func runUdaddy(ctx context.Context, o *udaddyOptions) error {
	out := o.IO.Out
	var err error
	if o.Server == "" {
		err = udaddyServer(ctx, o, out)
	} else {
		err = udaddyClient(ctx, o, out)
	}
	fmt.Fprintln(out, "test complete")
	status := 0
	if err != nil {
		status = 1
		var ee *udaddyEventError
		if errors.As(err, &ee) && ee.ev.Status != 0 {
			status = ee.ev.Status
		}
	}
	fmt.Fprintf(out, "return status %d\n", status)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func udaddyServer(ctx context.Context, o *udaddyOptions, out io.Writer) error {
	fmt.Fprintln(out, "udaddy: starting server")
	dev, err := o.OpenDevice(o.bind)
	if err != nil {
		return err
	}
	defer dev.Close()
	ch, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return err
	}
	defer ch.Destroy()
	lid, err := ch.CreateID(dev, rdmacm.PSUDP)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	local := netip.AddrPortFrom(o.bind, uint16(o.Port))
	if err := lid.Bind(local); err != nil {
		return fmt.Errorf("udaddy: bind %v: %w (is another udaddy server on this address and port?)", local, err)
	}
	if err := lid.Listen(0); err != nil {
		return fmt.Errorf("udaddy: listen on %v: %w", local, err)
	}
	fmt.Fprintf(o.IO.ErrOut, "tbrdma udaddy: listening on %v port %d (rdma_cm, RDMA_PS_UDP)\n", o.bind, o.Port)
	if o.Listening != nil {
		o.Listening(local)
	}
	var req *rdmacm.Event
	for req == nil {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return err
		}
		if ev.Type == rdmacm.EventConnectRequest {
			req = ev
		}
	}
	defer req.ID.Destroy()
	nd, err := newUdaddyNode(req.ID, o.messages(), o.Size)
	if err == nil {
		defer nd.close()
		nd.ah, err = nd.pd.CreateAH(req.UD.AH)
	}
	if err != nil {
		fmt.Fprintln(out, "udaddy: failing connection request")
		req.ID.Reject(nil)
		return err
	}
	if err := req.ID.Accept(nil); err != nil {
		return fmt.Errorf("udaddy: failure accepting: %w", err)
	}
	if nd.n == 0 {
		return nil
	}
	fmt.Fprintln(out, "receiving data transfers")
	var c udaddyCounts
	if err := o.within(ctx, "datagrams from the client", "is the client still running, with the same -C and -S?", func(ctx context.Context) error {
		return nd.poll(ctx, &c, func(c *udaddyCounts) bool { return c.received == nd.n })
	}); err != nil {
		return fmt.Errorf("%w (%d of %d datagrams received)", err, c.received, nd.n)
	}
	// The replies go to the QPN of the immediate data, with our own Q_Key
	// (udaddy's create_reply_ah), through the path the SIDR_REQ came by.
	fmt.Fprintln(out, "sending replies")
	if err := nd.sendAll(verbs.QPN(c.imm), nd.id.QP().Query().QKey); err != nil {
		return err
	}
	if err := o.within(ctx, "send completions", "the device did not complete the sends; run with --debug", func(ctx context.Context) error {
		return nd.poll(ctx, &c, func(c *udaddyCounts) bool { return c.sent == nd.n })
	}); err != nil {
		return err
	}
	fmt.Fprintln(out, "data transfers complete")
	return nil
}

func udaddyClient(ctx context.Context, o *udaddyOptions, out io.Writer) error {
	fmt.Fprintln(out, "udaddy: starting client")
	addr, dev, err := openForPeer(ctx, "udaddy", o.Server, o.bind, o.Resolve, o.Source, o.OpenDevice)
	if err != nil {
		return err
	}
	defer dev.Close()
	ch, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return err
	}
	defer ch.Destroy()
	id, err := ch.CreateID(dev, rdmacm.PSUDP)
	if err != nil {
		return err
	}
	defer id.Destroy()
	peer := netip.AddrPortFrom(addr, uint16(o.Port))
	fmt.Fprintln(out, "udaddy: connecting")
	var nd *udaddyNode
	var est *rdmacm.Event
	err = o.within(ctx, "answer from "+peer.String(), "is rdma_rxe or tbrdma running there, on UDP port 4791, with a udaddy server (a longer -W may help)?", func(ctx context.Context) error {
		if err := id.ResolveAddr(peer.String(), 2*time.Second); err != nil {
			return err
		}
		if _, err := nextEvent(ctx, ch, rdmacm.EventAddrResolved); err != nil {
			return err
		}
		if err := id.ResolveRoute(2 * time.Second); err != nil {
			return err
		}
		if _, err := nextEvent(ctx, ch, rdmacm.EventRouteResolved); err != nil {
			return err
		}
		var err error
		if nd, err = newUdaddyNode(id, o.messages(), o.Size); err != nil {
			return err
		}
		if err := id.Connect(nil); err != nil {
			return err
		}
		est, err = nextEvent(ctx, ch, rdmacm.EventEstablished)
		return err
	})
	if nd != nil {
		defer nd.close()
	}
	if err != nil {
		var ee *udaddyEventError
		if errors.As(err, &ee) {
			fmt.Fprintf(out, "udaddy: event: %v, error: %d\n", ee.ev.Type, ee.ev.Status)
			return udaddyConnectError(peer, ee.ev)
		}
		var te *udaddyTimeoutError
		if errors.As(err, &te) {
			return err
		}
		return fmt.Errorf("connect to %v: %w", peer, err)
	}
	if nd.ah, err = nd.pd.CreateAH(est.UD.AH); err != nil {
		return fmt.Errorf("udaddy: failure creating address handle: %w", err)
	}
	if nd.n == 0 {
		return nil
	}
	fmt.Fprintln(out, "initiating data transfers")
	if err := nd.sendAll(est.UD.QPN, est.UD.QKey); err != nil {
		return err
	}
	fmt.Fprintln(out, "receiving data transfers")
	var c udaddyCounts
	if err := o.within(ctx, "replies from the server", "is the server still running, with the same -C and -S?", func(ctx context.Context) error {
		return nd.poll(ctx, &c, func(c *udaddyCounts) bool { return c.received == nd.n && c.sent == nd.n })
	}); err != nil {
		return fmt.Errorf("%w (%d of %d replies received)", err, c.received, nd.n)
	}
	if verbs.QPN(c.imm) != est.UD.QPN {
		return fmt.Errorf("the replies carry immediate data %#x, not the server's QPN %#x from its SIDR_REP", c.imm, uint32(est.UD.QPN))
	}
	fmt.Fprintln(out, "data transfers complete")
	return nil
}

// udaddyConnectError explains a failed service ID resolution.
func udaddyConnectError(peer netip.AddrPort, ev *rdmacm.Event) error {
	where := fmt.Sprintf("%v port %d", peer.Addr(), peer.Port())
	var se *rdmacm.SIDRError
	switch {
	case errors.Is(ev.Err, rdmacm.ErrAuthFailed):
		return fmt.Errorf("%s: %w", where, ev.Err)
	case errors.As(ev.Err, &se) && se.Status == rdmacm.SIDRUnsupported:
		return fmt.Errorf("no udaddy server on %s (SIDR_REP: %v) — is `udaddy -b %v` or `tbrdma udaddy -b %v` running there?", where, se.Status, peer.Addr(), peer.Addr())
	case errors.As(ev.Err, &se):
		return fmt.Errorf("%s refused the connection: %v (SIDR status %d)", where, se.Status, uint8(se.Status))
	}
	if msg, ok := unreachableText(ev.Err, fmt.Sprintf("`tbrdma udaddy -b %v` (or `udaddy -b %v`)", peer.Addr(), peer.Addr())); ok {
		return errors.New(msg)
	}
	if ev.Type == rdmacm.EventUnreachable {
		return fmt.Errorf("no answer from %s to the SIDR_REQ: is rdma_rxe or tbrdma running there, on UDP port 4791, with a udaddy server?", where)
	}
	return fmt.Errorf("connect to %s: %v", where, &udaddyEventError{ev: ev, want: rdmacm.EventEstablished})
}
