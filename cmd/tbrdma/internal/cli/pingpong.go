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
	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/verbs"
)

type pingpongOptions struct {
	IO         *ui.IO
	Now        func() time.Time
	OpenDevice func(netip.Addr) (*verbs.Context, error)
	// Listening, if set, is called when a server's TCP listener is up.
	Listening func(net.Addr)
	// Inspect, if set, sees the buffer after a successful run (tests).
	Inspect func(buf []byte)

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
	UD      bool // ibv_ud_pingpong's UD SEND ping-pong instead of RC
	Bind    string
	Timeout time.Duration
	// AnyInterface lets a server without --bind answer a client that
	// reaches it on an interface that is not Thunderbolt (iface.go).
	AnyInterface bool

	bind netip.Addr
	mtu  verbs.MTU
	// device is the device -d named (nil: none, or an address).
	device *verbs.Device
}

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
without --bind listens for TCP on every address but answers only a client
that reaches it on a Thunderbolt interface (or loopback); it refuses others
with a line on stderr and waits on. --any-interface answers any interface.

-d takes a device name "tbrdma devices" lists (tb_thunderbolt0, or the
netdev thunderbolt0), whose first address becomes the local address unless
--bind is given, or an IP address, as --bind does; another name (a kernel
device such as rxe0) is refused with the list of devices. -g must be an
index of the device's GID table (tbrdma devices -v); the GID used is the
local address's. The stock tool needs -g on RoCE links (rxe), or it sends no
GID. A server that knows its address (--bind, -d) opens its device, and
checks that its port is active, before it waits for a client.

A client gives up connecting after 10s (no answer: the peer is down, or a
firewall drops the connection); a refusal (nothing listens on -p) or an
unreachable network fails at once, naming the peer and the cause.

--ud runs ibv_ud_pingpong's test instead: a UD QP (Q_Key 0x11111111), the
same TCP exchange and output lines, messages of -s bytes (default 1024) that
must fit in one packet (at most the port's active MTU), each received behind
the 40 bytes the device reserves for the GRH.`,
		Example: `  tbrdma pingpong --bind 198.18.0.1 -n 20 -s 64           # server
  ibv_rc_pingpong -d rxe0 -g 1 -n 20 -s 64 198.18.0.1      # the stock client
  tbrdma pingpong -g 1 -n 20 -s 64 198.18.0.2             # client of a stock server
  tbrdma pingpong --ud --bind 198.18.0.1 -n 20            # server for ibv_ud_pingpong -g 1 ...`,
		Args:              maxArgs(1),
		ValidArgsFunction: completePeers(f),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Peer = args[0]
			}
			opts.OpenDevice = f.OpenDevice
			if opts.UD && !c.Flags().Changed("size") {
				opts.Size = udPingpongDefaultSize
			}
			if opts.UD && c.Flags().Changed("mtu") {
				return FlagErrorf("-m does not apply with --ud: ibv_ud_pingpong has no -m, a UD message must fit the port's active MTU")
			}
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
	fl.IntVarP(&opts.Port, "port", "p", 18515, "listen on/connect to TCP `port` (a server's 0: any free port, printed on stderr)")
	fl.StringVarP(&opts.Device, "ib-dev", "d", "", "`device`: a name tbrdma devices lists (its first address is the local address unless --bind is given), or an IP address, used as --bind")
	fl.IntVarP(&opts.IBPort, "ib-port", "i", 1, "use `port` of the device (tbrdma has port 1 only)")
	fl.IntVarP(&opts.Size, "size", "s", 4096, "size of message to exchange (--ud: 1024, at most the port's active MTU)")
	fl.IntVarP(&opts.MTU, "mtu", "m", 1024, "path MTU (256, 512, 1024, 2048 or 4096)")
	fl.IntVarP(&opts.RxDepth, "rx-depth", "r", 500, "number of receives to post at a time")
	fl.IntVarP(&opts.Iters, "iters", "n", 1000, "number of exchanges")
	fl.IntVarP(&opts.SL, "sl", "l", 0, "service level value (not used on RoCEv2)")
	fl.BoolVarP(&opts.Events, "events", "e", false, "sleep on CQ events (default poll)")
	fl.IntVarP(&opts.GIDIdx, "gid-idx", "g", -1, "local port GID `index`: checked against the device's GID table (tbrdma devices -v); the address is the local address")
	fl.BoolVarP(&opts.Chk, "chk", "c", false, "validate received buffer")
	fl.BoolVar(&opts.UD, "ud", false, "UD datagrams, as ibv_ud_pingpong (Q_Key 0x11111111, one packet per message)")
	fl.StringVar(&opts.Bind, "bind", "", "local IP `address` for RoCE (UDP 4791) and the TCP exchange")
	fl.Var(newDurationFlag(&opts.Timeout, 0), "timeout", "give up after this long: seconds or a duration such as 1m30s (0: never)"+connectTimeoutHelp)
	addAnyInterfaceFlag(fl, &opts.AnyInterface)
	return cmd
}

func (o *pingpongOptions) check() error {
	var err error
	if o.bind, err = parseBind(o.Bind); err != nil {
		return err
	}
	if o.bind, o.device, err = resolveDeviceFlag(o.bind, o.Device); err != nil {
		return err
	}
	if err := checkGIDIndex("-g", o.GIDIdx, o.device); err != nil {
		return &FlagError{Err: err}
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
		return FlagErrorf("invalid -s %d: want 0..%d bytes (the largest RDMA message)", o.Size, verbs.MaxMessageSize)
	}
	if o.RxDepth < 1 || o.RxDepth > verbs.MaxQPWR {
		return FlagErrorf("invalid -r %d: want 1..%d", o.RxDepth, verbs.MaxQPWR)
	}
	if o.Iters < 1 {
		return FlagErrorf("invalid -n %d: want 1 or more exchanges", o.Iters)
	}
	return nil
}

// pingpong is one side's resources.
type pingpong struct {
	o    *pingpongOptions
	dev  *verbs.Context
	mr   *verbs.MR
	buf  []byte
	qp   *verbs.QP
	w    perf.Waiter
	my   perf.PingpongDest
	peer netip.Addr // the TCP peer, used when the remote sends no GID
	// data is the data path, made with the buffer (setupBuf).
	data *perf.Pingpong

	// UD (--ud) only.
	pd     *verbs.PD
	off    int       // where messages start in buf: the GRH area's size
	ah     *verbs.AH // the peer's address
	remQPN verbs.QPN

	// shared: dev belongs to "tbrdma serve", which runs this server side
	// for a client (serve_oob.go); close leaves it open.
	shared bool
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
	if limit := verbs.MTU4096.Bytes(); o.UD && o.Size > limit {
		// No port's MTU is larger: fail before connecting, as the stock
		// tool does (open checks the actual port).
		return fmt.Errorf("requested size %d larger than port MTU (at most %d): a UD message is one packet; use -s %d or less", o.Size, limit, limit)
	}

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
		conn, err = listenOneAllowed(ctx, "pingpong", o.bind, o.AnyInterface, o.Port, o.Listening, o.IO.ErrOut)
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
		// A tbrdma client sends its test hint (mismatch.go).
		var hint string
		rem, hint, err = perf.PingpongServerExchangeHint(conn, pp.my, pp.connect)
		if errors.Is(err, perf.ErrNotPingpong) {
			return refuseClient(conn, fmt.Sprintf("the client runs a perftest test (write-bw, read-lat, ...), this server %s: start the client's command as the server, or use tbrdma serve", o.describe()))
		}
		if err == nil && hint != "" {
			if why := pingpongMismatch(o, hint); why != "" {
				return refuseClient(conn, why)
			}
			err = perf.PingpongAccept(conn)
		}
	} else {
		// The hint is for a tbrdma server ("tbrdma serve", serve_oob.go,
		// or a one-test server, mismatch.go), after "done"; a stock
		// server never gets it.
		rem, err = perf.PingpongClientExchangeHint(conn, pp.my, o.hint())
		err = explainClosed(err)
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
	fmt.Fprintln(out, pingpongAddrLine("remote", rem, o.UD))

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
	if err := checkPortActive(dev); err != nil {
		return err
	}
	if err := checkGIDIndex("-g", o.GIDIdx, dev.Device()); err != nil {
		return err
	}
	if err := pp.setupQP(); err != nil {
		return err
	}
	if err := pp.setupBuf(); err != nil {
		return err
	}
	fmt.Fprintln(o.IO.Out, pingpongAddrLine("local", pp.my, o.UD))
	return nil
}

// setupQP makes the PD, the CQ and the QP (in INIT) on pp.dev, and our
// address.
func (pp *pingpong) setupQP() error {
	o := pp.o
	dev := pp.dev
	if o.UD {
		if mtu := dev.ActiveMTU().Bytes(); o.Size > mtu {
			return fmt.Errorf("requested size %d larger than port MTU (%d): a UD message is one packet; use -s %d or less", o.Size, mtu, mtu)
		}
		pp.off = udGRHSize
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	pp.pd = pd
	ch, err := dev.CreateCompChannel()
	if err != nil {
		return err
	}
	pp.w.Ch = ch
	cq, err := dev.CreateCQ(o.RxDepth+1, ch)
	if err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	pp.w = perf.Waiter{CQ: cq, Ch: ch, Spin: perf.DefaultSpin}
	if o.Events {
		pp.w.Spin = 0
		if _, err := hooks.Of(dev).SetKernelWait(perf.KernelWaitWindow); err != nil {
			return err
		}
	}
	typ := verbs.QPTypeRC
	if o.UD {
		typ = verbs.QPTypeUD
	}
	pp.qp, err = pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	if o.UD {
		err = pp.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: uint8(o.IBPort), QKey: udPingpongQKey},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
	} else {
		err = pp.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: uint8(o.IBPort)},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	}
	if err != nil {
		return fmt.Errorf("failed to modify QP to INIT: %w", err)
	}
	pp.my = perf.PingpongDest{QPN: uint32(pp.qp.QPN()), PSN: rand.Uint32() & 0xFFFFFF, GID: dev.GID()}
	return nil
}

// setupBuf makes the buffer of -s bytes and its MR, and posts the
// receives.
func (pp *pingpong) setupBuf() error {
	o := pp.o
	pp.buf = make([]byte, max(pp.off+o.Size, 1))
	for i := range pp.buf {
		pp.buf[i] = 0x7b
	}
	if o.Chk && o.Peer != "" {
		page := os.Getpagesize()
		for i := 0; i < o.Size; i += page {
			pp.buf[pp.off+i] = 0 // (i / page_size) % sizeof(char), as the stock tool writes it
		}
	}
	var err error
	if pp.mr, err = pp.pd.RegMR(pp.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	pp.data = &perf.Pingpong{QP: pp.qp, MR: pp.mr, W: &pp.w, Off: pp.off, Size: o.Size, RxDepth: o.RxDepth}
	return pp.data.PostRecvs()
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
	if o.UD {
		return pp.connectUD(rem, dgid, sgid)
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

// loop runs the ping-pong (perf.Pingpong.Run) and prints the result;
// -c checks the server's buffer.
func (pp *pingpong) loop(ctx context.Context, client bool) error {
	o := pp.o
	d := pp.data
	if pp.ah != nil {
		d.AH, d.RemoteQPN, d.QKey = pp.ah, pp.remQPN, udPingpongQKey
	}
	d.Iters, d.Now, d.ErrOut = o.Iters, o.Now, o.IO.ErrOut
	elapsed, err := d.Run(ctx, client)
	if err != nil {
		return err
	}
	printPingpongResult(o.IO.Out, o.Size, o.Iters, elapsed)
	if o.Inspect != nil {
		o.Inspect(pp.buf)
	}
	if o.Chk && !client {
		page := os.Getpagesize()
		for i := 0; i < o.Size; i += page {
			if pp.buf[pp.off+i] != 0 {
				fmt.Fprintf(o.IO.Out, "invalid data in page %d\n", i/page)
			}
		}
	}
	return nil
}

// pingpongAddrLine formats the "local address:" or "remote address:" line
// of ibv_rc_pingpong, or of ibv_ud_pingpong (ud), whose local line has a
// colon before "GID" where the others have a comma.
func pingpongAddrLine(side string, d perf.PingpongDest, ud bool) string {
	sep := ","
	if ud && side == "local" {
		sep = ":"
	}
	return fmt.Sprintf("  %-15s LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s", side+" address:", d.LID, d.QPN, d.PSN, sep, d.GIDString())
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
	if pp.shared {
		// The device is serve's: release only what the run made.
		if pp.qp != nil {
			pp.qp.Close()
		}
		if pp.mr != nil {
			pp.mr.Deregister()
		}
		if pp.ah != nil {
			pp.ah.Close()
		}
		if pp.w.CQ != nil {
			pp.w.CQ.Close() // after the QP that uses it
		}
		if pp.w.Ch != nil {
			pp.w.Ch.Close()
		}
		if pp.pd != nil {
			pp.pd.Close() // after the QP, MR and AH made on it
		}
		return
	}
	if pp.dev != nil {
		pp.dev.Close()
	}
}
