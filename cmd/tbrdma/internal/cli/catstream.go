package cli

// The wire protocol of "tbrdma cat" over an rdma_cm RC connection.
//
//  1. The sender connects (RDMA_PS_TCP) with catReqMagic as private data.
//  2. The receiver accepts with its ring in the REP's private data:
//     catRepMagic, ring address (u64), rkey (u32), slot size (u32), slots
//     (u32), big-endian. The ring is slots × slot size bytes, REMOTE_WRITE.
//  3. Chunk seq (from 0) goes by RDMA WRITE WITH IMMEDIATE into slot
//     seq % slots; the immediate is (seq & 0xff) << 24 | length, and the
//     receive WQE it consumes tells the receiver the slot is full. Empty
//     chunks are never sent.
//  4. The receiver writes the slot to its output and returns the slot by a
//     SEND of catCredit holding the number of chunks consumed so far. The
//     sender has at most slots chunks unconsumed.
//  5. At the end of its input the sender SENDs catFin: total bytes,
//     chunks and the SHA-256 of the stream; or, when it could not read its
//     input to the end, catFin with status catFinAborted.
//  6. The receiver compares with what it got and SENDs catAck: a status
//     (catAckOK, a mismatch, or catAckAborted when it could not write its
//     output; an abort may come at any time), its byte count, chunk count
//     and SHA-256. The sender then disconnects. The receiver's result
//     rests on its own check: once it has sent catAck for a whole, matching
//     stream, a failure of that SEND (its ACK lost, the sender gone) does
//     not fail it.
//
// Control messages are inline SENDs of catMsgSize bytes: a type (u32),
// then the fields above, big-endian.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

const (
	catDefaultPort = 18516
	catSlots       = 8
	catSlotSize    = 1 << 20
	catMaxSlotSize = 1<<24 - 1 // the immediate's length field
	catMaxSlots    = 256

	catReqMagic = "tbrdma-cat/1"
	catRepMagic = "tbcat/1\x00"
	catRepSize  = len(catRepMagic) + 8 + 4 + 4 + 4

	catMsgSize = 56
	catCredit  = 1
	catFin     = 2
	catAck     = 3

	catFinAborted   = 1
	catAckOK        = 0
	catAckMismatch  = 1
	catAckAborted   = 2
	catWRIDFin      = 1 << 62 // WRIDs of control sends; chunk writes use seq
	catWRIDCtrlSend = 1 << 61
	// catWRIDProbe is the sender's liveness probe: a zero-length RDMA
	// WRITE (no memory touched, no receive consumed), posted while it
	// waits on the receiver with nothing else in flight, so that a dead
	// receiver fails it (RETRY_EXC_ERR) instead of leaving the sender
	// waiting forever.
	catWRIDProbe = 1 << 60
	// catProbeInterval is how long the sender waits on the receiver
	// before it probes.
	catProbeInterval = time.Second
)

// catRing is the receiver's ring as advertised in the REP.
type catRing struct {
	addr     uint64
	rkey     verbs.RKey
	slotSize int
	slots    int
}

func (r catRing) marshal() []byte {
	b := make([]byte, catRepSize)
	n := copy(b, catRepMagic)
	binary.BigEndian.PutUint64(b[n:], r.addr)
	binary.BigEndian.PutUint32(b[n+8:], uint32(r.rkey))
	binary.BigEndian.PutUint32(b[n+12:], uint32(r.slotSize))
	binary.BigEndian.PutUint32(b[n+16:], uint32(r.slots))
	return b
}

func parseCatRing(b []byte) (catRing, error) {
	if len(b) < catRepSize || string(b[:len(catRepMagic)]) != catRepMagic {
		return catRing{}, errors.New("the peer accepted but is not a tbrdma cat receiver (no ring in its private data)")
	}
	n := len(catRepMagic)
	r := catRing{
		addr:     binary.BigEndian.Uint64(b[n:]),
		rkey:     verbs.RKey(binary.BigEndian.Uint32(b[n+8:])),
		slotSize: int(binary.BigEndian.Uint32(b[n+12:])),
		slots:    int(binary.BigEndian.Uint32(b[n+16:])),
	}
	if r.slotSize < 1 || r.slotSize > catMaxSlotSize || r.slots < 1 || r.slots > catMaxSlots {
		return catRing{}, fmt.Errorf("the receiver advertised an unusable ring (%d slots of %d bytes)", r.slots, r.slotSize)
	}
	return r, nil
}

// catMsg is a control message.
type catMsg struct {
	typ    uint32
	status uint32 // catFin, catAck
	count  uint64 // catCredit: chunks consumed; catFin, catAck: chunks
	bytes  uint64 // catFin, catAck
	sum    [sha256.Size]byte
}

func (m *catMsg) marshal(b []byte) {
	clear(b[:catMsgSize])
	binary.BigEndian.PutUint32(b[0:], m.typ)
	binary.BigEndian.PutUint32(b[4:], m.status)
	binary.BigEndian.PutUint64(b[8:], m.count)
	binary.BigEndian.PutUint64(b[16:], m.bytes)
	copy(b[24:], m.sum[:])
}

func parseCatMsg(b []byte) (catMsg, error) {
	if len(b) < catMsgSize {
		return catMsg{}, fmt.Errorf("protocol error: a %d-byte control message (want %d)", len(b), catMsgSize)
	}
	m := catMsg{
		typ:    binary.BigEndian.Uint32(b[0:]),
		status: binary.BigEndian.Uint32(b[4:]),
		count:  binary.BigEndian.Uint64(b[8:]),
		bytes:  binary.BigEndian.Uint64(b[16:]),
	}
	copy(m.sum[:], b[24:])
	return m, nil
}

// catConn is one end's verbs resources: the ID's QP, one CQ with a
// completion channel, the receive buffers for control messages and the
// data buffer (the ring on the receiver, the staging slots on the sender).
type catConn struct {
	id     *rdmacm.ID
	qp     *verbs.QP
	pd     *verbs.PD
	ch     *verbs.CompChannel
	cq     *verbs.CQ
	ctrl   *verbs.MR // nRecv receive buffers then the send buffer, catMsgSize each
	data   *verbs.MR
	nRecv  int
	maxSnd int
	sends  int // signalled sends not completed
	notify chan struct{}
	stop   context.CancelFunc
	wc     [32]verbs.WC
}

// newCatConn creates id's QP and control buffers for a ring of slots and
// posts the receives; regData adds the data buffer.
func newCatConn(id *rdmacm.ID, slots int) (c *catConn, err error) {
	vctx := id.VerbsContext()
	c = &catConn{id: id, nRecv: slots + 4, maxSnd: 2*slots + 4, notify: make(chan struct{}, 1)}
	defer func() {
		if err != nil {
			c.free()
		}
	}()
	if c.pd, err = vctx.AllocPD(); err != nil {
		return nil, err
	}
	if c.ch, err = vctx.CreateCompChannel(); err != nil {
		return nil, err
	}
	if c.cq, err = vctx.CreateCQ(c.nRecv+c.maxSnd+8, c.ch); err != nil {
		return nil, err
	}
	if c.qp, err = id.CreateQP(c.pd, &verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq, Cap: verbs.QPCap{
		MaxSendWR: c.maxSnd, MaxRecvWR: c.nRecv, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: catMsgSize}}); err != nil {
		return nil, err
	}
	if c.ctrl, err = c.pd.RegMR(make([]byte, (c.nRecv+1)*catMsgSize), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := range c.nRecv {
		if err = c.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	// The waker turns completion events into c.notify, so that the loops
	// can select on completions and channels at once.
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go func() {
		for {
			cq, err := c.ch.GetEvent(ctx)
			if err != nil {
				return
			}
			cq.AckEvents(1)
			select {
			case c.notify <- struct{}{}:
			default:
			}
		}
	}()
	return c, nil
}

// regData registers the data buffer: n bytes with access acc.
func (c *catConn) regData(n int, acc verbs.AccessFlags) error {
	var err error
	c.data, err = c.pd.RegMR(make([]byte, n), acc)
	return err
}

func (c *catConn) free() {
	if c.stop != nil {
		c.stop()
	}
	c.id.DestroyQP()
	for _, mr := range []*verbs.MR{c.ctrl, c.data} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if c.ch != nil {
		c.ch.Close()
	}
}

func (c *catConn) postRecv(i uint64) error {
	_, err := c.qp.PostRecv(verbs.RecvWR{WRID: i, SGList: []verbs.SGE{c.ctrl.SGE(int(i)*catMsgSize, catMsgSize)}})
	return err
}

// recvMsg parses the control message of a RECV completion and re-posts
// its buffer.
func (c *catConn) recvMsg(wc *verbs.WC) (catMsg, error) {
	i := int(wc.WRID)
	if i >= c.nRecv {
		return catMsg{}, fmt.Errorf("protocol error: receive completion %d", wc.WRID)
	}
	m, err := parseCatMsg(c.ctrl.Buf()[i*catMsgSize : i*catMsgSize+int(wc.ByteLen)])
	if err != nil {
		return m, err
	}
	return m, c.postRecv(wc.WRID)
}

// canSend reports whether the send queue has room for a control message.
func (c *catConn) canSend() bool { return c.sends < c.maxSnd-1 }

// sendMsg posts m as an inline, signalled SEND (check canSend first).
func (c *catConn) sendMsg(m *catMsg, wrid uint64) error {
	off := c.nRecv * catMsgSize // inline: copied at post time, so one buffer will do
	m.marshal(c.ctrl.Buf()[off:])
	if _, err := c.qp.PostSend(verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{c.ctrl.SGE(off, catMsgSize)}}); err != nil {
		return err
	}
	c.sends++
	return nil
}

// poll returns the completions available now (at most len(c.wc)); the
// slice is valid until the next poll.
func (c *catConn) poll() ([]verbs.WC, error) {
	n, err := c.cq.Poll(c.wc[:])
	if err != nil {
		return nil, err
	}
	for i := range n {
		if c.wc[i].Opcode == verbs.WCSend {
			c.sends--
		}
	}
	return c.wc[:n], nil
}

// arm requests a completion event; the caller then polls once more
// before sleeping on c.notify.
func (c *catConn) arm() error { return c.cq.ReqNotify(false) }
