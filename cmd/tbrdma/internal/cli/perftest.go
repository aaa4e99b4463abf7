package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/jsonout"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/verbs"
)

// perftestKind describes one perftest-compatible command (readlat.go,
// atomiclat.go, writelat.go, sendlat.go, writebw.go, readbw.go, sendbw.go).
// The commands share flags, the TCP exchange and the QP setup; they differ
// in the verb, the defaults and the number of synchronising handshakes,
// which follow what Debian 12's perftest 4.5 does on the wire.
type perftestKind struct {
	name, stock string
	verb        perf.Verb
	bw          bool
	defSize     int
	defIters    int
}

type perftestOptions struct {
	IO         *ui.IO
	Now        func() time.Time
	OpenDevice func(netip.Addr) (*verbs.Context, error)
	Listening  func(net.Addr)
	// Inspect, if set, sees the registered buffer after a successful run
	// (for tests).
	Inspect func(buf []byte)
	Kind    *perftestKind

	Peer       string
	Port       int
	Device     string
	IBPort     int
	Size       int
	Iters      int
	QPs        int  // -q: QPs in the test (bandwidth tests; 1 for the others)
	Bidir      bool // -b: both sides send at once (bandwidth tests)
	MTU        int
	GIDIdx     int
	Conn       string
	TxDepth    int
	RxDepth    int
	CQMod      int
	QPTimeout  int
	OutReads   int
	AtomicType string
	Events     bool
	All        bool
	CPUFreq    bool
	Bind       string
	Timeout    time.Duration
	JSON       bool // one jsonout.BenchV1 object per result row on stdout
	CSV        bool // a header line and one row per result on stdout
	RDMACM     bool // -R: connect with rdma_cm, exchange over the comm QP
	// LargeSegments offers tbrdma's large-segment extension in the version
	// exchange; SegmentSize is the size offered (0: the largest the link
	// MTU allows).
	LargeSegments bool
	SegmentSize   int
	// CPUProfile, when set (hidden --cpuprofile), is where the run's CPU
	// profile goes (bench/run.sh PROFILE=1 uses it).
	CPUProfile string
	// sizeGiven: -s was on the command line (perftest's req_size): over UD
	// a larger -s than the MTU fails rather than shrinks to it.
	sizeGiven bool
	// udMTU, set once the MTU is agreed with -c UD, bounds the sizes: a UD
	// message is one packet (perftest runs -a up to the MTU).
	udMTU int
	// aliveCheck is send-bw's server wait for the next message over UC
	// and UD (perf.Loop.AliveCheck); 0: perftest's 60 s (tests shorten it).
	aliveCheck time.Duration
	// Trace, when set (hidden --trace), is where the run's execution trace
	// goes (runtime/trace: where the goroutines wait).
	Trace string
	// Duration (-D), Margin (-f), RunInfinitely and ReportGbits are the
	// bandwidth tests' duration mode and unit (perftest_duration.go).
	Duration, Margin           time.Duration
	RunInfinitely, ReportGbits bool

	// Addrs lists the local addresses a -R server without --bind listens
	// on (servingAddrs: the Thunderbolt ones, or with AnyInterface all).
	Addrs func() ([]netip.Addr, error)
	// AnyInterface lets a server without --bind answer on interfaces that
	// are not Thunderbolt (iface.go).
	AnyInterface bool

	reportFlags // perftest_report.go: -I, -l, -H, -U, -C, --out_json

	bind netip.Addr
	// device is the device -d named (nil: none, or an address).
	device *verbs.Device
	// served, set by "tbrdma serve" (serve_oob.go): the client's
	// connection, whose version exchange (with the test hint) is done, and
	// serve's device, which the run shares and leaves open.
	served *servedTest
	// wrapConn, if set, wraps the TCP connection (tests record the
	// exchange with it); wrapMsg does the same for -R's comm QP.
	wrapConn func(net.Conn) net.Conn
	wrapMsg  func(perf.MsgConn) perf.MsgConn
}

func newCmdPerftest(f *Factory, k *perftestKind, runF func(*perftestOptions) error) *cobra.Command {
	opts := &perftestOptions{IO: f.IO, Now: f.Now, Kind: k}
	opts.Addrs = servingAddrsFunc(&opts.AnyInterface)
	qps := ""
	if k.bw {
		qps = `

-q N (--qp) runs N QPs at once, as perftest's -q: -n iterations on each,
one row for all of them. Both ends need the same -q; a different one is
refused at once, by a tbrdma server and in the key exchange alike.

-b (--bidirectional) runs the test in both directions at once, as perftest's
-b: both sides send (write-bw, send-bw) or READ (read-bw), and each prints
one row of both directions' figures added up. Both ends need -b; a tbrdma
server without it refuses a -b client at once, and the other way round.`
	}
	cmd := &cobra.Command{
		Use:   k.name + " [flags] [peer]",
		Short: fmt.Sprintf("%s, compatible with perftest's %s", testTitle(k), k.stock),
		Long: fmt.Sprintf(`Run perftest's %s test over an RC QP%s. Without a peer tbrdma is the
server and waits for one client; with a peer it is the client. Flags, the
TCP exchange on port 18515 and the output are perftest's, so the other side
may be a stock %s on a Linux rdma_rxe (or RoCE) host. tbrdma
announces itself as perftest %s in the exchange, the version Debian 12 ships.

The local RoCE address is --bind (or -d given an IP address), else the address
of our end of the TCP connection. A server without --bind answers only a
client that reaches it on a Thunderbolt interface (or loopback), refusing
others with a line on stderr; --any-interface answers any interface.

-d takes a device name "tbrdma devices" lists (tb_thunderbolt0, or the
netdev thunderbolt0), whose first address becomes the local address unless
--bind is given, or an IP address; another name (a kernel device such as
rxe0) is refused with the list of devices. -x must be an index of the
device's GID table (tbrdma devices -v). A server that knows its address
(--bind, -d) opens its device, and checks that its port is active, before it
waits for a client. A client gives up connecting after 10s, with -R too (no
answer: the peer is down, or a firewall drops it); a refusal (nothing
listens on -p) or an unreachable network fails at once, naming the peer and
the cause.

-R (--rdma_cm) does as perftest -R: no TCP at all; the server listens with
rdma_cm on -p (port space RDMA_PS_TCP), a first connection carries the
exchange in SENDs, a second one is the test's QP. Without --bind a -R server
listens on every up IPv4 address of the Thunderbolt interfaces (with
--any-interface: of every non-loopback interface); a client uses the source
address the kernel routes to the peer from.%s`, k.stock, connLong(k), k.stock, perf.Version, qps),
		Example: fmt.Sprintf(`  %s -d rxe0 -x 1 -F                     # stock server on 198.18.0.2
  tbrdma %s 198.18.0.2                       # tbrdma client`, k.stock, k.name),
		Args:              maxArgs(1),
		ValidArgsFunction: completePeers(f),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Peer = args[0]
			}
			opts.OpenDevice = f.OpenDevice
			if err := opts.check(c); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runPerftest(c.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&opts.Port, "port", "p", 18515, "listen on/connect to `port` (TCP; rdma_cm with -R; a server's 0: any free port, printed on stderr)")
	fl.StringVarP(&opts.Device, "ib-dev", "d", "", "`device`: a name tbrdma devices lists (its first address is the local address unless --bind is given), or an IP address, used as --bind")
	fl.IntVarP(&opts.IBPort, "ib-port", "i", 1, "use `port` of the device (tbrdma has port 1 only)")
	fl.IntVarP(&opts.Size, "size", "s", k.defSize, "size of message to exchange")
	fl.IntVarP(&opts.Iters, "iters", "n", k.defIters, "number of exchanges (at least 5)")
	fl.IntVarP(&opts.MTU, "mtu", "m", 0, "MTU size: 256 - 4096 (default the port's active MTU, 4096)")
	fl.IntVarP(&opts.GIDIdx, "gid-index", "x", 0, "GID `index`: checked against the device's GID table (tbrdma devices -v), sent to the peer; the address is the local address")
	fl.StringVarP(&opts.Conn, "connection", "c", "RC", connHelp(k))
	fl.IntVarP(&opts.QPTimeout, "qp-timeout", "u", 14, "QP timeout: 4.096 µs × 2^`value`")
	fl.BoolVarP(&opts.CPUFreq, "CPU-freq", "F", false, "accepted for compatibility (tbrdma uses the monotonic clock)")
	fl.BoolVarP(&opts.Events, "events", "e", false, "sleep on CQ events (default poll)")
	fl.StringVar(&opts.Bind, "bind", "", "local IP `address` for RoCE (UDP 4791) and the TCP exchange")
	fl.Var(newDurationFlag(&opts.Timeout, 0), "timeout", "give up after this long: seconds or a duration such as 1m30s (0: never)"+connectTimeoutHelp)
	fl.BoolVar(&opts.JSON, "json", false, "print one JSON object per result row (schemaVersion 1, raw units) instead of perftest's output")
	fl.BoolVar(&opts.CSV, "csv", false, "print a CSV header and one line per result row (raw units) instead of perftest's output")
	fl.BoolVarP(&opts.RDMACM, "rdma_cm", "R", false, "connect the QP with rdma_cm on -p (RDMA_PS_TCP) and exchange over rdma_cm, no TCP")
	fl.BoolVar(&opts.LargeSegments, "large-segments", false, "offer tbrdma's large-segment extension (packets up to the link MTU, not 4096 bytes); used only when the peer is a tbrdma that offers it too, else the run uses the path MTU and says so")
	fl.StringVar(&opts.CPUProfile, "cpuprofile", "", "write a CPU profile of the run to `file` (for bench/run.sh)")
	_ = fl.MarkHidden("cpuprofile")
	fl.StringVar(&opts.Trace, "trace", "", "write an execution trace of the run to `file` (go tool trace)")
	_ = fl.MarkHidden("trace")
	addAnyInterfaceFlag(fl, &opts.AnyInterface)
	addReportFlags(fl, opts, k)
	fl.IntVar(&opts.SegmentSize, "segment-size", 0, "segment `bytes` to offer with --large-segments: a multiple of 4096 from 8192 to 61440 (default the largest the link MTU allows)")
	if k.bw {
		fl.IntVarP(&opts.TxDepth, "tx-depth", "t", 128, "size of the send queue")
		fl.IntVarP(&opts.CQMod, "cq-mod", "Q", 100, "generate a completion every `n` messages (1 when size > 8192)")
		fl.IntVarP(&opts.QPs, "qp", "q", 1, fmt.Sprintf("run `n` QPs at once (1-%d), -n iterations each; the row sums them (both ends need the same -q)", maxQPs))
		fl.BoolVarP(&opts.Bidir, "bidirectional", "b", false, "run in both directions at once; the row adds up both sides' figures (both ends need -b)")
	}
	addTimedFlags(fl, opts, k.bw)
	if k.verb == perf.VerbSend {
		fl.IntVarP(&opts.RxDepth, "rx-depth", "r", 512, "size of the receive queue")
	}
	if k.verb != perf.VerbAtomic {
		fl.BoolVarP(&opts.All, "all", "a", false, fmt.Sprintf("run sizes from 2 up to 2^%d bytes (-s is ignored)", maxSizePow))
	}
	if k.verb == perf.VerbRead || k.verb == perf.VerbAtomic {
		fl.IntVarP(&opts.OutReads, "outs", "o", 128, "outstanding reads/atomics (responder resources)")
	}
	if k.verb == perf.VerbAtomic {
		fl.StringVarP(&opts.AtomicType, "atomic_type", "A", "FETCH_AND_ADD", "CMP_AND_SWAP or FETCH_AND_ADD")
	}
	return cmd
}

func testTitle(k *perftestKind) string {
	t := perf.TestInfo{Verb: k.verb, BW: k.bw, AtomicType: "FETCH_AND_ADD or CMP_AND_SWAP"}
	return t.Title()
}

func (o *perftestOptions) check(c *cobra.Command) error {
	var err error
	if o.JSON && o.CSV {
		return FlagErrorf("--json and --csv cannot be used together")
	}
	if o.bind, err = parseBind(o.Bind); err != nil {
		return err
	}
	if o.bind, o.device, err = resolveDeviceFlag(o.bind, o.Device); err != nil {
		return err
	}
	if err := checkGIDIndex("-x", o.GIDIdx, o.device); err != nil {
		return &FlagError{Err: err}
	}
	switch o.MTU {
	case 0, 256, 512, 1024, 2048, 4096:
	default:
		return FlagErrorf("invalid -m %d: want 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	if o.IBPort != 1 {
		return FlagErrorf("invalid -i %d: tbrdma devices have port 1 only", o.IBPort)
	}
	if err := checkPort(o.Port, o.Peer); err != nil {
		return err
	}
	o.sizeGiven = c.Flags().Changed("size")
	if err := checkConn(o.Kind, o.Conn); err != nil {
		return &FlagError{Err: err}
	}
	if o.Iters < 5 {
		return FlagErrorf("invalid -n %d: want 5 or more iterations (perftest's minimum)", o.Iters)
	}
	if o.SegmentSize != 0 {
		if !verbs.ValidSegmentSize(o.SegmentSize) {
			return FlagErrorf("invalid --segment-size %d: a multiple of 4096 from %d to %d", o.SegmentSize, verbs.MinSegmentSize, verbs.SegmentSizeLimit)
		}
		o.LargeSegments = true
	}
	if err := o.checkUnreliable(); err != nil {
		return err
	}
	if o.LargeSegments && o.RDMACM {
		return FlagErrorf("--large-segments works with the TCP exchange only, not with -R: drop one of them")
	}
	if !o.Kind.bw {
		o.QPs = 1 // perftest's latency tests have no -q (usage.go)
	}
	if o.QPs < 1 || o.QPs > maxQPs {
		return FlagErrorf("invalid -q %d: 1..%d", o.QPs, maxQPs)
	}
	if o.QPs > 1 && o.RDMACM {
		return FlagErrorf("-q %d works with the TCP exchange only, not with -R (one rdma_cm connection per QP is not supported): drop -R, or run -q 1", o.QPs)
	}
	if o.All {
		o.Size = 1 << maxSizePow // perftest's buffer size with -a
	}
	if o.Size < 1 || o.Size > verbs.MaxMessageSize/2 {
		return FlagErrorf("invalid -s %d: want 1..%d bytes (the buffer holds two messages of at most the 2 GiB an RDMA message may have)", o.Size, verbs.MaxMessageSize/2)
	}
	if need := bufferSize(o.Size, o.QPs); o.QPs > 1 && need > maxBuffer {
		return FlagErrorf("-q %d with %s needs a %d MiB buffer (two slices of the largest message per QP, as perftest), more than %d MiB: use fewer QPs or smaller messages", o.QPs, sizeFlag(o), need>>20, maxBuffer>>20)
	}
	if o.QPTimeout < 0 || o.QPTimeout > 31 {
		return FlagErrorf("invalid --qp-timeout %d: want 0..31", o.QPTimeout)
	}
	if o.Kind.verb == perf.VerbAtomic {
		if o.Size != 8 {
			return FlagErrorf("invalid -s %d: atomic operations are 8 bytes", o.Size)
		}
		if o.AtomicType != "FETCH_AND_ADD" && o.AtomicType != "CMP_AND_SWAP" {
			return FlagErrorf("invalid -A %s: CMP_AND_SWAP or FETCH_AND_ADD", o.AtomicType)
		}
	}
	if o.Kind.verb == perf.VerbRead || o.Kind.verb == perf.VerbAtomic {
		if o.OutReads < 1 || o.OutReads > verbs.MaxRdAtomic {
			return FlagErrorf("invalid -o %d: want 1..%d", o.OutReads, verbs.MaxRdAtomic)
		}
	}
	if err := o.checkTimed(c); err != nil {
		return err
	}
	timed := o.Duration > 0 // a timed run ignores -n (perftest_duration.go)
	if o.Kind.bw {
		if o.TxDepth < 1 || o.TxDepth > verbs.MaxQPWR {
			return FlagErrorf("invalid -t %d: want 1..%d (the largest send queue)", o.TxDepth, verbs.MaxQPWR)
		}
		if !timed {
			o.TxDepth = min(o.TxDepth, o.Iters)
		}
		// perftest keeps -Q over UD, whose messages are small anyway.
		if !c.Flags().Changed("cq-mod") && o.Size > 8192 && !o.All && o.Conn != "UD" {
			o.CQMod = 1
		}
		if o.CQMod < 1 {
			return FlagErrorf("invalid -Q %d: want 1 or more (at most -t; larger values are lowered to it)", o.CQMod)
		}
		o.CQMod = min(o.CQMod, o.TxDepth)
	} else {
		o.TxDepth = 1
	}
	if err := o.checkReport(c); err != nil {
		return err
	}
	if o.Kind.verb == perf.VerbSend {
		if o.RxDepth < 1 || o.RxDepth > verbs.MaxQPWR {
			return FlagErrorf("invalid -r %d: want 1..%d (the largest receive queue)", o.RxDepth, verbs.MaxQPWR)
		}
		// perftest: at most iters, and even.
		if !timed {
			o.RxDepth = min(o.RxDepth, o.Iters)
		}
		if o.Conn != "RC" && o.RxDepth == 512 {
			// perftest over UC and UD, where a receive missing is a
			// message lost: its default -r becomes -n (at most 16000).
			o.RxDepth = min(o.Iters, 16000)
		}
		o.RxDepth += o.RxDepth % 2
	}
	return nil
}

// maxSizePow is the largest size of -a: perftest runs 2^1 … 2^23 bytes.
const maxSizePow = 23

// maxQPs bounds -q: perftest takes up to 16384, a tbrdma device has room
// for verbs.MaxQP QPs in all, serve's shared by its clients.
const maxQPs = 1024

// qps is the number of QPs of the test: -q, at least 1.
func (o *perftestOptions) qps() int { return max(o.QPs, 1) }

// maxBuffer bounds a test's buffer (bufferSize).
const maxBuffer = 1 << 30

// bufferSize is the size of a test's buffer: for each QP, two slices of
// the largest message, at least a page each (perftest's layout: the
// first slices are what the QPs send or advertise, the second ones where
// their receives land).
func bufferSize(size, qps int) int {
	return 2 * qps * max(size, os.Getpagesize())
}

// sizeFlag is -s SIZE, or -a, for messages.
func sizeFlag(o *perftestOptions) string {
	if o.All {
		return "-a"
	}
	return fmt.Sprintf("-s %d", o.Size)
}

// sizes returns the message sizes to run: -s, or all of -a's.
func (o *perftestOptions) sizes() []int {
	if !o.All {
		return []int{o.Size}
	}
	var s []int
	for i := 1; i <= maxSizePow && (o.udMTU == 0 || 1<<i <= o.udMTU); i++ {
		s = append(s, 1<<i)
	}
	return s
}

// perftest is one side's resources.
type perftest struct {
	o          *perftestOptions
	dev        *verbs.Context
	mr         *verbs.MR // the whole buffer, LOCAL_WRITE only: this side's own requests and receives
	rmr        *verbs.MR // the advertised region alone, with the right the test grants the peer (peerAccess); nil: none
	buf        []byte
	half       int // size of a QP's slice of the buffer (write-lat: where its peer writes, the second half)
	qp         *verbs.QP
	qps        []*verbs.QP // every QP of the test (-q), qp the first
	w          perf.Waiter
	pd         *verbs.PD
	cm         *perftestCM // -R only
	my         perf.Dest
	mys        []perf.Dest // every QP's description, my the first
	mtu        verbs.MTU
	seg        int      // large-segment size agreed with the peer, 0 = the path MTU
	peerWindow bool     // the peer is a tbrdma that made the window offer (perf.TbrdmaWindow)
	peerSR     bool     // both ends do selective retransmission (the peer made the selective offer)
	oob        net.Conn // the TCP exchange's connection (nil with -R)
	info       perf.TestInfo
	loop       *perf.Loop    // the data path, once the QP is connected
	ud         []perf.UDPeer // -c UD: each QP's peer, made as the QPs connect
	csv        *jsonout.CSVWriter
	// loopCtx is what the loop of a --run_infinitely run waits with (the
	// signal's context; the rest of the run outlives it: loopContext);
	// looping tells loopContext that the loop has started.
	loopCtx context.Context
	looping atomic.Bool
	// peerHint is a one-test server's client's hint fields (nil: none).
	peerHint map[string]string
	// shared: dev is "tbrdma serve"'s; close releases only the run's QP,
	// MR and channel.
	shared bool
	// leaveWait ends this session's say in serve's device wait
	// (serve_wait.go); nil for a dedicated test.
	leaveWait func()
}

// human returns where perftest's text goes: stdout, or with --json or
// --csv (whose rows alone are on stdout) stderr when it is a terminal, else
// nowhere.
func (t *perftest) human() io.Writer {
	o := t.o
	switch {
	case !o.JSON && !o.CSV:
		return o.IO.Out
	case o.IO.IsStderrTTY():
		return o.IO.ErrOut
	}
	return io.Discard
}

// row writes one result row as JSON or CSV.
func (t *perftest) row(r *jsonout.BenchV1) error {
	o := t.o
	r.SchemaVersion, r.Test, r.Role = 1, o.Kind.name, o.side()
	if o.JSON {
		return json.NewEncoder(o.IO.Out).Encode(r)
	}
	if t.csv == nil {
		t.csv = jsonout.NewCSVWriter(o.IO.Out, jsonout.BenchV1Columns)
	}
	return t.csv.Write(r.CSV())
}

// printLat writes a latency row: perftest's table line, or a machine row
// in nanoseconds.
func (t *perftest) printLat(s perf.LatStats) error {
	t.printSamples(s)
	if err := t.writeOutJSON(func(w io.Writer) error { return perf.WriteLatJSON(w, &t.info, s) }); err != nil {
		return err
	}
	if !t.o.JSON && !t.o.CSV {
		perf.PrintLat(t.o.IO.Out, s)
		return nil
	}
	ns := func(us float64) *float64 { return jsonout.Ptr(jsonout.Round(us*1e3, 3)) }
	if s.Timed { // -D: the average, and the transactions per second as msg_rate_pps
		return t.row(&jsonout.BenchV1{Bytes: uint64(s.Size), Iterations: uint64(s.Iters), TAvgNs: ns(s.Avg),
			MsgRatePps: jsonout.Ptr(jsonout.Round(s.TPS, 3))})
	}
	return t.row(&jsonout.BenchV1{Bytes: uint64(s.Size), Iterations: uint64(s.Iters),
		TMinNs: ns(s.Min), TMaxNs: ns(s.Max), TTypicalNs: ns(s.Typical), TAvgNs: ns(s.Avg), TStdevNs: ns(s.Stdev),
		P99Ns: ns(s.P99), P999Ns: ns(s.P999)})
}

// printBW writes a bandwidth row: perftest's table line, or a machine row
// in bits/s and packets/s.
func (t *perftest) printBW(r perf.BWReport) error {
	if err := t.writeOutJSON(func(w io.Writer) error { return perf.WriteBWJSON(w, &t.info, r) }); err != nil {
		return err
	}
	switch {
	case !t.o.JSON && !t.o.CSV && t.o.ReportGbits:
		perf.PrintBWGbits(t.o.IO.Out, r.Gbits())
		return nil
	case !t.o.JSON && !t.o.CSV:
		perf.PrintBW(t.o.IO.Out, r)
		return nil
	}
	bps := func(mib float64) *float64 { return jsonout.Ptr(math.Round(mib * perf.MiB * 8)) }
	return t.row(&jsonout.BenchV1{Bytes: r.Size, Iterations: r.Iters,
		BWPeakBps: bps(r.Peak), BWAvgBps: bps(r.Average), MsgRatePps: jsonout.Ptr(jsonout.Round(r.MsgRate*1e6, 3))})
}

func runPerftest(ctx context.Context, o *perftestOptions) error {
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if o.Trace != "" {
		f, err := os.Create(o.Trace)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer trace.Stop()
	}
	t := &perftest{o: o}
	defer t.close()
	loopCtx, runCtx, cancel := t.loopContext(ctx)
	defer cancel()
	t.loopCtx = loopCtx
	err := t.run(runCtx)
	switch {
	case err == nil:
		if o.Inspect != nil {
			o.Inspect(t.buf)
		}
		return nil
	case errors.Is(err, context.DeadlineExceeded) || (o.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded)):
		return fmt.Errorf("timed out after %v", o.Timeout)
	case ctx.Err() != nil:
		return errInterrupted
	}
	var ref *perf.RefusedError
	if errors.As(err, &ref) {
		return ref // the server's reason says it all
	}
	return err
}

// run is one side's test, step by step: the out-of-band exchange's
// connection and the device with the test's QP; the exchange of versions,
// system data and MTU (and with -R the test QP's connection); the key
// exchanges that connect the QPs; then the test's loops.
func (t *perftest) run(ctx context.Context) error {
	o := t.o
	k := o.Kind
	server := o.Peer == ""
	if o.postListCQ {
		fmt.Fprintf(t.human(), "%s\nPost List requested - CQ moderation will be the size of the post list\n", perf.Line)
	}
	if server && !o.RDMACM { // -R: once the rdma_cm listeners are up
		fmt.Fprint(t.human(), perf.WaitBanner)
	}
	comm, done, err := t.openExchange(ctx)
	defer done()
	if err != nil {
		return err
	}
	if err := t.exchangeParams(ctx, comm); err != nil {
		return err
	}
	rems, err := t.exchangeKeys(comm)
	if err != nil {
		return err
	}
	t.loop = t.newLoop()
	switch {
	case k.verb == perf.VerbSend:
		return t.runSend(ctx, comm, rems)
	case k.verb == perf.VerbWrite && !k.bw:
		return t.runWriteLat(ctx, rems[0])
	case o.Bidir:
		return t.runBidir(ctx, comm, rems)
	case server:
		return t.serve(ctx, comm)
	case !k.bw:
		return t.runLat(ctx, comm, rems[0])
	}
	return t.runBW(ctx, comm, rems)
}

// openExchange connects the out-of-band exchange and opens the device with
// the test's QP: with -R rdma_cm's comm QP (the test QP comes later, in
// exchangeParams), else the TCP connection. done releases what it made;
// the caller defers it, also after an error.
func (t *perftest) openExchange(ctx context.Context) (_ *perf.Comm, done func(), _ error) {
	o := t.o
	if o.RDMACM {
		t.cm = &perftestCM{t: t}
		comm, err := t.cm.connectComm(ctx)
		return comm, t.cm.close, err
	}
	if o.Peer == "" && o.served == nil && o.bind.IsValid() {
		// A one-test server with its address (--bind, -d) opens its
		// device before it waits, so that a missing or down device
		// fails now, not once a client has come.
		if err := t.open(o.bind); err != nil {
			return nil, func() {}, err
		}
	}
	conn, done, err := t.connectTCP(ctx)
	if err != nil {
		return nil, done, err
	}
	addr := o.bind
	if !addr.IsValid() {
		addr = localAddr(conn)
	}
	switch {
	case o.served != nil:
		t.shared = true
		err = t.setup(o.served.dev)
	case t.dev == nil:
		err = t.open(addr)
	}
	if err == nil {
		err = t.createQP()
	}
	if err != nil {
		return nil, done, err
	}
	if o.served != nil {
		// serve has exchanged the versions, with a dedicated server's
		// offers: take what the client agreed to.
		t.peerWindow = o.served.comm.PeerWindow
		t.peerSR = o.served.comm.PeerSelective
		t.seg = o.served.comm.PeerSegment
		t.leaveWait = o.served.wait.join(t.servedWaitKind())
		return o.served.comm, done, nil
	}
	comm := perf.NewComm(conn, o.Peer == "")
	if o.Peer != "" {
		comm.Hint = o.hint() // for "tbrdma serve": which test, with what
	}
	return comm, done, nil
}

// connectTCP returns the exchange's TCP connection: serve's, the one a
// server accepts, or the client's. done closes it.
func (t *perftest) connectTCP(ctx context.Context) (_ net.Conn, done func(), _ error) {
	o := t.o
	var conn net.Conn
	var err error
	switch {
	case o.served != nil:
		conn = o.served.conn
	case o.Peer == "":
		conn, err = listenOneAllowed(ctx, o.Kind.name, o.bind, o.AnyInterface, o.Port, o.Listening, o.IO.ErrOut)
	default:
		conn, err = dial(ctx, o.Peer, o.bind, o.Port)
	}
	if err != nil {
		return nil, func() {}, err
	}
	raw := conn
	if o.wrapConn != nil {
		conn = o.wrapConn(conn)
	}
	stop := closeOnCancel(ctx, conn)
	t.oob = conn
	return conn, func() { stop(); raw.Close() }, nil
}

// exchangeParams runs the exchange up to the keys: the versions (with
// tbrdma's offers; serve has done that already), the system data and the
// MTU; then it prints the header. With -R it connects the test QP.
func (t *perftest) exchangeParams(ctx context.Context, comm *perf.Comm) error {
	o := t.o
	out := t.human()
	server := o.Peer == ""
	if o.served == nil {
		if err := t.exchangeVersions(comm); err != nil {
			return err
		}
	}
	if _, _, err := comm.ExchangeSysData(os.Getpagesize(), 64); err != nil {
		return err
	}
	localMTU := int(t.dev.ActiveMTU())
	if o.MTU != 0 {
		localMTU = int(verbs.MTUForLink(o.MTU + 80))
	}
	m, err := comm.ExchangeMTU(localMTU)
	if err != nil {
		return err
	}
	t.mtu = verbs.MTU(m)
	if err := t.capUDSize(); err != nil {
		return err
	}
	t.info = perf.TestInfo{Verb: o.Kind.verb, BW: o.Kind.bw, AtomicType: o.AtomicType, Device: "tbrdma0", QPs: len(t.qps), Server: server,
		TxDepth: o.TxDepth, RxDepth: o.RxDepth, CQMod: o.CQMod, MTU: t.mtu.Bytes(), GIDIndex: o.GIDIdx, OutReads: o.OutReads,
		RDMACM: o.RDMACM, Conn: o.Conn, Inline: o.Inline, PostList: o.PostList, Events: o.Events, Bidir: o.Bidir}
	perf.PrintHeader(out, &t.info)
	if o.RDMACM {
		// perftest -R: a synchronising key exchange (of zeroed
		// descriptions), the test QP's connection, another one.
		if server {
			fmt.Fprint(out, perf.CMWaitNote)
		}
		if err := t.cm.connectTest(ctx, comm); err != nil {
			return err
		}
	}
	return nil
}

// exchangeVersions exchanges the version messages with tbrdma's offers
// (the wider send window, large segments) and applies what was agreed.
func (t *perftest) exchangeVersions(comm *perf.Comm) error {
	offer := 0
	if t.o.LargeSegments {
		offer = t.segmentOffer()
		comm.OfferSegment = offer
	}
	comm.OfferWindow = true
	comm.OfferSelective = true
	server := t.o.Peer == ""
	// A one-test server asks a tbrdma client for its test (mismatch.go).
	comm.AskHint = server && !t.o.RDMACM
	if _, err := comm.ExchangeVersions(); err != nil {
		if !server {
			return explainClosed(err)
		}
		if errors.Is(err, perf.ErrPingpongClient) {
			return refuseClient(t.oob, fmt.Sprintf("the client runs pingpong, this server %s: start the server with the client's command (tbrdma pingpong), or use tbrdma serve", t.o.Kind.name))
		}
		return err
	}
	if comm.AskHint && comm.Hint != "" {
		if why := perftestMismatch(t.o, comm.Hint); why != "" {
			return refuseClient(t.oob, why)
		}
		_, t.peerHint, _ = parseHint(comm.Hint)
	}
	t.peerWindow = comm.PeerWindow
	t.peerSR = comm.PeerSelective
	return t.agreeSegment(offer, comm.PeerSegment)
}

// exchangeKeys runs the key exchanges of perftest 4.5 (as testdata/rxe's
// captures show, and its sources for -q): one per QP (bandwidth), or two
// of the first QP's (latency), before the QPs connect, printed as the
// remote addresses; then, to synchronise, for write-bw and read-bw one per
// QP and one of the first QP's, for send-bw one of the first QP's and one
// per QP, for the latency tests two (send-lat one) of the first QP's. The
// last synchronisation of send-lat and send-bw is per message size once
// the receives are posted (runSend). Four in all before a run with one QP.
// It connects the QPs in between and returns the peer's descriptions, one
// per QP.
func (t *perftest) exchangeKeys(comm *perf.Comm) ([]perf.Dest, error) {
	o := t.o
	k := o.Kind
	out := t.human()
	rems, err := t.shakeAll(comm, nil)
	if err != nil {
		return nil, err
	}
	if !k.bw {
		if rems[0], err = comm.HandShake(t.my); err != nil {
			return nil, err
		}
	}
	for _, my := range t.mys {
		perf.PrintDest(out, "local", my, k.verb)
	}
	for _, rem := range rems {
		perf.PrintDest(out, "remote", rem, k.verb)
	}
	fmt.Fprintln(out, perf.Line)
	// perftest checks the GID types only when it connects the QP itself.
	if !o.RDMACM && verbs.GID(rems[0].GID).IsV4Mapped() != verbs.GID(t.my.GID).IsV4Mapped() {
		return nil, errors.New("found incompatibility issue with GID types (IPv4-mapped and not)")
	}
	if !o.RDMACM { // with -R, rdma_cm has connected the QP
		for i, qp := range t.qps {
			if err := t.connect(qp, t.mys[i], rems[i]); err != nil {
				return nil, err
			}
		}
	}
	if t.peerWindow && o.Conn == "RC" { // a tbrdma peer: the wider send window (tbrdma extension)
		w := perf.SendWindow(len(t.qps), t.seg)
		for _, qp := range t.qps {
			if err := qp.SetSendWindow(w); err != nil {
				return nil, err
			}
			// Both ends turn it on before the first packet of the test
			// (the synchronisation below comes first).
			if err := qp.SetSelectiveRetransmit(t.peerSR); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case k.bw && k.verb == perf.VerbSend:
		if err := t.shakeFirst(comm, rems); err != nil {
			return nil, err
		}
		if _, err := t.shakeAll(comm, rems); err != nil {
			return nil, err
		}
	case k.bw:
		if _, err := t.shakeAll(comm, rems); err != nil {
			return nil, err
		}
		if err := t.shakeFirst(comm, rems); err != nil {
			return nil, err
		}
	default:
		syncs := 2
		if k.verb == perf.VerbSend {
			syncs = 1
		}
		for range syncs {
			if _, err := comm.HandShake(t.my); err != nil {
				return nil, err
			}
		}
	}
	return rems, nil
}

// shakeAll runs one key exchange per QP, as perftest's loops over its QPs
// do. The first round (rems nil) returns the peer's descriptions; a later
// round checks that the peer sends the same ones again. A peer with
// another -q shows in either: its descriptions repeat too early (fewer
// QPs) or a new one comes where a repeat is due (more), and the end that
// sees it stops at once rather than leave both waiting (mismatchedQPs).
func (t *perftest) shakeAll(comm *perf.Comm, rems []perf.Dest) ([]perf.Dest, error) {
	got := make([]perf.Dest, len(t.mys))
	for i, my := range t.mys {
		d, err := comm.HandShake(my)
		if err != nil {
			return nil, err
		}
		got[i] = d
		if t.o.RDMACM {
			continue // one QP, whose description rdma_cm fills in later
		}
		if rems != nil && d.QPN != rems[i].QPN {
			return nil, t.mismatchedQPs(0)
		}
		for j := range i {
			if rems == nil && got[j].QPN == d.QPN {
				return nil, t.mismatchedQPs(i)
			}
		}
	}
	return got, nil
}

// shakeFirst is a synchronising key exchange (the first QP's
// description), checked as shakeAll checks a later round.
func (t *perftest) shakeFirst(comm *perf.Comm, rems []perf.Dest) error {
	d, err := comm.HandShake(t.my)
	if err != nil {
		return err
	}
	if !t.o.RDMACM && d.QPN != rems[0].QPN {
		return t.mismatchedQPs(0)
	}
	return nil
}

// mismatchedQPs is the error of an exchange whose peer runs another
// number of QPs: peerQPs of them, or 0 when it has more than this end.
// A one-test server refuses the client with it (a tbrdma client prints
// the reason; a stock one sees its connection close).
func (t *perftest) mismatchedQPs(peerQPs int) error {
	o := t.o
	peer, self := "server", "client"
	if o.Peer == "" {
		peer, self = "client", "server"
	}
	has := fmt.Sprintf("with more QPs than this %s's -q %d", self, o.qps())
	if peerQPs > 0 {
		has = fmt.Sprintf("with -q %d, this %s with -q %d", peerQPs, self, o.qps())
	}
	why := fmt.Sprintf("the %s runs %s %s (its QP descriptions in the exchange say so): start both ends with the same -q", peer, o.Kind.name, has)
	if o.Peer == "" && t.oob != nil && t.o.served == nil {
		return refuseClient(t.oob, why)
	}
	return errors.New(why)
}

// newLoop is the test's data path over the connected QP.
func (t *perftest) newLoop() *perf.Loop {
	o := t.o
	return &perf.Loop{QP: t.qp, QPs: t.qps, Stride: t.half, MR: t.mr, Buf: t.buf, Half: len(t.qps) * t.half, W: &t.w, Dev: t.dev,
		Name: o.Kind.name, Verb: o.Kind.verb, Server: o.Peer == "", Iters: o.Iters,
		TxDepth: o.TxDepth, RxDepth: o.RxDepth, CQMod: o.CQMod, AtomicType: o.AtomicType, Events: o.Events,
		Inline: o.Inline, PostList: o.PostList, PerUs: o.mhz, Bidir: o.Bidir,
		Now: o.Now, ErrOut: o.IO.ErrOut, UD: t.ud, AliveCheck: t.aliveCheck(), Timed: t.timed(),
		Progress: func(label string, total uint64) perf.Progress {
			// On a terminal, a progress line on stderr (gone before the row).
			p := ui.NewProgress(o.IO, o.Now, label)
			p.Total = total
			return p
		}}
}

// segmentOffer is the large-segment size to offer: --segment-size, else
// the largest the device's link MTU carries (0: none; the link is too
// small for anything above 4096 bytes).
func (t *perftest) segmentOffer() int {
	if t.o.SegmentSize != 0 {
		return t.o.SegmentSize
	}
	if d := t.dev.Device(); d != nil && d.LinkMTU > 0 {
		n := verbs.SegmentSizeForLink(d.LinkMTU)
		if n == 0 {
			fmt.Fprintf(t.o.IO.ErrOut, "tbrdma: --large-segments: the link MTU (%d bytes) has no room for segments above 4096 bytes; not offering them\n", d.LinkMTU)
		}
		return n
	}
	return verbs.SegmentSizeLimit
}

// agreeSegment applies the outcome of the large-segment offer and says
// what it was.
func (t *perftest) agreeSegment(offer, agreed int) error {
	if offer == 0 {
		return nil
	}
	if agreed == 0 {
		fmt.Fprintf(t.o.IO.ErrOut, "tbrdma: --large-segments: the peer made no offer (a stock perftest, or a tbrdma without --large-segments): using the path MTU\n")
		return nil
	}
	if err := t.dev.SetMaxSegmentSize(agreed); err != nil {
		return fmt.Errorf("--large-segments: %w", err)
	}
	t.seg = agreed
	fmt.Fprintf(t.o.IO.ErrOut, "tbrdma: large segments: %d-byte packets, agreed with the peer (tbrdma extension)\n", agreed)
	return nil
}

// open opens the device on addr and sets it up.
func (t *perftest) open(addr netip.Addr) error {
	dev, err := t.o.OpenDevice(addr)
	if err != nil {
		return err
	}
	if err = checkPortActive(dev); err == nil {
		err = checkGIDIndex("-x", t.o.GIDIdx, dev.Device())
	}
	if err != nil {
		dev.Close()
		return err
	}
	return t.setup(dev)
}

// setup makes the test's buffer, MR and CQ on dev (which t now owns).
func (t *perftest) setup(dev *verbs.Context) error {
	o := t.o
	t.dev = dev
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	// perftest's buffer: at least a page, and twice the message for the
	// latency tests (one half per direction).
	size := o.Size
	if o.Conn == "UD" {
		size += perf.UDGRHSize // each receive has room for the GRH too
	}
	t.half = max(size, os.Getpagesize())
	t.buf = make([]byte, bufferSize(size, o.qps()))
	fill := t.buf
	if o.Kind.verb == perf.VerbWrite && !o.Kind.bw {
		fill = t.buf[:t.half] // write-lat polls the second half: keep it zero
	}
	if o.Kind.verb != perf.VerbAtomic && (o.Peer == "" || o.Bidir) {
		// A pattern, so that READ responses and captures show real data
		// (with -b the client's too: its peer READs or receives it).
		for i := range fill {
			fill[i] = bufPattern(i, o.Peer == "")
		}
	}
	t.pd = pd
	if t.mr, err = pd.RegMR(t.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't allocate MR: %w", err)
	}
	if acc := t.peerAccess(); acc != 0 {
		if acc&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
			acc |= verbs.AccessLocalWrite // as ibverbs requires
		}
		off := t.peerOffset()
		if t.rmr, err = pd.RegMR(t.buf[off:off+o.qps()*t.half], acc); err != nil {
			return fmt.Errorf("couldn't allocate MR: %w", err)
		}
	}
	ch, err := dev.CreateCompChannel()
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(o.qps()*(o.TxDepth+o.RxDepth)+1, ch)
	if err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	t.w = perf.Waiter{CQ: cq, Ch: ch, Spin: perf.DefaultSpin}
	kernelWait := false
	switch {
	case o.Events: // -e: sleep on the completion channel, never spin
		t.w.Spin = 0
		kernelWait = true
	case t.shared && !o.Kind.bw:
		// serve's device, whose receive loop busy-polls after each
		// packet (runServe): a latency session spins on its CQ as a
		// dedicated server does and holds the loop polling meanwhile.
		t.w.Spin = perf.BusySpin
		t.w.Ctx = dev
	case t.shared: // serve's bandwidth sessions: the device's wait (serve_wait.go)
	case !o.Kind.bw: // latency tests: busy-poll the CQ and the socket, as perftest polls
		t.w.Spin = perf.BusySpin
		t.w.Ctx = dev
		t.w.Inline = true // the test's loops read the socket while they spin (perf.Waiter.ReceiveInline)
		hooks.Of(dev).SetBusyPoll(perf.BusyPollWindow)
	default:
		// Bandwidth tests at the standard MTU: the receive loops wait in
		// the kernel too. Measured in alternation (docs/performance.md):
		// write-bw 1 MiB at 4096 B rose by ~40 % (the receiver, the
		// bottleneck there, no longer pays the poller's and sysmon's
		// wake-ups for every batch), while large segments, where the
		// sender's CPU is the limit, lost ~15 %, so they keep the poller.
		kernelWait = !o.LargeSegments
		if o.LargeSegments && t.receivesData() {
			// There the receiving side polls its socket instead (it
			// has CPU to spare): a receiver that sleeps makes the
			// sender's CPU, which delivers each datagram on a veth
			// link, pay a wake-up per burst. +4-25 % in alternation.
			hooks.Of(dev).SetBusyPoll(perf.BusyPollWindow)
		}
	}
	if kernelWait && !t.shared { // serve's device: its other users keep their own wait
		if _, err := hooks.Of(dev).SetKernelWait(perf.KernelWaitWindow); err != nil {
			return err
		}
	}
	return nil
}

// peerAccess is the right this side grants its peer, as perftest grants
// it: the test's one verb (REMOTE_WRITE, REMOTE_READ or REMOTE_ATOMIC), on
// the side the peer's requests reach: the server of write-bw, read-bw,
// read-lat and atomic-lat, both sides of write-lat and of write-bw and
// read-bw with -b. The SEND tests, and the other clients, grant nothing.
// The QP's access flags and the MR over the advertised region (rmr) carry
// it.
func (t *perftest) peerAccess() verbs.AccessFlags {
	k := t.o.Kind
	writeLat := k.verb == perf.VerbWrite && !k.bw
	if t.o.Peer != "" && !writeLat && !t.o.Bidir {
		return 0
	}
	switch k.verb {
	case perf.VerbWrite:
		return verbs.AccessRemoteWrite
	case perf.VerbRead:
		return verbs.AccessRemoteRead
	case perf.VerbAtomic:
		return verbs.AccessRemoteAtomic
	}
	return 0
}

// peerOffset is where in the buffer the advertised region starts: the
// second half for write-lat (as perftest: the peer writes there, we poll
// it) and for -b (the peer's WRITEs land there, and its READs read there,
// clear of the first half this side sends from or READs into), else the
// first. The region is half bytes long per QP: the largest message (-s,
// or -a's 8 MiB), at least a page, as stock perftest's bandwidth clients
// walk a page-sized cycle buffer with small messages.
func (t *perftest) peerOffset() int {
	if k := t.o.Kind; k.verb == perf.VerbWrite && !k.bw {
		return t.half
	}
	if t.o.Bidir {
		return t.o.qps() * t.half
	}
	return 0
}

// bufPattern is byte i of a side's buffer: the server's pattern, or with
// -b the client's, another one, so that a test tells whose data it sees.
func bufPattern(i int, server bool) byte {
	if server {
		return byte(i%251 + 1)
	}
	return byte(i%241 + 7)
}

// receivesData reports whether this end is the one the test's payload
// flows to: the server of write-bw and send-bw, the client of read-bw.
func (t *perftest) receivesData() bool {
	return (t.o.Peer != "") == (t.o.Kind.verb == perf.VerbRead)
}

// qpInitAttr is the test QP's: -c's type, tx-depth sends, rx-depth
// receives.
func (t *perftest) qpInitAttr() *verbs.QPInitAttr {
	return &verbs.QPInitAttr{Type: connQPType(t.o.Conn), SendCQ: t.w.CQ, RecvCQ: t.w.CQ,
		Cap: verbs.QPCap{MaxSendWR: t.o.TxDepth, MaxRecvWR: max(t.o.RxDepth, 1), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: t.o.Inline}}
}

// createQP creates the test's QPs (-q) and moves them to INIT (without
// -R; with -R rdma_cm creates the one QP).
func (t *perftest) createQP() error {
	for i := range t.o.qps() {
		qp, err := t.pd.CreateQP(t.qpInitAttr())
		if err != nil {
			return fmt.Errorf("couldn't create QP: %w", err)
		}
		t.qps = append(t.qps, qp)
		attr := &verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: t.peerAccess()}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
		if t.o.Conn == "UD" { // perftest's Q_Key instead of access flags
			attr.AccessFlags, attr.QKey = 0, perf.UDQKey
			mask = mask&^verbs.QPAttrAccessFlags | verbs.QPAttrQKey
		}
		if err := qp.Modify(attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %w", err)
		}
		t.mys = append(t.mys, t.dest(i, rand.Uint32()&0xFFFFFF))
	}
	t.qp, t.my = t.qps[0], t.mys[0]
	return nil
}

// setMy makes t.qp, rdma_cm's, the test's one QP and fills our
// description from it; psn is the one printed and sent.
func (t *perftest) setMy(psn uint32) {
	t.qps = []*verbs.QP{t.qp}
	t.my = t.dest(0, psn)
	t.mys = []perf.Dest{t.my}
}

// dest is the description of QP i (of t.qps) and its slice of the buffer.
func (t *perftest) dest(i int, psn uint32) perf.Dest {
	o := t.o
	outs := 0
	if o.Kind.verb == perf.VerbRead || o.Kind.verb == perf.VerbAtomic {
		outs = o.OutReads
	}
	// The advertised region, QP i's slice of it; a side that grants
	// nothing still sends an address and its buffer's key, as perftest
	// does (the key allows no remote request).
	vaddr, rkey := t.mr.Addr()+uint64(t.peerOffset()), t.mr.RKey()
	if t.rmr != nil {
		vaddr, rkey = t.rmr.Addr(), t.rmr.RKey()
	}
	vaddr += uint64(i * t.half)
	return perf.Dest{OutReads: uint16(outs), QPN: uint32(t.qps[i].QPN()), PSN: psn,
		RKey: uint32(rkey), VAddr: vaddr, GID: t.dev.GID(), GIDIndex: uint32(max(o.GIDIdx, 0))}
}

// connect moves qp, whose description is my, to RTR and RTS towards
// rem with perftest's attributes.
func (t *perftest) connect(qp *verbs.QP, my, rem perf.Dest) error {
	o := t.o
	if o.Conn != "RC" {
		return t.connectUnreliable(qp, my, rem)
	}
	rd := o.Kind.verb == perf.VerbRead || o.Kind.verb == perf.VerbAtomic
	destRd := uint8(0)
	if rd {
		destRd = uint8(my.OutReads)
	}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
		verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	if t.seg != 0 {
		mask |= verbs.QPAttrSegmentSize
	}
	err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: t.mtu, DestQPN: verbs.QPN(rem.QPN),
		RQPSN: verbs.PSN(rem.PSN), MaxDestRdAtomic: destRd, MinRNRTimer: 12, SegmentSize: t.seg,
		AH: verbs.AHAttr{DGID: verbs.GID(rem.GID), SGIDIndex: uint8(max(o.GIDIdx, 0)), HopLimit: 0xFF, PortNum: 1}},
		mask)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	rdAtomic := uint8(0)
	if rd {
		rdAtomic = uint8(min(int(rem.OutReads), int(my.OutReads)))
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: uint8(o.QPTimeout), RetryCnt: 7, RNRRetry: 7,
		SQPSN: verbs.PSN(my.PSN), MaxRdAtomic: rdAtomic},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	return nil
}

func (t *perftest) close() {
	if t.shared {
		if t.leaveWait != nil {
			defer t.leaveWait() // once its QPs are gone
		}
		for _, qp := range t.qps {
			qp.Close()
		}
		if t.qp != nil && len(t.qps) == 0 {
			t.qp.Close()
		}
		for _, mr := range []*verbs.MR{t.rmr, t.mr} {
			if mr != nil {
				mr.Deregister()
			}
		}
		t.closeAHs()
		if t.w.CQ != nil {
			t.w.CQ.Close() // after the QP that uses it
		}
		if t.w.Ch != nil {
			t.w.Ch.Close()
		}
		if t.pd != nil {
			t.pd.Close() // after the QP and MR made on it
		}
		return
	}
	if t.dev != nil {
		t.dev.Close()
	}
}
