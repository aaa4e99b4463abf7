package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/rdmacm"
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
	// change the sender's final message before it leaves.
	ready   func([]netip.AddrPort)
	finHook func(*catMsg)
}

func newCmdCat(f *Factory, runF func(*catOptions) error) *cobra.Command {
	opts := &catOptions{IO: f.IO, Now: f.Now, Resolve: resolveHost, Source: routeSource}
	opts.Addrs = servingAddrsFunc(&opts.AnyInterface)
	cmd := &cobra.Command{
		Use:   "cat [flags] [peer]",
		Short: "Stream stdin to a peer over RDMA, or receive one stream to stdout",
		Long: fmt.Sprintf(`With a peer, stream standard input to it over RDMA; without, wait for one
stream, write it to standard output and exit. Made for shell pipelines:

  tar c dir | tbrdma cat 198.18.0.2      # on the sending machine
  tbrdma cat > dir.tar                   # on 198.18.0.2, started first

The connection is rdma_cm (RDMA_PS_TCP, port %d) with an RC queue pair. The
receiver advertises a ring of %d registered %d MiB buffers; the sender RDMA
WRITEs chunks into it with immediate data, and the receiver hands each slot
back once written out (flow control). At the end the sender sends the
length and SHA-256 of the stream, the receiver compares them with what it
got and answers.

Exit status: 0 only if every byte arrived intact (the receiver checked the
length and SHA-256; the sender got its confirmation), 1 otherwise — with a
message saying what differed or failed — 2 for bad usage, 130 if
interrupted. Standard output carries nothing but the data; messages go to
standard error, and progress (bytes, rate) too when it is a terminal.

Without --bind a receiver listens on every up IPv4 address of the
Thunderbolt interfaces (each a device with UDP 4791; --any-interface: of
every non-loopback interface), a sender uses the kernel's source address
for the peer. -W bounds the connection's setup: each step of the sender's,
and the receiver's wait from a connection request to the established
connection; a receiver waits for its sender without limit.`, catDefaultPort, catSlots, catSlotSize>>20),
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
	if o.bind, err = parseBind(o.Bind, ""); err != nil {
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

// catEvents reads an event channel on its own goroutine: DISCONNECTED of
// the connection closes disc, CONNECT_REQUESTs once a connection is taken
// are rejected, TIMEWAIT_EXIT is dropped, the rest go to ch.
type catEvents struct {
	ech  *rdmacm.EventChannel
	ch   chan *rdmacm.Event
	quit chan struct{}
	done chan struct{}
	disc chan struct{}
	conn atomic.Pointer[rdmacm.ID]
	once sync.Once
}

func newCatEvents(ech *rdmacm.EventChannel) *catEvents {
	e := &catEvents{ech: ech, ch: make(chan *rdmacm.Event, 16), quit: make(chan struct{}),
		done: make(chan struct{}), disc: make(chan struct{})}
	go e.pump()
	return e
}

func (e *catEvents) pump() {
	defer close(e.done)
	for {
		ev, err := e.ech.GetEvent(context.Background())
		if err != nil {
			return
		}
		switch {
		case ev.Type == rdmacm.EventTimewaitExit:
			continue
		case ev.Type == rdmacm.EventDisconnected:
			if ev.ID == e.conn.Load() {
				e.once.Do(func() { close(e.disc) })
			}
			continue
		case ev.Type == rdmacm.EventConnectRequest && e.conn.Load() != nil:
			ev.ID.Reject([]byte("tbrdma cat: busy"))
			ev.ID.Destroy()
			continue
		}
		select {
		case e.ch <- ev:
		case <-e.quit:
			return
		}
	}
}

// close destroys the channel and the IDs of requests never answered.
func (e *catEvents) close() {
	close(e.quit)
	e.ech.Destroy()
	<-e.done
	for {
		select {
		case ev := <-e.ch:
			if ev.Type == rdmacm.EventConnectRequest {
				ev.ID.Reject(nil)
				ev.ID.Destroy()
			}
		default:
			return
		}
	}
}

// disconnect ends the connection: Disconnect (our DREQ, or the DREP to
// the peer's), then up to two seconds for the DISCONNECTED event.
func (e *catEvents) disconnect(id *rdmacm.ID) {
	if id.Disconnect() == nil {
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-e.disc:
		case <-t.C:
		}
	}
}

// catProgress is cat's progress line on a terminal (ui.Progress: bytes,
// rate, elapsed; from a second into the stream, at most four times a
// second) and its closing summary.
type catProgress struct {
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

func (p *catProgress) update(n uint64) { p.p.Update(n) }

// done replaces the progress line by a summary (terminal only).
func (p *catProgress) done(n uint64, what string) {
	p.p.Clear()
	if !p.on {
		return
	}
	d := p.now().Sub(p.start)
	fmt.Fprintf(p.w, "tbrdma cat: %s %d bytes (%s) in %.2f s, %s/s; %s\n", p.verb, n, ui.FormatBytes(n), d.Seconds(), ui.FormatBytes(uint64(catRate(n, d))), what)
}

// clear removes the progress line before an error message.
func (p *catProgress) clear() { p.p.Clear() }

func catRate(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// catSum abbreviates a digest for messages.
func catSum(s [sha256.Size]byte) string { return fmt.Sprintf("%x", s[:8]) + "…" }

// --- receiver ---------------------------------------------------------------

func runCatReceive(ctx context.Context, o *catOptions) error {
	errOut := o.IO.ErrOut
	tty := o.IO.IsStderrTTY()
	devs, err := openServingDevices("cat", o.bind, o.Addrs, o.OpenDevice, errOut)
	defer closeDevices(devs)
	if err != nil {
		return err
	}

	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return err
	}
	evs := newCatEvents(ech)
	defer evs.close()
	var listeners []*rdmacm.ID
	stopListening := func() {
		for _, l := range listeners {
			l.Destroy()
		}
		listeners = nil
	}
	defer stopListening()
	var bound []netip.AddrPort
	for _, d := range devs {
		l, err := ech.CreateID(d, rdmacm.PSTCP)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
		a := netip.AddrPortFrom(d.LocalAddr().Addr(), uint16(o.Port))
		if err := l.Bind(a); err != nil {
			return fmt.Errorf("cat: listen on %v port %d: %w", a.Addr(), a.Port(), err)
		}
		if err := l.Listen(4); err != nil {
			return fmt.Errorf("cat: listen on %v port %d: %w", a.Addr(), a.Port(), err)
		}
		bound = append(bound, l.LocalAddr())
	}
	if o.ready != nil {
		o.ready(bound)
	}
	if tty {
		var s []string
		for _, b := range bound {
			s = append(s, b.Addr().String())
		}
		fmt.Fprintf(errOut, "tbrdma cat: waiting for a stream on %s port %d\n", strings.Join(s, ", "), o.Port)
	}

	id, c, err := catAccept(ctx, o, evs, stopListening)
	if err != nil {
		return err
	}
	peer := id.RemoteAddr()
	defer id.Destroy()
	defer c.free()
	if tty {
		fmt.Fprintf(errOut, "tbrdma cat: receiving from %v\n", peer.Addr())
	}
	err = catReceive(ctx, o, c, evs)
	evs.disconnect(id)
	return err
}

// catAccept waits for a tbrdma cat sender and accepts it: the QP, the
// ring, the REP, ESTABLISHED.
func catAccept(ctx context.Context, o *catOptions, evs *catEvents, stopListening func()) (*rdmacm.ID, *catConn, error) {
	for {
		var ev *rdmacm.Event
		select {
		case ev = <-evs.ch:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		if ev.Type != rdmacm.EventConnectRequest {
			continue
		}
		id := ev.ID
		if !bytes.HasPrefix(ev.PrivateData(), []byte(catReqMagic)) {
			id.Reject([]byte("tbrdma cat: not a tbrdma cat sender"))
			id.Destroy()
			fmt.Fprintf(o.IO.ErrOut, "tbrdma cat: rejected a connection from %v: not a tbrdma cat sender\n", id.RemoteAddr().Addr())
			continue
		}
		evs.conn.Store(id)
		stopListening()
		c, err := newCatConn(id, catSlots)
		if err == nil {
			err = c.regData(catSlots*catSlotSize, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		}
		if err == nil {
			ring := catRing{addr: c.data.Addr(), rkey: c.data.RKey(), slotSize: catSlotSize, slots: catSlots}
			err = id.Accept(&rdmacm.ConnParam{PrivateData: ring.marshal(), RNRRetryCount: 7})
		}
		if err != nil {
			if c != nil {
				c.free()
			}
			id.Reject(nil)
			id.Destroy()
			return nil, nil, fmt.Errorf("cat: accept %v: %w", id.RemoteAddr().Addr(), err)
		}
		timer := time.NewTimer(o.timeout)
		defer timer.Stop()
		for {
			select {
			case ev := <-evs.ch:
				switch {
				case ev.ID == id && ev.Type == rdmacm.EventEstablished:
					return id, c, nil
				case ev.ID == id:
					c.free()
					id.Destroy()
					return nil, nil, fmt.Errorf("cat: connection from %v failed: %v", id.RemoteAddr().Addr(), ev)
				case ev.Type == rdmacm.EventConnectRequest:
					ev.ID.Reject([]byte("tbrdma cat: busy"))
					ev.ID.Destroy()
				}
				continue
			case <-timer.C:
				err = fmt.Errorf("cat: connection from %v not established within %v", id.RemoteAddr().Addr(), o.timeout)
			case <-evs.disc:
				err = fmt.Errorf("cat: %v disconnected while connecting", id.RemoteAddr().Addr())
			case <-ctx.Done():
				err = ctx.Err()
			}
			c.free()
			id.Destroy()
			return nil, nil, err
		}
	}
}

// catReceive runs the receiving end of an established connection.
func catReceive(ctx context.Context, o *catOptions, c *catConn, evs *catEvents) error {
	prog := newCatProgress(o, "received")
	out := o.IO.Out
	h := sha256.New()
	ring := c.data.Buf()
	var (
		seq, total, credited uint64
		fin                  *catMsg // the sender's final message
		ack                  *catMsg // ours, once decided
		ackPosted, acked     bool
		writeErr             error
		armed, gone          bool
	)
	for {
		wcs, err := c.poll()
		if err != nil {
			prog.clear()
			return fmt.Errorf("cat: %w", err)
		}
		for i := range wcs {
			wc := &wcs[i]
			if err := wc.Err(); err != nil {
				prog.clear()
				if gone || ctx.Err() != nil {
					break
				}
				if answered(fin, ack, ackPosted) {
					// The stream is whole and verified and our answer
					// went out; the sender leaves once it has it, and
					// the acknowledgement of our answer (or of a last
					// credit) can be lost on the way: retries then meet
					// silence. Its own exit status says whether it got
					// the answer.
					gone = true
					break
				}
				return fmt.Errorf("cat: transfer failed after %d bytes: %w%s", total, err, catFailHint(err, peerLabel("sender", c.qp)))
			}
			switch wc.Opcode {
			case verbs.WCSend:
				if wc.WRID == catWRIDFin {
					acked = true
				}
			case verbs.WCRecvRDMAWithImm:
				if fin != nil {
					return errors.New("cat: protocol error: data after the final message")
				}
				n := int(wc.ImmData & 0xffffff)
				if wc.ImmData>>24 != uint32(seq&0xff) || n != int(wc.ByteLen) || n == 0 || n > catSlotSize {
					return fmt.Errorf("cat: protocol error: chunk %d: immediate %#x, %d bytes", seq, wc.ImmData, wc.ByteLen)
				}
				off := int(seq%catSlots) * catSlotSize
				data := ring[off : off+n]
				h.Write(data)
				if writeErr == nil {
					if _, err := out.Write(data); err != nil {
						writeErr = err
						ack = &catMsg{typ: catAck, status: catAckAborted}
					}
				}
				total += uint64(n)
				seq++
				if err := c.postRecv(wc.WRID); err != nil {
					return fmt.Errorf("cat: %w", err)
				}
			case verbs.WCRecv:
				m, err := c.recvMsg(wc)
				if err != nil {
					return fmt.Errorf("cat: %w", err)
				}
				if m.typ != catFin || fin != nil {
					return fmt.Errorf("cat: protocol error: control message %d", m.typ)
				}
				fin = &m
				if ack == nil {
					ack = &catMsg{typ: catAck}
					if m.status == catFinAborted {
						ack.status = catAckAborted
					} else if m.bytes != total || m.count != seq || [sha256.Size]byte(h.Sum(nil)) != m.sum {
						ack.status = catAckMismatch
					}
				}
			}
		}
		prog.update(total)
		// Return the slots written out, all in one credit.
		if credited < seq && writeErr == nil && c.canSend() {
			if err := c.sendMsg(&catMsg{typ: catCredit, count: seq}, catWRIDCtrlSend); err != nil {
				return fmt.Errorf("cat: %w", err)
			}
			credited = seq
		}
		if ack != nil && !ackPosted && c.canSend() {
			ack.bytes, ack.count, ack.sum = total, seq, [sha256.Size]byte(h.Sum(nil))
			if err := c.sendMsg(ack, catWRIDFin); err != nil {
				return fmt.Errorf("cat: %w", err)
			}
			ackPosted = true
		}
		if acked || gone && len(wcs) == 0 {
			break
		}
		if len(wcs) > 0 {
			continue
		}
		if !armed {
			if err := c.arm(); err != nil {
				return fmt.Errorf("cat: %w", err)
			}
			armed = true
			continue
		}
		select {
		case <-c.notify:
		case <-evs.disc:
			gone = true // one more poll for what arrived before
		case <-ctx.Done():
			prog.clear()
			return ctx.Err()
		}
		armed = false
	}
	if acked && !gone { // the sender disconnects once it has our answer
		t := time.NewTimer(2 * time.Second)
		select {
		case <-evs.disc:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	sum := [sha256.Size]byte(h.Sum(nil))
	switch {
	case writeErr != nil:
		prog.clear()
		return fmt.Errorf("cat: writing the output: %w (stream abandoned; the sender was told)", writeErr)
	case fin == nil:
		prog.clear()
		return fmt.Errorf("cat: the stream is incomplete: the sender disconnected after %d bytes without its final length and checksum", total)
	case fin.status == catFinAborted:
		prog.clear()
		return fmt.Errorf("cat: the stream is incomplete: the sender could not read its input after %d bytes", fin.bytes)
	case !acked && !answered(fin, ack, ackPosted):
		prog.clear()
		return fmt.Errorf("cat: the sender disconnected before our confirmation")
	case ack.status != catAckOK:
		prog.clear()
		var what []string
		if fin.bytes != total {
			what = append(what, fmt.Sprintf("length: received %d bytes, the sender sent %d", total, fin.bytes))
		}
		if fin.count != seq {
			what = append(what, fmt.Sprintf("chunks: received %d, the sender sent %d", seq, fin.count))
		}
		if fin.sum != sum {
			what = append(what, fmt.Sprintf("SHA-256: received %s, the sender's %s", catSum(sum), catSum(fin.sum)))
		}
		return fmt.Errorf("cat: integrity check failed — %s", strings.Join(what, "; "))
	}
	if !acked {
		prog.clear()
		fmt.Fprintf(o.IO.ErrOut, "tbrdma: cat: the sender did not acknowledge our confirmation (it may have left once it had it; its exit status tells): the stream itself is whole\n")
	}
	prog.done(total, "length and SHA-256 match")
	return nil
}

// answered reports whether the receiver has the whole stream, checked
// against the sender's final message, and has sent its confirmation: what
// happens to the connection after that cannot spoil the output.
func answered(fin, ack *catMsg, ackPosted bool) bool {
	return fin != nil && fin.status != catFinAborted && ack != nil && ack.status == catAckOK && ackPosted
}

// --- sender -----------------------------------------------------------------

// catChunk is a buffer the reader filled: n bytes in local slot idx, or
// the end of the input (final) with the stream's length and digest, or
// the read error.
type catChunk struct {
	idx, n int
	final  bool
	total  uint64
	sum    [sha256.Size]byte
	err    error
}

// catReader fills the free local slots from in, in order, hashing as it
// goes. It hands a slot over when full, at the end of the input, or as
// soon as it holds data while the sender is idle (nothing in flight, no
// data waiting), so a slow trickle is not held back.
func catReader(in io.Reader, buf []byte, size int, free <-chan int, filled chan<- catChunk, idle *atomic.Bool, quit <-chan struct{}) {
	h := sha256.New()
	var total uint64
	put := func(c catChunk) bool {
		select {
		case filled <- c:
			return true
		case <-quit:
			return false
		}
	}
	for {
		var i int
		select {
		case i = <-free:
		case <-quit:
			return
		}
		b := buf[i*size : (i+1)*size]
		n := 0
		var err error
		for n < size {
			var m int
			m, err = in.Read(b[n:])
			n += m
			if err != nil || m > 0 && idle.Load() {
				break
			}
		}
		h.Write(b[:n])
		total += uint64(n)
		if n > 0 && !put(catChunk{idx: i, n: n}) {
			return
		}
		switch {
		case err == io.EOF:
			put(catChunk{final: true, total: total, sum: [sha256.Size]byte(h.Sum(nil))})
			return
		case err != nil:
			put(catChunk{final: true, total: total, err: err})
			return
		}
	}
}

func runCatSend(ctx context.Context, o *catOptions) error {
	addr, dev, err := openForPeer(ctx, "cat", o.Peer, o.bind, o.Resolve, o.Source, o.OpenDevice)
	if err != nil {
		return err
	}
	defer dev.Close()
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return err
	}
	evs := newCatEvents(ech)
	defer evs.close()
	id, err := ech.CreateID(dev, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	defer id.Destroy()
	evs.conn.Store(id)
	peer := netip.AddrPortFrom(addr, uint16(o.Port))
	c, ring, err := catConnect(ctx, o, id, evs, peer, dev.LocalAddr().Addr())
	if err != nil {
		return err
	}
	defer c.free()
	err = catSend(ctx, o, c, ring, evs)
	evs.disconnect(id)
	return err
}

// catConnect resolves, connects and returns the receiver's ring.
func catConnect(ctx context.Context, o *catOptions, id *rdmacm.ID, evs *catEvents, peer netip.AddrPort, local netip.Addr) (*catConn, catRing, error) {
	where := fmt.Sprintf("%v port %d", peer.Addr(), peer.Port())
	next := func(want rdmacm.EventType) (*rdmacm.Event, error) {
		t := time.NewTimer(o.timeout)
		defer t.Stop()
		select {
		case ev := <-evs.ch:
			if ev.Type == want {
				return ev, nil
			}
			switch {
			case ev.Type == rdmacm.EventRejected && rdmacm.RejectReason(ev.Status) == rdmacm.RejectInvalidServiceID:
				return nil, fmt.Errorf("cat: no rdma_cm listener on %s (rejected: %v) — is `tbrdma cat` without a peer running there?", where, rdmacm.RejectReason(ev.Status))
			case ev.Type == rdmacm.EventRejected:
				msg := ""
				if pd := bytes.TrimRight(ev.PrivateData(), "\x00"); len(pd) > 0 && len(pd) < 100 {
					msg = fmt.Sprintf(": %q", pd)
				}
				return nil, fmt.Errorf("cat: %s rejected the connection (%v)%s", where, rdmacm.RejectReason(ev.Status), msg)
			case ev.Type == rdmacm.EventUnreachable:
				return nil, fmt.Errorf("cat: %s is unreachable: no answer to the connection request (is rdma_rxe or tbrdma running there, on UDP port 4791?)", where)
			}
			return nil, fmt.Errorf("cat: connect to %s: %v", where, ev)
		case <-t.C:
			return nil, fmt.Errorf("cat: no answer from %s within %v (from %v): is tbrdma running there, on UDP port 4791, with `tbrdma cat` waiting?", where, o.timeout, local)
		case <-evs.disc:
			return nil, fmt.Errorf("cat: %s disconnected while connecting", where)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := id.ResolveAddr(peer.String(), o.timeout); err != nil {
		return nil, catRing{}, fmt.Errorf("cat: resolve %v: %w", peer, err)
	}
	if _, err := next(rdmacm.EventAddrResolved); err != nil {
		return nil, catRing{}, err
	}
	if err := id.ResolveRoute(o.timeout); err != nil {
		return nil, catRing{}, fmt.Errorf("cat: resolve route to %v: %w", peer, err)
	}
	if _, err := next(rdmacm.EventRouteResolved); err != nil {
		return nil, catRing{}, err
	}
	c, err := newCatConn(id, catMaxSlots)
	if err != nil {
		return nil, catRing{}, fmt.Errorf("cat: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			c.free()
		}
	}()
	if err := id.Connect(&rdmacm.ConnParam{PrivateData: []byte(catReqMagic), RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return nil, catRing{}, fmt.Errorf("cat: connect to %s: %w", where, err)
	}
	ev, err := next(rdmacm.EventEstablished)
	if err != nil {
		return nil, catRing{}, err
	}
	ring, err := parseCatRing(ev.PrivateData())
	if err != nil {
		return nil, catRing{}, fmt.Errorf("cat: %s: %w", where, err)
	}
	if err := c.regData(ring.slots*ring.slotSize, 0); err != nil {
		return nil, catRing{}, fmt.Errorf("cat: %w", err)
	}
	ok = true
	return c, ring, nil
}

// catSend streams o.IO.In into ring and waits for the receiver's verdict.
func catSend(ctx context.Context, o *catOptions, c *catConn, ring catRing, evs *catEvents) error {
	prog := newCatProgress(o, "sent")
	nslots, size := uint64(ring.slots), ring.slotSize
	free := make(chan int, ring.slots)
	for i := range ring.slots {
		free <- i
	}
	filled := make(chan catChunk, ring.slots+1)
	var idle atomic.Bool
	quit := make(chan struct{})
	defer close(quit)
	go catReader(o.IO.In, c.data.Buf(), size, free, filled, &idle, quit)

	var (
		seq, credited, total uint64
		pend, final          *catChunk
		finSent, armed, gone bool
		probing              bool
		ack                  *catMsg
	)
	probeTimer := time.NewTimer(catProbeInterval)
	defer probeTimer.Stop()
	for ack == nil {
		wcs, err := c.poll()
		if err != nil {
			prog.clear()
			return fmt.Errorf("cat: %w", err)
		}
		for i := range wcs {
			wc := &wcs[i]
			if err := wc.Err(); err != nil {
				prog.clear()
				if gone {
					return fmt.Errorf("cat: the receiver disconnected after %d bytes without confirming", total)
				}
				if wc.WRID == catWRIDProbe {
					return fmt.Errorf("cat: the %s stopped answering after %d bytes: it returned no credit and did not acknowledge a probe (%v); it was stopped or killed, or the link went down; the stream is incomplete: start it again",
						peerLabel("receiver", c.qp), total, wc.Status)
				}
				return fmt.Errorf("cat: transfer failed after %d bytes: %w%s", total, err, catFailHint(err, peerLabel("receiver", c.qp)))
			}
			switch wc.Opcode {
			case verbs.WCRDMAWrite:
				if wc.WRID == catWRIDProbe {
					probing = false // the receiver is alive
					continue
				}
				free <- int(wc.WRID % nslots)
			case verbs.WCRecv:
				m, err := c.recvMsg(wc)
				if err != nil {
					return fmt.Errorf("cat: %w", err)
				}
				switch m.typ {
				case catCredit:
					credited = max(credited, m.count)
				case catAck:
					ack = &m
				default:
					return fmt.Errorf("cat: protocol error: control message %d", m.typ)
				}
			}
		}
		if ack != nil {
			break
		}
		prog.update(total)
		if pend == nil && final == nil {
			select {
			case ch := <-filled:
				if ch.final {
					final = &ch
				} else {
					pend = &ch
				}
			default:
			}
		}
		if pend != nil && seq-credited < nslots {
			if uint64(pend.idx) != seq%nslots {
				return fmt.Errorf("cat: internal error: chunk %d in slot %d", seq, pend.idx)
			}
			off := pend.idx * size
			if _, err := c.qp.PostSend(verbs.SendWR{WRID: seq, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
				SGList:     []verbs.SGE{c.data.SGE(off, pend.n)},
				RemoteAddr: ring.addr + (seq%nslots)*uint64(size), RKey: ring.rkey,
				ImmData: uint32(seq&0xff)<<24 | uint32(pend.n)}); err != nil {
				return fmt.Errorf("cat: %w", err)
			}
			seq++
			total += uint64(pend.n)
			pend = nil
			continue
		}
		if final != nil && !finSent {
			m := catMsg{typ: catFin, count: seq, bytes: final.total, sum: final.sum}
			if final.err != nil { // tell the receiver, then fail
				m.status = catFinAborted
			}
			if o.finHook != nil {
				o.finHook(&m)
			}
			if err := c.sendMsg(&m, catWRIDFin); err != nil {
				return fmt.Errorf("cat: %w", err)
			}
			finSent = true
			continue
		}
		if gone && len(wcs) == 0 {
			prog.clear()
			return fmt.Errorf("cat: the receiver disconnected after %d bytes without confirming", total)
		}
		if len(wcs) > 0 {
			continue
		}
		if !armed {
			if err := c.arm(); err != nil {
				return fmt.Errorf("cat: %w", err)
			}
			armed = true
			continue
		}
		var in <-chan catChunk
		if pend == nil && final == nil {
			in = filled
			idle.Store(seq == credited)
		}
		// Waiting on the receiver (a full ring, or the answer to the
		// final message): probe it after a while.
		var probe <-chan time.Time
		if !probing && (pend != nil && seq-credited >= nslots || finSent) {
			probeTimer.Reset(catProbeInterval)
			probe = probeTimer.C
		}
		select {
		case <-probe:
			if _, err := c.qp.PostSend(verbs.SendWR{WRID: catWRIDProbe, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				RemoteAddr: ring.addr, RKey: ring.rkey}); err != nil {
				return fmt.Errorf("cat: %w", err)
			}
			probing = true
		case ch := <-in:
			if ch.final {
				final = &ch
			} else {
				pend = &ch
			}
		case <-c.notify:
		case <-evs.disc:
			gone = true // one more poll for what arrived before
		case <-ctx.Done():
			prog.clear()
			return ctx.Err()
		}
		idle.Store(false)
		armed = false
	}
	switch {
	case final != nil && final.err != nil:
		prog.clear()
		return fmt.Errorf("cat: reading the input after %d bytes: %w (the receiver was told the stream is incomplete)", final.total, final.err)
	case ack.status == catAckAborted:
		prog.clear()
		return fmt.Errorf("cat: the receiver could not write its output after %d bytes; stream abandoned", ack.bytes)
	case ack.status != catAckOK:
		prog.clear()
		return fmt.Errorf("cat: the receiver reports an integrity failure: it got %d bytes (SHA-256 %s), we sent %d (SHA-256 %s)",
			ack.bytes, catSum(ack.sum), final.total, catSum(final.sum))
	case ack.bytes != final.total || ack.sum != final.sum:
		prog.clear()
		return fmt.Errorf("cat: the receiver confirmed %d bytes (SHA-256 %s) but we sent %d (SHA-256 %s)",
			ack.bytes, catSum(ack.sum), final.total, catSum(final.sum))
	}
	prog.done(total, "confirmed by the receiver")
	return nil
}

// catFailHint explains a failed completion whose cause is the other end
// (peer names it: "receiver" or "sender"): "" for other failures.
func catFailHint(err error, peer string) string {
	var wce *verbs.WCError
	if !errors.As(err, &wce) {
		return ""
	}
	switch wce.Status {
	case verbs.WCRetryExcErr:
		return fmt.Sprintf(" — the %s stopped answering (stopped or killed, or the link went down); the stream is incomplete: start it again", peer)
	case verbs.WCRNRRetryExcErr:
		return fmt.Sprintf(" — the %s stopped posting receives; the stream is incomplete: start it again", peer)
	}
	return ""
}
