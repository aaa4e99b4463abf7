package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/verbs"
)

// "tbrdma serve" hosts the server side of pingpong and of the perftest
// family on TCP --oob-port (18515, the port those commands use). The stock
// exchanges do not say which test a client runs, so a tbrdma client sends
// a test hint (docs/wire-format.md, "tbrdma extensions"): text such as
//
//	tbtest=write-bw s=65536 n=5000 a=0 t=128 Q=100 r=512 o=128 A=FETCH_AND_ADD q=1
//	tbtest=pingpong s=4096 n=1000 m=1024 c=0 ud=0
//
// perftest clients send it after the version message when serve asks
// (perf.Comm.Hint); pingpong clients after "done" (perf.ReadPingpongDone).

// hintPrefix starts every test hint.
const hintPrefix = "tbtest="

// hint is the test hint of a perftest client: the test and the flags the
// server side must share.
func (o *perftestOptions) hint() string {
	return fmt.Sprintf("%s%s s=%d n=%d a=%d t=%d Q=%d r=%d o=%d A=%s q=%d c=%s b=%d", hintPrefix, o.Kind.name,
		o.Size, o.Iters, b2i(o.All), o.TxDepth, o.CQMod, o.RxDepth, o.OutReads, o.AtomicType, o.qps(), o.Conn, b2i(o.Bidir)) + o.timedHint()
}

// hint is the test hint of a pingpong client.
func (o *pingpongOptions) hint() string {
	return fmt.Sprintf("%spingpong s=%d n=%d m=%d c=%d ud=%d", hintPrefix, o.Size, o.Iters, o.MTU, b2i(o.Chk), b2i(o.UD))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseHint splits a hint into its test name and its fields. Every field
// is key=value; keys appear at most once.
func parseHint(h string) (test string, kv map[string]string, err error) {
	f := strings.Fields(h)
	if len(f) == 0 || !strings.HasPrefix(f[0], hintPrefix) {
		return "", nil, fmt.Errorf("malformed test hint %q: want %s<test> key=value...", h, hintPrefix)
	}
	test = strings.TrimPrefix(f[0], hintPrefix)
	kv = map[string]string{}
	for _, x := range f[1:] {
		k, v, ok := strings.Cut(x, "=")
		if !ok || k == "" {
			return "", nil, fmt.Errorf("malformed test hint %q: field %q is not key=value", h, x)
		}
		if _, dup := kv[k]; dup {
			return "", nil, fmt.Errorf("malformed test hint %q: %s given twice", h, k)
		}
		kv[k] = v
	}
	return test, kv, nil
}

// hintInt returns field k as an int in lo..hi.
func hintInt(kv map[string]string, k string, lo, hi int) (int, error) {
	v, ok := kv[k]
	if !ok {
		return 0, fmt.Errorf("test hint: no %s", k)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("test hint: %s=%q: want %d..%d", k, v, lo, hi)
	}
	return n, nil
}

// hintQPs returns the hint's q (-q), 1 when it has none (a tbrdma client
// from before -q).
func hintQPs(kv map[string]string) (int, error) {
	if _, ok := kv["q"]; !ok {
		return 1, nil
	}
	return hintInt(kv, "q", 1, maxQPs)
}

// hintConn returns the hint's c (-c) for test k, RC when it has none (a
// tbrdma client from before -c).
func hintConn(k *perftestKind, kv map[string]string) (string, error) {
	c, ok := kv["c"]
	if !ok {
		return "RC", nil
	}
	if err := checkConn(k, c); err != nil {
		return "", fmt.Errorf("test hint: c=%q: %v", c, err)
	}
	return c, nil
}

// hintBidir returns the hint's b (-b), false when it has none (a tbrdma
// client from before -b).
func hintBidir(kv map[string]string) (bool, error) {
	if _, ok := kv["b"]; !ok {
		return false, nil
	}
	b, err := hintInt(kv, "b", 0, 1)
	return b == 1, err
}

// servedKinds are the perftest tests serve hosts, by name.
var servedKinds = map[string]*perftestKind{}

func init() {
	for _, k := range []*perftestKind{writeBWTest, readBWTest, sendBWTest, writeLatTest, readLatTest, sendLatTest, atomicLatTest} {
		servedKinds[k.name] = k
	}
}

// perftestFromHint returns the server side's options for a perftest
// client's hint, checked as the command's flags are.
func perftestFromHint(h string) (*perftestOptions, error) {
	test, kv, err := parseHint(h)
	if err != nil {
		return nil, err
	}
	k := servedKinds[test]
	if k == nil {
		return nil, fmt.Errorf("test hint: unknown test %q", test)
	}
	o := &perftestOptions{Kind: k, Conn: "RC", IBPort: 1, QPTimeout: 14, AtomicType: "FETCH_AND_ADD"}
	ints := []struct {
		key    string
		p      *int
		lo, hi int
	}{
		{"s", &o.Size, 1, verbs.MaxMessageSize / 2}, {"n", &o.Iters, 5, 1 << 30},
		{"t", &o.TxDepth, 0, verbs.MaxQPWR}, {"Q", &o.CQMod, 0, verbs.MaxQPWR},
		{"r", &o.RxDepth, 0, verbs.MaxQPWR}, {"o", &o.OutReads, 0, verbs.MaxRdAtomic},
	}
	for _, f := range ints {
		if *f.p, err = hintInt(kv, f.key, f.lo, f.hi); err != nil {
			return nil, err
		}
	}
	all, err := hintInt(kv, "a", 0, 1)
	if err != nil {
		return nil, err
	}
	o.All = all == 1
	if o.QPs, err = hintQPs(kv); err != nil {
		return nil, err
	}
	if o.Conn, err = hintConn(k, kv); err != nil {
		return nil, err
	}
	if o.Bidir, err = hintBidir(kv); err != nil {
		return nil, err
	}
	if err := o.timedFromHint(kv); err != nil {
		return nil, err
	}
	if o.RunInfinitely && k.verb == perf.VerbSend {
		// Its receiving side runs until it is interrupted, as perftest's.
		return nil, errServeInfinite
	}
	if a, ok := kv["A"]; ok && k.verb == perf.VerbAtomic {
		if a != "FETCH_AND_ADD" && a != "CMP_AND_SWAP" {
			return nil, fmt.Errorf("test hint: A=%q: want FETCH_AND_ADD or CMP_AND_SWAP", a)
		}
		o.AtomicType = a
	}
	switch {
	case k.verb == perf.VerbAtomic && (o.Size != 8 || o.All):
		return nil, fmt.Errorf("test hint: atomic-lat with s=%d a=%v: atomics are 8 bytes", o.Size, o.All)
	case (k.verb == perf.VerbRead || k.verb == perf.VerbAtomic) && o.OutReads < 1:
		return nil, errors.New("test hint: o=0: a READ or atomic test needs at least 1")
	case k.bw && (o.TxDepth < 1 || o.CQMod < 1):
		return nil, fmt.Errorf("test hint: t=%d Q=%d: a bandwidth test needs 1 or more of each", o.TxDepth, o.CQMod)
	case k.verb == perf.VerbSend && o.RxDepth < 1:
		return nil, errors.New("test hint: r=0: a SEND test needs receives")
	case !k.bw && o.Bidir:
		return nil, fmt.Errorf("test hint: %s with b=1: -b is for the bandwidth tests only", k.name)
	case !k.bw && o.QPs > 1:
		return nil, fmt.Errorf("test hint: %s with q=%d: several QPs are for the bandwidth tests only", k.name, o.QPs)
	case o.QPs > 1 && bufferSize(o.Size, o.QPs) > maxBuffer:
		return nil, fmt.Errorf("test hint: q=%d with s=%d needs a buffer of more than %d MiB: run the client with fewer QPs or smaller messages", o.QPs, o.Size, maxBuffer>>20)
	}
	if !k.bw {
		o.TxDepth, o.CQMod = 1, 0
	}
	if k.verb != perf.VerbSend {
		o.RxDepth = 0
	}
	o.Inline = defaultInline(k) // -I is the client's own: serve's side takes perftest's default
	return o, nil
}

// pingpongFromHint returns the server side's options for a pingpong
// client's hint, or serve's defaults (those of the command) without one.
func pingpongFromHint(h string) (*pingpongOptions, error) {
	o := &pingpongOptions{Size: 4096, Iters: 1000, MTU: 1024, RxDepth: 500, IBPort: 1, GIDIdx: -1}
	if h != "" {
		test, kv, err := parseHint(h)
		if err != nil {
			return nil, err
		}
		if test != "pingpong" {
			return nil, fmt.Errorf("test hint: %q after pingpong's exchange", test)
		}
		if o.Size, err = hintInt(kv, "s", 0, verbs.MaxMessageSize); err != nil {
			return nil, err
		}
		if o.Iters, err = hintInt(kv, "n", 1, 1<<30); err != nil {
			return nil, err
		}
		if o.MTU, err = hintInt(kv, "m", 256, 4096); err != nil {
			return nil, err
		}
		c, err := hintInt(kv, "c", 0, 1)
		if err != nil {
			return nil, err
		}
		o.Chk = c == 1
		if ud, _ := hintInt(kv, "ud", 0, 1); ud == 1 {
			return nil, errors.New("tbrdma serve does not host pingpong --ud: on the server's machine run \"tbrdma pingpong --ud -p 18516\" (serve holds its --oob-port, 18515 by default), and give the client the same -p")
		}
	}
	switch o.MTU {
	case 256, 512, 1024, 2048, 4096:
		o.mtu = verbs.MTUForLink(o.MTU + 80)
	default:
		return nil, fmt.Errorf("test hint: m=%d: want 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	return o, nil
}

// servedTest is what serve hands a perftest run (perftestOptions.served).
type servedTest struct {
	conn net.Conn
	comm *perf.Comm
	dev  *verbs.Context
	wait *serveWait
}

// prefixConn is a connection whose first bytes were already read.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// CloseWrite is the connection's own (a TCP half-close), for write-lat's
// end (awaitPeerDone).
func (p *prefixConn) CloseWrite() error { return closeWrite(p.Conn) }

// oobServer hosts the tests on one served device. Clients run at the same
// time, each with a PD, CQ, QP and MR of its own on the shared device.
type oobServer struct {
	dev  *verbs.Context
	wait *serveWait // dev's receive-loop wait, from its perftest sessions
	log  io.Writer
	now  func() time.Time
}

// serveOOB accepts clients on ln until ctx ends, each in its own
// goroutine, served by the server route picks; a client route refuses is
// closed at once with a line on log, and a client's failure is a line on
// log: neither ends serve.
func serveOOB(ctx context.Context, ln net.Listener, route func(net.Conn) (*oobServer, error), log io.Writer) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept on TCP %v: %w", ln.Addr(), err)
		}
		s, err := route(c)
		if err != nil {
			fmt.Fprintf(log, "tbrdma serve: %v\n", err)
			c.Close()
			continue
		}
		wg.Go(func() { s.client(ctx, c) })
	}
}

// oobFirstRead bounds how long a client may take to send its first
// message (and a pingpong client its "done").
const oobFirstRead = 10 * time.Second

// client serves one TCP client.
func (s *oobServer) client(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := closeOnCancel(ctx, c)
	defer stop()
	from := remoteAddr(c)
	say := func(format string, a ...any) {
		fmt.Fprintf(s.log, "tbrdma serve: %v: "+format+"\n", append([]any{from}, a...)...)
	}
	// perftest's version message (16 bytes) and pingpong's address
	// (52 bytes) both start the exchange: tell them apart by the first 16.
	first := make([]byte, 16)
	c.SetReadDeadline(time.Now().Add(oobFirstRead))
	if _, err := io.ReadFull(c, first); err != nil {
		say("no test exchange (%v); closed", err)
		return
	}
	c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(first), c)}
	var test string
	var err error
	switch {
	case first[4] == ':' && first[11] == ':':
		test = "pingpong"
		err = s.pingpong(ctx, pc, say)
	default:
		test, err = s.perftest(ctx, pc, say)
	}
	switch {
	case err == nil:
		return
	case ctx.Err() != nil:
		say("%s: stopped (shutting down)", test)
	case errors.Is(err, errSilent):
		say("%s failed (see above)", test)
	default:
		say("%s failed: %v", test, err)
	}
}

// testIO is the IO of a hosted test: its tables are the client's business
// (it prints its own), its remarks go to serve's log.
func (s *oobServer) testIO() *ui.IO {
	return &ui.IO{In: new(bytes.Buffer), Out: io.Discard, ErrOut: s.log}
}

// perftest runs the server side of a perftest-family client.
func (s *oobServer) perftest(ctx context.Context, c net.Conn, say func(string, ...any)) (string, error) {
	comm := perf.NewComm(c, true)
	comm.AskHint = true
	// serve makes the offers a dedicated server makes (perftest.go,
	// exchangeVersions): the wider send window with selective
	// retransmission, and large segments when the device takes them
	// (runServe); the client uses what it offered too.
	comm.OfferWindow = true
	comm.OfferSelective = true
	comm.OfferSegment = s.dev.MaxSegmentSize()
	if _, err := comm.ExchangeVersions(); err != nil {
		return "perftest", err
	}
	if comm.Hint == "" {
		return "perftest", fmt.Errorf("a client without tbrdma's test hint (a stock perftest %s?): tbrdma serve hosts tbrdma clients only; for a stock client run the test's own server here, e.g. \"tbrdma write-bw\" (with serve stopped, or --oob-port 0)", comm.RemoteVersion)
	}
	o, err := perftestFromHint(comm.Hint)
	if errors.Is(err, errServeInfinite) {
		return "send-bw", refuseClient(c, err.Error())
	}
	if err != nil {
		return "perftest", err
	}
	test := o.Kind.name
	o.IO, o.Now = s.testIO(), s.now
	o.served = &servedTest{conn: c, comm: comm, dev: s.dev, wait: s.wait}
	size := strconv.Itoa(o.Size) + " bytes"
	if o.All {
		size = "sizes 2.." + strconv.Itoa(1<<maxSizePow)
	}
	switch {
	case o.Duration > 0:
		say("%s: %s, %s", test, size, describeTimed(o.Duration, o.RunInfinitely, o.Iters))
	case o.QPs > 1:
		say("%s: %s, %d iterations on each of %d QPs", test, size, o.Iters, o.QPs)
	default:
		say("%s: %s, %d iterations", test, size, o.Iters)
	}
	if err := runPerftest(ctx, o); err != nil {
		return test, err
	}
	say("%s done", test)
	return test, nil
}

// pingpong runs the server side of a pingpong client: read its address,
// send ours (the QP is in INIT), read "done" and the hint, then bring the
// QP up with the client's MTU and post receives of its size. The client's
// first SEND, if it comes before that, is retried by its QP.
func (s *oobServer) pingpong(ctx context.Context, c net.Conn, say func(string, ...any)) error {
	buf := make([]byte, perf.PingpongMsgLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("couldn't read remote address: %w", err)
	}
	rem, err := perf.ParsePingpongDest(buf)
	if err != nil {
		return err
	}
	// The QP is made before the hint is known: rx-depth is serve's own
	// (the stock tool's too: each side posts its own receives).
	pp := &pingpong{o: &pingpongOptions{RxDepth: 500, IBPort: 1, GIDIdx: -1}, dev: s.dev, shared: true, peer: remoteAddr(c)}
	defer pp.close()
	if err := pp.setupQP(); err != nil {
		return err
	}
	// CheckLID tells a tbrdma client to send its test hint after "done"
	// and wait for the verdict: PingpongAccept once the QP is up and the
	// receives posted, or a refusal saying why (a stock client ignores
	// the LID and sends "done" alone).
	my := pp.my
	my.LID = perf.CheckLID
	if _, err := c.Write(my.Marshal()); err != nil {
		return fmt.Errorf("couldn't send local address: %w", err)
	}
	c.SetReadDeadline(time.Now().Add(oobFirstRead))
	hint, err := perf.ReadPingpongDone(c)
	if err != nil {
		return err
	}
	o, err := pingpongFromHint(hint)
	if err != nil {
		if hint != "" {
			return refuseClient(c, err.Error())
		}
		return err
	}
	o.IO, o.Now = s.testIO(), s.now
	o.RxDepth = pp.o.RxDepth
	pp.o = o
	if hint == "" {
		say("pingpong: a client without tbrdma's test hint (a stock ibv_rc_pingpong?): using %d bytes, %d iterations, MTU %d", o.Size, o.Iters, o.MTU)
	} else {
		say("pingpong: %d bytes, %d iterations", o.Size, o.Iters)
	}
	if err := pp.connect(rem); err != nil {
		return err
	}
	if err := pp.setupBuf(); err != nil {
		return err
	}
	if hint != "" {
		if err := perf.PingpongAccept(c); err != nil {
			return err
		}
	}
	c.Close()
	if err := pp.loop(ctx, false); err != nil {
		return err
	}
	say("pingpong done")
	return nil
}

// listenOOB opens serve's TCP listener for the hosted tests on addr.
func listenOOB(ctx context.Context, addr netip.Addr, port int) (net.Listener, error) {
	lc := net.ListenConfig{KeepAliveConfig: exchangeKeepAlive}
	ln, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		if hint := portInUseHint(err, addr, port, "stop it, or give another --oob-port (or --oob-port 0 to host no tests)"); hint != "" {
			return nil, fmt.Errorf("listen on TCP %v port %d for pingpong and perftest clients: %w: %s", addr, port, err, hint)
		}
		return nil, fmt.Errorf("listen on TCP %v port %d for pingpong and perftest clients: %w (another \"tbrdma write-bw\" or perftest server? stop it, or give --oob-port 0 to host no tests)", addr, port, err)
	}
	return ln, nil
}
