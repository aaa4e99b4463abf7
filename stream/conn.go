package stream

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// probeInterval is how long a connection stays without a completion
// before it probes the peer with a zero-length RDMA WRITE.
const probeInterval = time.Second

// closeWait bounds how long Close waits for its last writes and FIN to
// be acknowledged, and then for the peer's confirmation of the
// disconnect.
const closeWait = 5 * time.Second

// ctrlSends bounds the control SENDs (credits, FIN, ACK) in flight.
const ctrlSends = 8

// Conn is a stream connection over an RC queue pair. It implements
// net.Conn, io.ReaderFrom and io.WriterTo; its methods are safe for
// concurrent use (concurrent Reads, or Writes, are serialized).
type Conn struct {
	id            *rdmacm.ID
	ech           *rdmacm.EventChannel
	dev           *device // released on Close; nil when the caller gave the device
	pd            *verbs.PD
	ch            *verbs.CompChannel
	cq            *verbs.CQ
	qp            *verbs.QP
	ctrl          *verbs.MR // nRecv receive buffers, then one send buffer
	ring          *verbs.MR // our receive ring, written by the peer
	stage         *verbs.MR // our send slots, one per slot of the peer's ring
	mine          ringInfo
	peer          ringInfo
	nRecv         int
	local, remote Addr
	sr            bool // the QP does selective retransmission ("tbs2")

	evDone     chan struct{} // the event goroutine ended
	disc       chan struct{} // closed on DISCONNECTED
	engineDone chan struct{}

	rmu sync.Mutex // one Read or WriteTo at a time
	wmu sync.Mutex // one Write, ReadFrom or CloseWrite at a time

	closeOnce sync.Once
	closeErr  error

	mu sync.Mutex
	bc chan struct{} // closed and replaced whenever the state changes

	// Receive direction.
	rLen      []int  // chunk length per ring slot
	rArrived  uint64 // chunks arrived
	rRead     uint64 // chunks consumed
	rOff      int    // bytes consumed of chunk rRead
	rCredited uint64 // rRead last sent in a credit
	rBytes    uint64
	rSum      uint32 // CRC-32C of what this end read so far
	rFin      *msg
	rDone     bool  // the FIN was checked: EOF, or rErr
	rErr      error // the stream's end did not check out
	rdl       time.Time

	// Send direction.
	sSeq     uint64 // chunks posted
	sCredit  uint64 // chunks the peer consumed
	sPending []bool // per local slot: its WRITE not completed
	sBytes   uint64
	sSum     uint32 // CRC-32C of what this end sent so far
	finSent  bool
	ack      *msg
	wdl      time.Time

	sends    int // signalled sends in flight
	ctrlOut  int // of which control SENDs
	probing  bool
	closed   bool // Close was called
	stopping bool // the engine is to stop
	peerGone bool // DISCONNECTED seen and the CQ drained after it
	discRaw  bool // DISCONNECTED seen
	qpDown   bool // a failed completion: the QP is in ERR
	qpDownAt time.Time
	err      error // the connection failed
	kick     context.CancelFunc

	noFin   bool       // Abort: Close sends no FIN
	finHook func(*msg) // tests: changes the FIN before it leaves
}

func (c *Conn) broadcast() {
	close(c.bc)
	c.bc = make(chan struct{})
}

// newConn makes id's verbs resources for our ring mine; the staging
// slots come with setPeer once the peer's ring is known. It posts the
// receives before the connection is made, so the peer never meets an
// empty receive queue.
func newConn(id *rdmacm.ID, ech *rdmacm.EventChannel, slots, slotSize int) (c *Conn, err error) {
	vctx := id.VerbsContext()
	c = &Conn{id: id, ech: ech, nRecv: slots + MaxSlots + ctrlSends + 4, bc: make(chan struct{}),
		disc: make(chan struct{}), evDone: make(chan struct{}), engineDone: make(chan struct{}),
		rLen: make([]int, slots)}
	defer func() {
		if err != nil {
			c.freeVerbs()
		}
	}()
	if c.pd, err = vctx.AllocPD(); err != nil {
		return nil, err
	}
	if c.ch, err = vctx.CreateCompChannel(); err != nil {
		return nil, err
	}
	maxSnd := MaxSlots + ctrlSends + 2
	if c.cq, err = vctx.CreateCQ(c.nRecv+maxSnd+8, c.ch); err != nil {
		return nil, err
	}
	if c.qp, err = id.CreateQP(c.pd, &verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq, Cap: verbs.QPCap{
		MaxSendWR: maxSnd, MaxRecvWR: c.nRecv, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: msgSize}}); err != nil {
		return nil, err
	}
	if c.ctrl, err = c.pd.RegMR(make([]byte, (c.nRecv+1)*msgSize), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.ring, err = c.pd.RegMR(make([]byte, slots*slotSize), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	c.mine = ringInfo{addr: c.ring.Addr(), rkey: c.ring.RKey(), slotSize: slotSize, slots: slots}
	for i := range c.nRecv {
		if err = c.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// setPeer registers the staging slots for the peer's ring.
func (c *Conn) setPeer(r ringInfo) error {
	var err error
	c.peer = r
	c.sPending = make([]bool, r.slots)
	c.stage, err = c.pd.RegMR(make([]byte, r.slots*r.slotSize), 0)
	return err
}

// sendWindow is the QP's send window (verbs.QP.SetSendWindow): the peer
// speaks this protocol, so it is tbrdma, whose receiver takes the larger
// burst (docs/wire-format.md, "Send window between tbrdma peers").
const sendWindow = 512

// setSR turns selective retransmission on or off for the QP. Both ends
// must have it on before the first data packet reaches either (a
// responder with it on reports gaps in a way only a requester with it on
// reads), so each end calls it before its QP can receive: the listener
// before Accept, the dialer before Connect.
func (c *Conn) setSR(on bool) error {
	if err := c.qp.SetSelectiveRetransmit(on); err != nil {
		return err
	}
	c.sr = on
	return nil
}

// start runs the connection's goroutines once it is established.
func (c *Conn) start() {
	c.qp.SetSendWindow(sendWindow) // an optimisation only: an error leaves the default
	go c.events()
	go c.engine()
}

func (c *Conn) freeVerbs() {
	if c.qp != nil {
		c.id.DestroyQP()
	}
	for _, mr := range []*verbs.MR{c.ctrl, c.ring, c.stage} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if c.cq != nil {
		c.cq.Close() // after the QP that uses it
	}
	if c.ch != nil {
		c.ch.Close() // after its CQ
	}
	if c.pd != nil {
		c.pd.Close() // after the QP and MRs made on it
	}
}

func (c *Conn) postRecv(i uint64) error {
	_, err := c.qp.PostRecv(verbs.RecvWR{WRID: i, SGList: []verbs.SGE{c.ctrl.SGE(int(i)*msgSize, msgSize)}})
	return err
}

// events follows the ID's events: the peer's DISCONNECTED gets its DREP
// and wakes the engine.
func (c *Conn) events() {
	defer close(c.evDone)
	once := false
	for {
		ev, err := c.ech.GetEvent(context.Background())
		if err != nil {
			return
		}
		switch ev.Type {
		case rdmacm.EventDisconnected:
			c.id.Disconnect() // the DREP when the peer started
			if !once {
				once = true
				close(c.disc)
			}
			c.mu.Lock()
			c.discRaw = true
			c.broadcast()
			if c.kick != nil {
				c.kick()
			}
			c.mu.Unlock()
		case rdmacm.EventDeviceRemoval:
			c.mu.Lock()
			c.fail(errors.New("stream: the RDMA device was closed"))
			c.mu.Unlock()
		}
	}
}

// fail records the connection's failure (the first one wins).
func (c *Conn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.broadcast()
}

// engine turns completions into state, probes an idle peer and returns
// credits the reader could not.
func (c *Conn) engine() {
	defer close(c.engineDone)
	wcs := make([]verbs.WC, 64)
	for {
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeInterval)
		c.kick = cancel
		disc := c.discRaw
		c.mu.Unlock()
		n, err := c.cq.Wait(ctx, wcs)
		cancel()
		c.mu.Lock()
		c.kick = nil
		switch {
		case err == nil:
			c.complete(wcs[:n])
		case errors.Is(err, verbs.ErrClosed):
			c.mu.Unlock()
			return
		case ctx.Err() != nil:
			if disc && !c.peerGone {
				// Everything the peer did before its DREQ is in the CQ now.
				for {
					n, _ := c.cq.Poll(wcs)
					if n == 0 {
						break
					}
					c.complete(wcs[:n])
				}
				c.peerGone = true
				c.broadcast()
			} else if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				c.probe()
			}
		default:
			c.fail(fmt.Errorf("stream: %w", err))
		}
		c.mu.Unlock()
	}
}

// probe posts the zero-length RDMA WRITE that tells a live peer from a
// dead one (RETRY_EXC_ERR) when the connection has been idle.
func (c *Conn) probe() {
	if c.probing || c.peerGone || c.discRaw || c.qpDown || c.err != nil || c.stopping {
		return
	}
	if _, err := c.qp.PostSend(verbs.SendWR{WRID: wridProbe, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		RemoteAddr: c.peer.addr, RKey: c.peer.rkey}); err != nil {
		c.fail(fmt.Errorf("stream: probe: %w", err))
		return
	}
	c.probing = true
	c.sends++
}

// complete applies completions; c.mu is held.
func (c *Conn) complete(wcs []verbs.WC) {
	for i := range wcs {
		wc := &wcs[i]
		isSend := wc.WRID >= wridData
		if err := wc.Err(); err != nil {
			if isSend {
				c.sendDone(wc)
			}
			if !c.qpDown {
				c.qpDownAt = time.Now()
			}
			if wc.Status == verbs.WCWRFlushErr {
				c.qpDown = true
				c.broadcast()
				continue
			}
			c.qpDown = true
			if c.closed || c.peerGone || c.discRaw {
				c.broadcast()
				continue
			}
			what := "the connection failed"
			switch wc.Status {
			case verbs.WCRetryExcErr:
				what = "the peer stopped answering (it was stopped or killed, or the link went down; what was in flight is lost: reconnect)"
			case verbs.WCRNRRetryExcErr:
				what = "the peer stopped posting receives"
			}
			c.fail(fmt.Errorf("stream: %s: %w", what, err))
			continue
		}
		switch wc.Opcode {
		case verbs.WCRDMAWrite, verbs.WCSend:
			c.sendDone(wc)
		case verbs.WCRecvRDMAWithImm:
			n := int(wc.ImmData & 0xffffff)
			if c.rFin != nil || wc.ImmData>>24 != uint32(c.rArrived&0xff) || n != int(wc.ByteLen) || n == 0 || n > c.mine.slotSize ||
				c.rArrived-c.rRead >= uint64(c.mine.slots) {
				c.fail(fmt.Errorf("stream: protocol error: chunk %d: immediate %#x, %d bytes", c.rArrived, wc.ImmData, wc.ByteLen))
				continue
			}
			c.rLen[c.rArrived%uint64(c.mine.slots)] = n
			c.rArrived++
			c.repost(wc.WRID)
		case verbs.WCRecv:
			i := int(wc.WRID)
			if i >= c.nRecv {
				c.fail(fmt.Errorf("stream: protocol error: receive completion %d", wc.WRID))
				continue
			}
			m, err := parseMsg(c.ctrl.Buf()[i*msgSize : i*msgSize+int(wc.ByteLen)])
			if err != nil {
				c.fail(fmt.Errorf("stream: %w", err))
				continue
			}
			c.repost(wc.WRID)
			switch {
			case m.typ == msgCred && m.count <= c.sSeq:
				c.sCredit = max(c.sCredit, m.count)
			case m.typ == msgFin && c.rFin == nil:
				c.rFin = &m
			case m.typ == msgAck && c.finSent && c.ack == nil:
				c.ack = &m
			default:
				c.fail(fmt.Errorf("stream: protocol error: control message %d", m.typ))
			}
		}
	}
	c.credit()
	if len(wcs) > 0 {
		c.broadcast()
	}
}

func (c *Conn) sendDone(wc *verbs.WC) {
	c.sends--
	switch {
	case wc.WRID == wridProbe:
		c.probing = false
	case wc.WRID >= wridCtrl:
		c.ctrlOut--
	default:
		c.sPending[(wc.WRID-wridData)%uint64(c.peer.slots)] = false
	}
}

func (c *Conn) repost(wrid uint64) {
	if err := c.postRecv(wrid); err != nil && !c.qpDown && !c.closed {
		c.fail(fmt.Errorf("stream: %w", err))
	}
}

// usable reports whether sends can still be posted.
func (c *Conn) usable() bool {
	return c.err == nil && !c.qpDown && !c.discRaw && !c.stopping
}

// sendMsg posts m as an inline, signalled SEND; c.mu is held and
// c.ctrlOut < ctrlSends.
func (c *Conn) sendMsg(m *msg, wrid uint64) error {
	off := c.nRecv * msgSize // inline: copied at post time
	m.marshal(c.ctrl.Buf()[off:])
	if _, err := c.qp.PostSend(verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{c.ctrl.SGE(off, msgSize)}}); err != nil {
		return err
	}
	c.sends++
	c.ctrlOut++
	return nil
}

// credit returns the consumed slots in one credit when it can; c.mu is
// held. The ACK goes first when one is due.
func (c *Conn) credit() {
	if c.rCredited < c.rRead && c.usable() && c.ctrlOut < ctrlSends-2 {
		if err := c.sendMsg(&msg{typ: msgCred, count: c.rRead}, wridCtrl); err != nil {
			c.fail(fmt.Errorf("stream: %w", err))
			return
		}
		c.rCredited = c.rRead
	}
}

// --- errors -------------------------------------------------------------

// timeoutError is the error of a passed deadline: it matches
// os.ErrDeadlineExceeded and is a net.Error whose Timeout is true.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
func (timeoutError) Is(err error) bool {
	return err == os.ErrDeadlineExceeded
}

// ErrPeerClosed is the cause of a Write after the peer closed the
// connection, and of a Read when the peer closed it without ending its
// direction of the stream (no FIN).
var ErrPeerClosed = errors.New("the peer closed the connection")

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: Network, Source: c.local, Addr: c.remote, Err: err}
}

// deadlineWait waits for a state change or the deadline dl; c.mu is
// held, and held again on return. It returns the timeout error when dl
// has passed.
func (c *Conn) deadlineWait(dl func() time.Time) error {
	d := dl()
	var timer <-chan time.Time
	if !d.IsZero() || c.qpDown {
		left := time.Until(d)
		if !d.IsZero() && left <= 0 {
			return timeoutError{}
		}
		if c.qpDown { // wake for the grace's end (downCause)
			if g := time.Until(c.qpDownAt.Add(disconnectGrace)); d.IsZero() || g < left {
				left = max(g, time.Millisecond)
			}
		}
		t := time.NewTimer(left)
		defer t.Stop()
		timer = t.C
	}
	ch := c.bc
	c.mu.Unlock()
	select {
	case <-ch:
	case <-timer:
	}
	c.mu.Lock()
	return nil
}

// disconnectGrace is how long a flushed QP waits for the event that
// explains it (the peer's DREQ moves the QP to ERR a moment before its
// DISCONNECTED event) before it is reported as a failure of its own.
const disconnectGrace = 2 * time.Second

// downCause returns the error of a QP in ERR with no known cause once
// disconnectGrace has passed, nil before (or while it is up); c.mu is
// held.
func (c *Conn) downCause() error {
	if c.qpDown && time.Since(c.qpDownAt) >= disconnectGrace {
		return errors.New("stream: the connection failed: its queue pair went to the error state")
	}
	return nil
}

func (c *Conn) readDL() time.Time  { return c.rdl }
func (c *Conn) writeDL() time.Time { return c.wdl }

func passed(t time.Time) bool { return !t.IsZero() && !time.Now().Before(t) }

// --- reading ------------------------------------------------------------

// nextChunk waits for data to read and returns the unread part of the
// current chunk (valid until consumed), or the end of the stream: io.EOF
// once the peer's FIN checked out, or an error. c.mu is held.
func (c *Conn) nextChunk() ([]byte, error) {
	for {
		if c.closed {
			return nil, net.ErrClosed
		}
		if passed(c.rdl) {
			return nil, timeoutError{}
		}
		if c.rRead < c.rArrived {
			slot := int(c.rRead % uint64(c.mine.slots))
			off := slot * c.mine.slotSize
			return c.ring.Buf()[off+c.rOff : off+c.rLen[slot]], nil
		}
		if c.rFin != nil {
			return nil, c.checkFin()
		}
		if c.err != nil {
			return nil, c.err
		}
		if c.peerGone || c.qpDown && c.discRaw {
			return nil, fmt.Errorf("stream: %w before the end of its stream (no FIN) after %d bytes", ErrPeerClosed, c.rBytes)
		}
		if err := c.downCause(); err != nil {
			return nil, err
		}
		if err := c.deadlineWait(c.readDL); err != nil {
			return nil, err
		}
	}
}

// checkFin compares the peer's FIN with what was read and answers with
// an ACK, once; c.mu is held.
func (c *Conn) checkFin() error {
	if c.rDone {
		if c.rErr != nil {
			return c.rErr
		}
		return io.EOF
	}
	c.rDone = true
	f := c.rFin
	sum := c.rSum
	ack := msg{typ: msgAck, count: c.rRead, bytes: c.rBytes, sum: sum}
	if f.count != c.rRead || f.bytes != c.rBytes || f.sum != sum {
		ack.status = ackMismatch
		c.rErr = fmt.Errorf("stream: integrity check failed: received %d bytes in %d chunks (CRC-32C %08x), the peer sent %d bytes in %d chunks (CRC-32C %08x): do not trust what was read; have it sent again",
			c.rBytes, c.rRead, sum, f.bytes, f.count, f.sum)
	}
	if c.usable() && c.ctrlOut < ctrlSends {
		c.sendMsg(&ack, wridAck) // best effort: the peer may be gone
	}
	if c.rErr != nil {
		return c.rErr
	}
	return io.EOF
}

// consume marks b, the next bytes of the current chunk, read (hashed
// already); c.mu is held.
func (c *Conn) consume(b []byte) {
	c.rBytes += uint64(len(b))
	c.rOff += len(b)
	if c.rOff == c.rLen[c.rRead%uint64(c.mine.slots)] {
		c.rRead++
		c.rOff = 0
		c.credit()
	}
}

// Read reads data sent by the peer. After the peer's CloseWrite or Close
// it returns io.EOF once all data is read and its length and CRC-32C
// match the peer's FIN; a mismatch is an error. A passed read deadline
// makes it fail with an error matching os.ErrDeadlineExceeded, Close
// with one matching net.ErrClosed.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) == 0 {
		if passed(c.rdl) {
			return 0, c.opErr("read", timeoutError{})
		}
		return 0, nil
	}
	b, err := c.nextChunk()
	if err != nil {
		return 0, c.opErr("read", err)
	}
	// The slot is ours until credited: copy it without the lock.
	c.mu.Unlock()
	n := copy(p, b)
	c.rSum = crc32.Update(c.rSum, castagnoli, b[:n])
	c.mu.Lock()
	c.consume(b[:n])
	return n, nil
}

// WriteTo writes the stream to w until io.EOF (nil error) or a failure,
// straight from the receive ring: no copy besides w's own.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var total int64
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		b, err := c.nextChunk()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, c.opErr("read", err)
		}
		// The slot is ours until credited: write it without the lock.
		c.mu.Unlock()
		n, werr := w.Write(b)
		c.rSum = crc32.Update(c.rSum, castagnoli, b[:max(n, 0)])
		c.mu.Lock()
		total += int64(n)
		if n > 0 {
			c.consume(b[:n])
		}
		if werr == nil && n < len(b) {
			werr = io.ErrShortWrite
		}
		if werr != nil {
			return total, werr
		}
	}
}

// --- writing ------------------------------------------------------------

// nextSlot waits for a send slot to fill and returns it; c.mu is held.
func (c *Conn) nextSlot() ([]byte, error) {
	for {
		if c.closed {
			return nil, net.ErrClosed
		}
		if passed(c.wdl) {
			return nil, timeoutError{}
		}
		if c.finSent {
			return nil, errors.New("stream: write after CloseWrite")
		}
		if c.err != nil {
			return nil, c.err
		}
		if c.discRaw || c.peerGone {
			return nil, fmt.Errorf("stream: %w", ErrPeerClosed)
		}
		if err := c.downCause(); err != nil {
			return nil, err
		}
		slot := int(c.sSeq % uint64(c.peer.slots))
		if c.sSeq-c.sCredit < uint64(c.peer.slots) && !c.sPending[slot] {
			off := slot * c.peer.slotSize
			return c.stage.Buf()[off : off+c.peer.slotSize], nil
		}
		if err := c.deadlineWait(c.writeDL); err != nil {
			return nil, err
		}
	}
}

// post sends the first n bytes of the current slot; the caller hashes
// them next (hashSent). c.mu is held.
func (c *Conn) post(n int) error {
	seq := c.sSeq
	slot := int(seq % uint64(c.peer.slots))
	if _, err := c.qp.PostSend(verbs.SendWR{WRID: wridData + seq, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGList:     []verbs.SGE{c.stage.SGE(slot*c.peer.slotSize, n)},
		RemoteAddr: c.peer.addr + uint64(slot)*uint64(c.peer.slotSize), RKey: c.peer.rkey,
		ImmData: uint32(seq&0xff)<<24 | uint32(n)}); err != nil {
		c.fail(fmt.Errorf("stream: %w", err))
		return c.err
	}
	c.sPending[slot] = true
	c.sSeq++
	c.sends++
	c.sBytes += uint64(n)
	return nil
}

// hashSent adds b, a slot just posted, to the direction's CRC-32C
// without c.mu, while the transport sends it: the slot does not change
// until its WRITE has completed and the peer has credited it, and only
// the wmu holder fills slots. c.mu is held on entry and return.
func (c *Conn) hashSent(b []byte) {
	c.mu.Unlock()
	c.sSum = crc32.Update(c.sSum, castagnoli, b)
	c.mu.Lock()
}

// Write writes p to the peer: it returns once p is in the send slots
// and posted (not when the peer has read it). A passed write deadline
// makes it fail with an error matching os.ErrDeadlineExceeded, Close
// with one matching net.ErrClosed.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for first := true; first || len(p) > 0; first = false {
		if len(p) == 0 {
			if passed(c.wdl) {
				return 0, c.opErr("write", timeoutError{})
			}
			return 0, nil
		}
		b, err := c.nextSlot()
		if err != nil {
			return total, c.opErr("write", err)
		}
		c.mu.Unlock()
		n := copy(b, p)
		c.mu.Lock()
		if err := c.post(n); err != nil {
			return total, c.opErr("write", err)
		}
		c.hashSent(b[:n])
		total += n
		p = p[n:]
	}
	return total, nil
}

// ReadFrom reads r until io.EOF straight into the registered send slots
// (no copy besides r's own): each Read of r fills at most one slot, and
// what it returned is sent at once, so a slow source is not held back (a
// source of small reads sends small chunks). It does not CloseWrite.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var total int64
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		b, err := c.nextSlot()
		if err != nil {
			return total, c.opErr("write", err)
		}
		c.mu.Unlock()
		n, rerr := r.Read(b)
		n = min(max(n, 0), len(b))
		c.mu.Lock()
		if n > 0 {
			if err := c.post(n); err != nil {
				return total, c.opErr("write", err)
			}
			c.hashSent(b[:n])
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// CloseWrite ends this direction of the stream: it sends the FIN with
// the byte count and CRC-32C of everything written, after which the
// peer's Read returns io.EOF (or an error if they do not match what it
// received). Reading goes on.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("close", net.ErrClosed)
	}
	return c.opErr("close", c.sendFin())
}

// sendFin posts the FIN once; c.mu and c.wmu are held.
func (c *Conn) sendFin() error {
	if c.finSent {
		return nil
	}
	for c.ctrlOut >= ctrlSends {
		if !c.usable() {
			break
		}
		ch := c.bc
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
	}
	if c.err != nil {
		return c.err
	}
	if !c.usable() {
		return fmt.Errorf("stream: %w", ErrPeerClosed)
	}
	m := msg{typ: msgFin, count: c.sSeq, bytes: c.sBytes, sum: c.sSum}
	if c.finHook != nil {
		c.finHook(&m)
	}
	if err := c.sendMsg(&m, wridFin); err != nil {
		c.fail(fmt.Errorf("stream: %w", err))
		return c.err
	}
	c.finSent = true
	c.broadcast()
	return nil
}

// Close closes the connection: blocked and later Reads and Writes fail
// with an error matching net.ErrClosed. Unless CloseWrite was called it
// first sends the FIN, so that the peer reads to io.EOF what was
// written; it waits (up to a few seconds) for the writes and the FIN to
// be acknowledged, then disconnects (waiting a few seconds for the
// peer's answer, unless the connection failed) and releases the resources.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.broadcast()
		c.mu.Unlock()

		c.wmu.Lock()
		c.mu.Lock()
		if !c.finSent && !c.noFin && c.usable() {
			c.sendFin()
		}
		deadline := time.Now().Add(closeWait)
		for c.sends > 0 && c.usable() && time.Now().Before(deadline) {
			ch := c.bc
			c.mu.Unlock()
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-ch:
			case <-t.C:
			}
			t.Stop()
			c.mu.Lock()
		}
		// A failed connection (the peer stopped answering) gets its DREQ
		// but no wait for an answer that will not come.
		failed := c.err != nil
		c.mu.Unlock()
		c.wmu.Unlock()

		if c.id.Disconnect() == nil && !failed {
			t := time.NewTimer(closeWait)
			select {
			case <-c.disc:
			case <-t.C:
			}
			t.Stop()
		}
		c.mu.Lock()
		c.stopping = true
		if c.kick != nil {
			c.kick()
		}
		c.mu.Unlock()
		<-c.engineDone // stopping and kick end its Wait
		c.id.Destroy()
		c.ech.Destroy()
		<-c.evDone
		c.freeVerbs()
		if c.dev != nil {
			c.dev.release()
		}
	})
	return c.closeErr
}

// Abort closes the connection as Close does, but without the FIN (when
// CloseWrite has not sent it already): the peer's Read then fails with an
// error matching ErrPeerClosed after what was written, instead of
// returning io.EOF, so a stream cut short is not taken for a whole one.
// Like Close, it unblocks Reads and Writes of other goroutines.
func (c *Conn) Abort() error {
	c.mu.Lock()
	c.noFin = true
	c.mu.Unlock()
	return c.Close()
}

// LocalAddr returns this end's address (network "rdma").
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the peer's address (network "rdma").
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("set deadline", net.ErrClosed)
	}
	c.rdl, c.wdl = t, t
	c.broadcast()
	return nil
}

// SetReadDeadline sets the deadline of Read and WriteTo; the zero time
// means none.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("set deadline", net.ErrClosed)
	}
	c.rdl = t
	c.broadcast()
	return nil
}

// SetWriteDeadline sets the deadline of Write, ReadFrom; the zero time
// means none.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("set deadline", net.ErrClosed)
	}
	c.wdl = t
	c.broadcast()
	return nil
}

var (
	_ net.Conn      = (*Conn)(nil)
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
)
