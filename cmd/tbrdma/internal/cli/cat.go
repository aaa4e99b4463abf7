package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/stream"
	"github.com/tbrdma/tbrdma/verbs"
)

type catOptions struct {
	IO         *ui.IO
	Now        func() time.Time
	OpenDevice func(netip.Addr) (*verbs.Context, error)
	// Resolve turns the peer argument into an address.
	Resolve func(ctx context.Context, host string) (netip.Addr, error)
	// Source returns the local address the kernel routes to peer from.
	Source func(peer netip.Addr) (netip.Addr, error)
	// Addrs lists the local addresses a receiver listens on without --bind.
	Addrs func() ([]netip.Addr, error)

	Peer    string
	Port    int
	Bind    string
	Timeout float64 // seconds
	// AnyInterface lets a receiver without --bind listen on interfaces
	// that are not Thunderbolt (iface.go).
	AnyInterface bool

	bind    netip.Addr
	timeout time.Duration

	// Test hooks: ready is called once a receiver listens; finHook may
	// change the sender's trailer before it leaves.
	ready   func([]netip.AddrPort)
	finHook func(*catTrailer)
	// findServe finds the tbrdma serve that holds UDP 4791 on one of
	// the addresses (catrelay.go); tests replace it.
	findServe func([]netip.Addr) (catServeRef, bool)
}

func newCmdCat(f *Factory, runF func(*catOptions) error) *cobra.Command {
	opts := &catOptions{IO: f.IO, Now: f.Now, Resolve: resolveHost, Source: routeSource, findServe: findServeRelay}
	opts.Addrs = servingAddrsFunc(&opts.AnyInterface)
	cmd := &cobra.Command{
		Use:   "cat [flags] [peer]",
		Short: "Stream stdin to a peer over RDMA, or receive one stream to stdout",
		Long: fmt.Sprintf(`With a peer, stream standard input to it over RDMA; without, wait for one
stream, write it to standard output and exit. Made for shell pipelines:

  tar c dir | tbrdma cat 198.18.0.2      # on the sending machine
  tbrdma cat > dir.tar                   # on 198.18.0.2, started first

The connection is a tbrdma stream (rdma_cm, RDMA_PS_TCP, port %d; an RC
queue pair): the receiver advertises a ring of %d registered %d MiB buffers,
the sender RDMA WRITEs chunks into it with immediate data, and the receiver
hands each slot back once written out (flow control). At the end the sender
sends the length and SHA-256 of the stream, the receiver compares them with
what it got and answers. The cat protocol is tbrdma-cat/2: both ends need a
tbrdma that speaks it.

Exit status: 0 only if every byte arrived intact (the receiver checked the
length and SHA-256; the sender got its confirmation), 1 otherwise — with a
message saying what differed or failed — 2 for bad usage, 130 if
interrupted. Standard output carries nothing but the data; messages go to
standard error, and progress (bytes, rate) too when it is a terminal.

Without --bind a receiver listens on every up IPv4 address of the
Thunderbolt interfaces (each a device with UDP 4791; --any-interface: of
every non-loopback interface), a sender uses the kernel's source address
for the peer. -W bounds the connection's setup: the sender's, and the
receiver's wait from a connection request to the established
connection; a receiver waits for its sender without limit.

On a machine where "tbrdma serve" holds UDP 4791, a receiver has that serve
listen for it and relay the stream (over a unix socket of serve's, for the
same user only); the sender sees no difference.`, catDefaultPort, catSlots, catSlotSize>>20),
		Example: `  tbrdma cat > dir.tar                     # receiver, on 198.18.0.2
  tar c dir | tbrdma cat 198.18.0.2        # sender
  tbrdma cat --bind 198.18.0.1 -p 9000 | tar x`,
		Args:              maxArgs(1),
		ValidArgsFunction: completePeers(f),
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
			return runCat(c.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&opts.Port, "port", "p", catDefaultPort, "rdma_cm `port` to listen on, or of the peer")
	fl.StringVar(&opts.Bind, "bind", "", "local IP `address` for RoCE (default: receiver every Thunderbolt address, sender the kernel's source address for the peer)")
	fl.VarP(newSecondsFlag(&opts.Timeout, 10), "timeout", "W", "wait at most `seconds` for the connection's setup")
	addAnyInterfaceFlag(fl, &opts.AnyInterface)
	return cmd
}

func (o *catOptions) check() error {
	var err error
	if o.bind, err = parseBind(o.Bind); err != nil {
		return err
	}
	if o.Port < 1 || o.Port > 65535 {
		return FlagErrorf("invalid -p %d: want 1..65535", o.Port)
	}
	if !(o.Timeout > 0) || o.Timeout > 1e6 || math.IsNaN(o.Timeout) {
		return FlagErrorf("invalid -W %v: want seconds, more than 0", o.Timeout)
	}
	o.timeout = time.Duration(o.Timeout * float64(time.Second))
	return nil
}

func runCat(ctx context.Context, o *catOptions) error {
	if o.Peer != "" {
		return runCatSend(ctx, o)
	}
	return runCatReceive(ctx, o)
}

// catProgress is cat's progress line on a terminal (ui.Progress: bytes,
// rate, elapsed; from a second into the stream, at most four times a
// second) and its closing summary.
type catProgress struct {
	mu    sync.Mutex // update runs on the sender's copy goroutine
	p     *ui.Progress
	w     io.Writer
	on    bool
	now   func() time.Time
	start time.Time
	verb  string
}

func newCatProgress(o *catOptions, verb string) *catProgress {
	return &catProgress{p: ui.NewProgress(o.IO, o.Now, "tbrdma cat: "+verb), w: o.IO.ErrOut, on: o.IO.IsStderrTTY(),
		now: o.Now, start: o.Now(), verb: verb}
}

func (p *catProgress) update(n uint64) {
	p.mu.Lock()
	p.p.Update(n)
	p.mu.Unlock()
}

// done replaces the progress line by a summary (terminal only).
func (p *catProgress) done(n uint64, what string) {
	p.clear()
	if !p.on {
		return
	}
	d := p.now().Sub(p.start)
	fmt.Fprintf(p.w, "tbrdma cat: %s %d bytes (%s) in %.2f s, %s/s; %s\n", p.verb, n, ui.FormatBytes(n), d.Seconds(), ui.FormatBytes(uint64(catRate(n, d))), what)
}

// clear removes the progress line before an error message.
func (p *catProgress) clear() {
	p.mu.Lock()
	p.p.Clear()
	p.mu.Unlock()
}

func catRate(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// catSum abbreviates a digest for messages.
func catSum(s [sha256.Size]byte) string { return fmt.Sprintf("%x", s[:8]) + "…" }

// --- protocol ---------------------------------------------------------------

// The cat protocol, "tbrdma-cat/2", runs over a stream connection
// (package stream, "tbs2"; docs/wire-format.md):
//
//  1. The sender dials the receiver's listener and writes catHello, then
//     its input, then a trailer: status (catOK, or catIncomplete when it
//     could not read its input to the end), length (u64) and SHA-256 of
//     the input, big-endian, catTrailerSize bytes. Then it ends its
//     direction (CloseWrite: the stream's FIN, checked by its CRC-32C).
//  2. The receiver writes out all but the last catTrailerSize bytes, and
//     at the end of the stream checks the trailer against what it wrote.
//  3. It answers on its own direction with a verdict of the same form:
//     status catOK, catMismatch or catIncomplete, the length and SHA-256
//     of what it wrote; then it ends its direction. It answers early,
//     while data still comes, when it cannot write its output
//     (catOutputFailed; catOutputClosed when its output is a closed
//     pipe) or when it already serves another sender (catBusy); the
//     sender then stops.
const (
	catDefaultPort = 18516
	catSlots       = 8       // the receiver's ring: catSlots × catSlotSize
	catSlotSize    = 1 << 20 // bytes
	catHello       = "tbrdma-cat/2\n"
	catTrailerSize = 1 + 8 + sha256.Size
)

// Trailer and verdict statuses.
const (
	catOK           byte = 0 // trailer: the input ended; verdict: length and SHA-256 match
	catMismatch     byte = 1 // verdict: they do not
	catOutputFailed byte = 2 // verdict: the receiver could not write its output
	catBusy         byte = 3 // verdict: the receiver serves another sender
	catIncomplete   byte = 4 // trailer: the input failed; verdict: so noted
	catOutputClosed byte = 5 // verdict: the receiver's output closed (EPIPE: | head)
)

// catTrailer is the sender's trailer, or the receiver's verdict.
type catTrailer struct {
	status byte
	bytes  uint64
	sum    [sha256.Size]byte
}

func (t catTrailer) marshal() []byte {
	b := make([]byte, catTrailerSize)
	b[0] = t.status
	binary.BigEndian.PutUint64(b[1:], t.bytes)
	copy(b[9:], t.sum[:])
	return b
}

func parseCatTrailer(b []byte) (catTrailer, error) {
	if len(b) != catTrailerSize || b[0] > catOutputClosed {
		return catTrailer{}, fmt.Errorf("protocol error: a cat trailer of %d bytes, status %d (a peer of another cat protocol?)", len(b), firstByte(b))
	}
	t := catTrailer{status: b[0], bytes: binary.BigEndian.Uint64(b[1:])}
	copy(t.sum[:], b[9:])
	return t, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// catCause strips the net.OpError a stream error comes in: its
// addresses are in cat's own message.
func catCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// --- receiver ---------------------------------------------------------------

func runCatReceive(ctx context.Context, o *catOptions) error {
	errOut := o.IO.ErrOut
	tty := o.IO.IsStderrTTY()
	if ref, ok := o.serveRelay(); ok {
		return runCatRelayed(ctx, o, ref)
	}
	devs, err := openServingDevices("cat", o.bind, o.Addrs, o.OpenDevice, errOut)
	defer closeDevices(devs)
	if err != nil {
		return err
	}
	conns := make(chan *stream.Conn)
	quit := make(chan struct{})
	var (
		listeners []*stream.Listener
		wg        sync.WaitGroup
	)
	defer func() {
		close(quit)
		for _, l := range listeners {
			l.Close()
		}
		wg.Wait()
	}()
	var bound []netip.AddrPort
	for _, d := range devs {
		a := netip.AddrPortFrom(d.LocalAddr().Addr(), uint16(o.Port))
		lc := stream.ListenConfig{Device: d, Slots: catSlots, SlotSize: catSlotSize, Backlog: 4, Timeout: o.timeout}
		l, err := lc.Listen(ctx, a.String())
		if err != nil {
			return fmt.Errorf("cat: listen on %v port %d: %w", a.Addr(), a.Port(), catCause(err))
		}
		listeners = append(listeners, l)
		bound = append(bound, l.Addr().(stream.Addr).AddrPort)
		wg.Add(1)
		go func() {
			defer wg.Done()
			catAcceptLoop(l, conns, quit)
		}()
	}
	if o.ready != nil {
		o.ready(bound)
	}
	if tty {
		fmt.Fprintf(errOut, "tbrdma cat: waiting for a stream on %s port %d\n", joinAddrs(bound), o.Port)
	}

	var c *stream.Conn
	for c == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case nc := <-conns:
			stop := context.AfterFunc(ctx, func() { nc.Abort() })
			err := catCheckHello(nc, o.timeout)
			stop()
			if ctx.Err() != nil {
				nc.Abort()
				return ctx.Err()
			}
			if err != nil {
				fmt.Fprintf(errOut, "tbrdma cat: rejected a connection from %v: %v\n", nc.RemoteAddr().(stream.Addr).AddrPort.Addr(), err)
				wg.Add(1)
				go func() { defer wg.Done(); nc.Abort() }()
				continue
			}
			c = nc
		}
	}
	// Later senders are told we are busy.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case nc := <-conns:
				wg.Add(1)
				go func() {
					defer wg.Done()
					nc.Write(catTrailer{status: catBusy}.marshal())
					nc.CloseWrite()
					nc.Close()
				}()
			case <-quit:
				return
			}
		}
	}()
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Abort() })
	defer stop()
	if tty {
		fmt.Fprintf(errOut, "tbrdma cat: receiving from %v\n", c.RemoteAddr().(stream.Addr).AddrPort.Addr())
	}
	// A closed standard output (tbrdma cat | head) must fail the write
	// with EPIPE, which the sender is told of, instead of killing us.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	err = catReceive(o, c, c.RemoteAddr().(stream.Addr).AddrPort.Addr())
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// catCheckHello reads the sender's catHello, within timeout.
func catCheckHello(c *stream.Conn, timeout time.Duration) error {
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, len(catHello))
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("no cat greeting: %v", catCause(err))
	}
	if string(b) != catHello {
		return fmt.Errorf("not a tbrdma cat sender (greeting %q)", b)
	}
	return nil
}

// catOutput writes the stream to out, holding back its last
// catTrailerSize bytes (the trailer, once the stream ends), and hashes
// what it wrote.
type catOutput struct {
	out  io.Writer
	h    hash.Hash
	prog *catProgress
	tail []byte
	n    uint64 // bytes written to out
	err  error  // out failed
}

func (w *catOutput) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	total := len(p)
	if len(w.tail)+len(p) <= catTrailerSize {
		w.tail = append(w.tail, p...)
		return total, nil
	}
	emit := len(w.tail) + len(p) - catTrailerSize
	if e := min(emit, len(w.tail)); e > 0 {
		if err := w.emit(w.tail[:e]); err != nil {
			return 0, err
		}
		w.tail = w.tail[:copy(w.tail, w.tail[e:])]
		emit -= e
	}
	if emit > 0 {
		if err := w.emit(p[:emit]); err != nil {
			return 0, err
		}
		p = p[emit:]
	}
	w.tail = append(w.tail, p...)
	return total, nil
}

func (w *catOutput) emit(b []byte) error {
	n, err := w.out.Write(b)
	w.h.Write(b[:n])
	w.n += uint64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	w.err = err
	w.prog.update(w.n)
	return err
}

// catStream is the receiver's side of a sender's stream: a *stream.Conn,
// or the relay of one by tbrdma serve (catrelay.go). WriteTo returns nil
// at the stream's checked end, an error matching stream.ErrPeerClosed
// when the sender left without it.
type catStream interface {
	io.Writer
	io.WriterTo
	CloseWrite() error
}

// catReceive receives the stream of an accepted sender at peer.
func catReceive(o *catOptions, c catStream, peer netip.Addr) error {
	prog := newCatProgress(o, "received")
	w := &catOutput{out: o.IO.Out, h: sha256.New(), prog: prog, tail: make([]byte, 0, catTrailerSize)}
	_, err := c.WriteTo(w)
	sum := [sha256.Size]byte(w.h.Sum(nil))
	answer := func(status byte) {
		c.Write(catTrailer{status: status, bytes: w.n, sum: sum}.marshal())
		c.CloseWrite()
	}
	received := w.n + uint64(len(w.tail))
	if w.err != nil || err != nil {
		prog.clear()
	}
	switch {
	case w.err != nil && errors.Is(w.err, syscall.EPIPE):
		answer(catOutputClosed)
		return fmt.Errorf("cat: the output closed after %d bytes: %w (stream abandoned; the sender was told)", w.n, w.err)
	case w.err != nil:
		answer(catOutputFailed)
		return fmt.Errorf("cat: writing the output: %w (stream abandoned; the sender was told)", w.err)
	case errors.Is(err, stream.ErrPeerClosed):
		// No FIN, so no trailer: what was held back is data.
		if len(w.tail) > 0 {
			w.emit(w.tail)
		}
		return fmt.Errorf("cat: the stream is incomplete: the sender disconnected after %d bytes without its final length and checksum", received)
	case err != nil:
		return fmt.Errorf("cat: the stream from the sender %v failed after %d bytes: %v", peer, received, catCause(err))
	}
	t, err := parseCatTrailer(w.tail)
	if err != nil {
		prog.clear()
		answer(catMismatch)
		return fmt.Errorf("cat: %v", err)
	}
	if t.status == catIncomplete {
		prog.clear()
		answer(catIncomplete)
		return fmt.Errorf("cat: the stream is incomplete: the sender could not read its input after %d bytes", t.bytes)
	}
	if t.bytes != w.n || t.sum != sum {
		prog.clear()
		answer(catMismatch)
		var what []string
		if t.bytes != w.n {
			what = append(what, fmt.Sprintf("length: received %d bytes, the sender sent %d", w.n, t.bytes))
		}
		if t.sum != sum {
			what = append(what, fmt.Sprintf("SHA-256: received %s, the sender's %s", catSum(sum), catSum(t.sum)))
		}
		return fmt.Errorf("cat: integrity check failed — %s", strings.Join(what, "; "))
	}
	answer(catOK)
	prog.done(w.n, "length and SHA-256 match")
	return nil
}

// --- sender -----------------------------------------------------------------

func runCatSend(ctx context.Context, o *catOptions) error {
	addr, dev, err := openForPeer(ctx, "cat", o.Peer, o.bind, o.Resolve, o.Source, o.OpenDevice)
	if err != nil {
		return err
	}
	defer dev.Close()
	peer := netip.AddrPortFrom(addr, uint16(o.Port))
	c, err := catDial(ctx, o, dev, peer)
	if err != nil {
		return err
	}
	defer c.Close()
	return catSend(ctx, o, c, peer.Addr())
}

// catDial connects to the receiver at peer; -W bounds the whole setup.
func catDial(ctx context.Context, o *catOptions, dev *verbs.Context, peer netip.AddrPort) (*stream.Conn, error) {
	where := fmt.Sprintf("%v port %d", peer.Addr(), peer.Port())
	dctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// Our own ring carries only the receiver's verdict.
	d := stream.Dialer{Device: dev, Slots: 1, SlotSize: 4096, Timeout: o.timeout}
	c, err := d.Dial(dctx, peer.String())
	if err == nil {
		return c, nil
	}
	var rej *rdmacm.RejectError
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &rej) && rej.Reason == rdmacm.RejectInvalidServiceID:
		return nil, fmt.Errorf("cat: no rdma_cm listener on %s (rejected: %v) — is `tbrdma cat` without a peer running there?", where, rej.Reason)
	case errors.As(err, &rej) && bytes.Contains(rej.PrivateData, []byte("not a tbrdma cat sender")):
		return nil, fmt.Errorf("cat: %s rejected the connection: the receiver speaks another cat protocol (an older tbrdma? this one speaks %s): run the same tbrdma version on both ends", where, strings.TrimSpace(catHello))
	case errors.As(err, &rej) && !rej.Auth:
		msg := ""
		if pd := bytes.TrimRight(rej.PrivateData, "\x00"); len(pd) > 0 && len(pd) < 100 {
			msg = fmt.Sprintf(": %q", pd)
		}
		return nil, fmt.Errorf("cat: %s rejected the connection (%v)%s", where, rej.Reason, msg)
	}
	if msg, ok := unreachableText(err, "`tbrdma cat` without a peer"); ok {
		return nil, errors.New("cat: " + msg)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("cat: no answer from %s within %v (from %v): is tbrdma running there, on UDP port 4791, with `tbrdma cat` waiting?", where, o.timeout, dev.LocalAddr().Addr())
	}
	return nil, fmt.Errorf("cat: connect to %s: %v", where, catCause(err))
}

// catCopied is the end of the sender's input.
type catCopied struct {
	trailer catTrailer // as sent
	readErr error      // the input failed
	sendErr error      // the stream failed
}

// catCopy writes catHello, the input and the trailer to c, then ends
// its direction.
func catCopy(o *catOptions, c *stream.Conn, prog *catProgress, sent *atomic.Uint64) catCopied {
	if _, err := c.Write([]byte(catHello)); err != nil {
		return catCopied{sendErr: err}
	}
	h := sha256.New()
	buf := make([]byte, catSlotSize)
	var r catCopied
	for {
		n, err := o.IO.In.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			if _, werr := c.Write(buf[:n]); werr != nil {
				r.sendErr = werr
				return r
			}
			r.trailer.bytes += uint64(n)
			sent.Store(r.trailer.bytes)
			prog.update(r.trailer.bytes)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			r.readErr = err
			r.trailer.status = catIncomplete
			break
		}
	}
	r.trailer.sum = [sha256.Size]byte(h.Sum(nil))
	t := r.trailer
	if o.finHook != nil {
		o.finHook(&t)
	}
	if _, err := c.Write(t.marshal()); err != nil {
		r.sendErr = err
		return r
	}
	if err := c.CloseWrite(); err != nil {
		r.sendErr = err
	}
	return r
}

// catVerdict is the receiver's answer, or why none came.
type catVerdict struct {
	catTrailer
	err error
}

// catSend streams the input to c and waits for the receiver's verdict.
func catSend(ctx context.Context, o *catOptions, c *stream.Conn, peer netip.Addr) error {
	prog := newCatProgress(o, "sent")
	var sent atomic.Uint64
	copied := make(chan catCopied, 1)
	go func() { copied <- catCopy(o, c, prog, &sent) }()
	verdicts := make(chan catVerdict, 1)
	go func() {
		b := make([]byte, catTrailerSize)
		if _, err := io.ReadFull(c, b); err != nil {
			verdicts <- catVerdict{err: err}
			return
		}
		t, err := parseCatTrailer(b)
		verdicts <- catVerdict{catTrailer: t, err: err}
	}()
	var (
		cp *catCopied
		v  *catVerdict
	)
	for v == nil {
		select {
		case <-ctx.Done():
			prog.clear()
			c.Abort() // no FIN: the receiver does not take the stream for a whole one
			return ctx.Err()
		case r := <-copied:
			cp, copied = &r, nil
			if r.sendErr != nil { // a verdict may say why
				t := time.NewTimer(2 * time.Second)
				select {
				case r := <-verdicts:
					v = &r
				case <-t.C:
					v = &catVerdict{err: r.sendErr}
				}
				t.Stop()
			}
		case r := <-verdicts:
			v = &r
		}
	}
	prog.clear()
	early := v.err == nil && (v.status == catOutputFailed || v.status == catOutputClosed || v.status == catBusy)
	if cp == nil && !early && v.err == nil {
		r := <-copied // it has ended its direction, or is about to
		cp = &r
	}
	if cp == nil || cp.sendErr != nil {
		c.Abort()
	}
	switch {
	case early && v.status == catOutputFailed:
		return fmt.Errorf("cat: the receiver could not write its output after %d bytes; stream abandoned", v.bytes)
	case early && v.status == catOutputClosed:
		return fmt.Errorf("cat: the receiver's output closed after %d bytes (whatever read it stopped, as head does); stream abandoned", v.bytes)
	case early:
		return fmt.Errorf("cat: the receiver %v is busy with another stream: try again once it is done", peer)
	case cp != nil && cp.readErr != nil:
		return fmt.Errorf("cat: reading the input after %d bytes: %w (the receiver was told the stream is incomplete)", cp.trailer.bytes, cp.readErr)
	case v.err != nil && (errors.Is(v.err, stream.ErrPeerClosed) || errors.Is(v.err, io.EOF) || errors.Is(v.err, io.ErrUnexpectedEOF)):
		return fmt.Errorf("cat: the receiver disconnected after %d bytes without confirming", sent.Load())
	case v.err != nil:
		return fmt.Errorf("cat: the stream to the receiver %v failed after %d bytes: %v", peer, sent.Load(), catCause(v.err))
	case v.status != catOK:
		return fmt.Errorf("cat: the receiver reports an integrity failure: it got %d bytes (SHA-256 %s), we sent %d (SHA-256 %s)",
			v.bytes, catSum(v.sum), cp.trailer.bytes, catSum(cp.trailer.sum))
	case v.bytes != cp.trailer.bytes || v.sum != cp.trailer.sum:
		return fmt.Errorf("cat: the receiver confirmed %d bytes (SHA-256 %s) but we sent %d (SHA-256 %s)",
			v.bytes, catSum(v.sum), cp.trailer.bytes, catSum(cp.trailer.sum))
	}
	prog.done(cp.trailer.bytes, "confirmed by the receiver")
	return nil
}

// joinAddrs lists the addresses of bound, for cat's waiting line.
func joinAddrs(bound []netip.AddrPort) string {
	s := make([]string, len(bound))
	for i, b := range bound {
		s[i] = b.Addr().String()
	}
	return strings.Join(s, ", ")
}
