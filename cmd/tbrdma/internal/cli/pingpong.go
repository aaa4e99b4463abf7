package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/verbs"
)

type pingpongOptions struct {
	IO         *ui.IO
	Now        func() time.Time
	OpenDevice func(netip.Addr) (*verbs.Context, error)
	// Listening, if set, is called when a server's TCP listener is up.
	Listening func(net.Addr)

	Peer    string
	Port    int
	Device  string
	IBPort  int
	Size    int
	MTU     int
	RxDepth int
	Iters   int
	SL      int
	GIDIdx  int
	Chk     bool
	Events  bool
	Bind    string
	Timeout time.Duration

	bind netip.Addr
	mtu  verbs.MTU
}

// Work request IDs of ibv_rc_pingpong.
const (
	pingpongRecvWRID = 1
	pingpongSendWRID = 2
)

func newCmdPingpong(f *Factory, runF func(*pingpongOptions) error) *cobra.Command {
	opts := &pingpongOptions{IO: f.IO, Now: f.Now}
	cmd := &cobra.Command{
		Use:   "pingpong [flags] [peer]",
		Short: "RC SEND ping-pong, compatible with ibv_rc_pingpong",
		Long: `Run an RC SEND/RECV ping-pong like ibv_rc_pingpong, with its flags, its TCP
exchange of QP addresses and its output, so either side may be the stock tool
on a Linux rdma_rxe (or RoCE) host. Without a peer tbrdma is the server and
waits for one client; with a peer it is the client.

The local RoCE address (UDP 4791 and the GID) is --bind when given, else the
address of our end of the TCP connection: the one the peer reached, for a
server, or the one the kernel routes to the peer from, for a client. A server
without --bind listens for TCP on every address.

-d takes an IP address as --bind does; a device name (rxe0) is accepted and
ignored. -g is accepted for compatibility: tbrdma has one GID, the address.
The stock tool needs -g on RoCE links (rxe), or it sends no GID.`,
		Example: `  tbrdma pingpong --bind 198.18.0.1 -n 20 -s 64           # server
  ibv_rc_pingpong -d rxe0 -g 1 -n 20 -s 64 198.18.0.1      # the stock client
  tbrdma pingpong -g 1 -n 20 -s 64 198.18.0.2             # client of a stock server`,
		Args: maxArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Peer = args[0]
			}
			opts.OpenDevice = f.OpenDevice
			if err := opts.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runPingpong(c.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&opts.Port, "port", "p", 18515, "listen on/connect to TCP `port`")
	fl.StringVarP(&opts.Device, "ib-dev", "d", "", "`device`: an IP address is used as --bind; a name is ignored")
	fl.IntVarP(&opts.IBPort, "ib-port", "i", 1, "use `port` of the device (tbrdma has port 1 only)")
	fl.IntVarP(&opts.Size, "size", "s", 4096, "size of message to exchange")
	fl.IntVarP(&opts.MTU, "mtu", "m", 1024, "path MTU (256, 512, 1024, 2048 or 4096)")
	fl.IntVarP(&opts.RxDepth, "rx-depth", "r", 500, "number of receives to post at a time")
	fl.IntVarP(&opts.Iters, "iters", "n", 1000, "number of exchanges")
	fl.IntVarP(&opts.SL, "sl", "l", 0, "service level value (not used on RoCEv2)")
	fl.BoolVarP(&opts.Events, "events", "e", false, "sleep on CQ events (default poll)")
	fl.IntVarP(&opts.GIDIdx, "gid-idx", "g", -1, "local port GID `index` (accepted; tbrdma's only GID is its address)")
	fl.BoolVarP(&opts.Chk, "chk", "c", false, "validate received buffer")
	fl.StringVar(&opts.Bind, "bind", "", "local IP `address` for RoCE (UDP 4791) and the TCP exchange")
	fl.DurationVar(&opts.Timeout, "timeout", 0, "give up after this long (0: never)")
	return cmd
}

func (o *pingpongOptions) check() error {
	var err error
	if o.bind, err = parseBind(o.Bind, o.Device); err != nil {
		return err
	}
	switch o.MTU {
	case 256, 512, 1024, 2048, 4096:
		o.mtu = verbs.MTUForLink(o.MTU + 80)
	default:
		return FlagErrorf("invalid -m %d: want 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	if o.IBPort != 1 {
		return FlagErrorf("invalid -i %d: tbrdma devices have port 1 only", o.IBPort)
	}
	if err := checkPort(o.Port, o.Peer); err != nil {
		return err
	}
	if o.Size < 0 || o.Size > verbs.MaxMessageSize {
		return FlagErrorf("invalid -s %d", o.Size)
	}
	if o.RxDepth < 1 || o.RxDepth > verbs.MaxQPWR {
		return FlagErrorf("invalid -r %d: want 1..%d", o.RxDepth, verbs.MaxQPWR)
	}
	if o.Iters < 1 {
		return FlagErrorf("invalid -n %d", o.Iters)
	}
	return nil
}

// pingpong is one side's resources.
type pingpong struct {
	o     *pingpongOptions
	dev   *verbs.Context
	mr    *verbs.MR
	buf   []byte
	qp    *verbs.QP
	w     perf.Waiter
	my    perf.PingpongDest
	peer  netip.Addr // the TCP peer, used when the remote sends no GID
	routs int
}

func runPingpong(ctx context.Context, o *pingpongOptions) error {
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	err := pingpongRun(ctx, o)
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %v", o.Timeout)
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return errInterrupted
	}
	return err
}

func pingpongRun(ctx context.Context, o *pingpongOptions) error {
	pp := &pingpong{o: o}
	defer pp.close()
	out := o.IO.Out
	server := o.Peer == ""

	// A server with --bind opens its device first and prints its address
	// before waiting, as ibv_rc_pingpong does; otherwise the address is
	// known only once the TCP connection is up.
	if server && o.bind.IsValid() {
		if err := pp.open(o.bind); err != nil {
			return err
		}
	}
	var conn net.Conn
	var err error
	if server {
		conn, err = listenOne(ctx, o.bind, o.Port, o.Listening)
	} else {
		conn, err = dial(ctx, o.Peer, o.bind, o.Port)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := closeOnCancel(ctx, conn)
	defer stop()
	pp.peer = remoteAddr(conn)
	if pp.dev == nil {
		if err := pp.open(localAddr(conn)); err != nil {
			return err
		}
	}

	var rem perf.PingpongDest
	if server {
		rem, err = perf.PingpongServerExchange(conn, pp.my, pp.connect)
	} else {
		rem, err = perf.PingpongClientExchange(conn, pp.my)
		if err == nil {
			err = pp.connect(rem)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	conn.Close()
	fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.LID, rem.QPN, rem.PSN, rem.GIDString())

	return pp.loop(ctx, !server)
}

// open creates the device and the QP on addr and posts the receives.
func (pp *pingpong) open(addr netip.Addr) error {
	o := pp.o
	dev, err := o.OpenDevice(addr)
	if err != nil {
		return err
	}
	pp.dev = dev
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	pp.buf = make([]byte, max(o.Size, 1))
	for i := range pp.buf {
		pp.buf[i] = 0x7b
	}
	if o.Chk && o.Peer != "" {
		page := os.Getpagesize()
		for i := 0; i < o.Size; i += page {
			pp.buf[i] = 0 // (i / page_size) % sizeof(char), as the stock tool writes it
		}
	}
	if pp.mr, err = pd.RegMR(pp.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	ch, err := dev.CreateCompChannel()
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(o.RxDepth+1, ch)
	if err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	pp.w = perf.Waiter{CQ: cq, Ch: ch, Spin: perf.DefaultSpin}
	if o.Events {
		pp.w.Spin = 0
	}
	pp.qp, err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	if err := pp.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: uint8(o.IBPort)},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("failed to modify QP to INIT: %w", err)
	}
	if pp.routs = pp.postRecv(o.RxDepth); pp.routs < o.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", pp.routs)
	}
	pp.my = perf.PingpongDest{QPN: uint32(pp.qp.QPN()), PSN: rand.Uint32() & 0xFFFFFF, GID: dev.GID()}
	fmt.Fprintf(o.IO.Out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", pp.my.LID, pp.my.QPN, pp.my.PSN, pp.my.GIDString())
	return nil
}

func (pp *pingpong) postRecv(n int) int {
	for i := range n {
		if _, err := pp.qp.PostRecv(verbs.RecvWR{WRID: pingpongRecvWRID, SGList: []verbs.SGE{pp.mr.SGE(0, pp.o.Size)}}); err != nil {
			return i
		}
	}
	return n
}

func (pp *pingpong) postSend() error {
	_, err := pp.qp.PostSend(verbs.SendWR{WRID: pingpongSendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{pp.mr.SGE(0, pp.o.Size)}})
	if err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// connect moves the QP to RTR and RTS with ibv_rc_pingpong's attributes.
func (pp *pingpong) connect(rem perf.PingpongDest) error {
	o := pp.o
	dgid := verbs.GID(rem.GID)
	if [8]byte(rem.GID[8:]) == [8]byte{} {
		// The stock tool without -g sends no GID (and would use no GRH);
		// RoCEv2 needs an IP address, so take the TCP peer's.
		dgid = verbs.GID(pp.peer.As16())
	}
	sgid := uint8(0)
	if o.GIDIdx > 0 {
		sgid = uint8(o.GIDIdx)
	}
	err := pp.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: o.mtu, DestQPN: verbs.QPN(rem.QPN),
		RQPSN: verbs.PSN(rem.PSN), MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AH: verbs.AHAttr{DGID: dgid, SGIDIndex: sgid, HopLimit: 1, PortNum: uint8(o.IBPort)}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	err = pp.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		SQPSN: verbs.PSN(pp.my.PSN), MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	return nil
}

// loop is ibv_rc_pingpong's main loop: each side sends its next message
// only when its previous SEND has completed and a message has arrived.
func (pp *pingpong) loop(ctx context.Context, client bool) error {
	o := pp.o
	pending := pingpongRecvWRID
	if client {
		if err := pp.postSend(); err != nil {
			return err
		}
		pending |= pingpongSendWRID
	}
	start := o.Now()
	rcnt, scnt := 0, 0
	for rcnt < o.Iters || scnt < o.Iters {
		wcs, err := pp.w.Wait(ctx)
		if err != nil {
			return err
		}
		for i := range wcs {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				fmt.Fprintf(o.IO.ErrOut, "Failed status %s (%d) for wr_id %d\n", wc.Status, wc.Status, wc.WRID)
				return errSilent
			}
			switch wc.WRID {
			case pingpongSendWRID:
				scnt++
			case pingpongRecvWRID:
				if pp.routs--; pp.routs <= 1 {
					pp.routs += pp.postRecv(o.RxDepth - pp.routs)
					if pp.routs < o.RxDepth {
						fmt.Fprintf(o.IO.ErrOut, "Couldn't post receive (%d)\n", pp.routs)
						return errSilent
					}
				}
				rcnt++
			default:
				fmt.Fprintf(o.IO.ErrOut, "Completion for unknown wr_id %d\n", wc.WRID)
				return errSilent
			}
			pending &^= int(wc.WRID)
			if scnt < o.Iters && pending == 0 {
				if err := pp.postSend(); err != nil {
					return err
				}
				pending = pingpongRecvWRID | pingpongSendWRID
			}
		}
	}
	elapsed := o.Now().Sub(start)
	printPingpongResult(o.IO.Out, o.Size, o.Iters, elapsed)
	if o.Chk && !client {
		page := os.Getpagesize()
		for i := 0; i < o.Size; i += page {
			if pp.buf[i] != 0 {
				fmt.Fprintf(o.IO.Out, "invalid data in page %d\n", i/page)
			}
		}
	}
	return nil
}

// printPingpongResult prints ibv_rc_pingpong's two result lines. Like the C
// tool it counts both directions and holds the microseconds in a float32.
func printPingpongResult(w io.Writer, size, iters int, elapsed time.Duration) {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	fmt.Fprintf(w, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(w, "%d iters in %.2f seconds = %.2f usec/iter\n", iters, float64(usec)/1e6, float64(usec/float32(iters)))
}

func (pp *pingpong) close() {
	if pp.dev != nil {
		pp.dev.Close()
	}
}
