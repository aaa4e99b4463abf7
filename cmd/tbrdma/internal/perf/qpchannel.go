package perf

import (
	"context"
	"fmt"

	"github.com/tbrdma/tbrdma/verbs"
)

// QPChannel carries perftest's out-of-band messages in rdma_cm mode (-R):
// each message is one SEND on an RC QP that rdma_cm connected (perftest's
// "comm" QP), each side's next message waits for the previous one's
// completion. perftest posts one receive of BinaryKeyLen bytes at a time
// (its largest message) and re-posts it after each message; QPChannel keeps
// a few posted, of RecvSlotSize bytes, so that a longer message from another
// perftest version is reported by size rather than as a length error.
type QPChannel struct {
	ctx   context.Context
	qp    *verbs.QP
	mr    *verbs.MR
	buf   []byte
	w     Waiter
	inbox [][]byte // messages received and not yet read
	sends int      // send completions not yet waited for
}

// Sizes of a QPChannel's buffers.
const (
	RecvSlots    = 4
	RecvSlotSize = 256
	// sendSlot is where messages are sent from, behind the receive slots.
	sendSlot = RecvSlots * RecvSlotSize
	// ChannelSendWR and ChannelRecvWR are the queue sizes the QP needs.
	ChannelSendWR = 1
	ChannelRecvWR = RecvSlots
)

// NewQPChannel registers the channel's buffers on pd and posts its
// receives on qp, whose send and receive CQ is cq (completion channel ch).
// qp must be able to hold ChannelSendWR sends and ChannelRecvWR receives.
// Call it before the QP is connected, so that the peer's first message
// finds a receive. ctx bounds every later wait.
func NewQPChannel(ctx context.Context, pd *verbs.PD, qp *verbs.QP, cq *verbs.CQ, ch *verbs.CompChannel) (*QPChannel, error) {
	c := &QPChannel{ctx: ctx, qp: qp, buf: make([]byte, sendSlot+RecvSlotSize), w: Waiter{CQ: cq, Ch: ch, Spin: DefaultSpin}}
	var err error
	if c.mr, err = pd.RegMR(c.buf, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rdma_cm exchange: register buffer: %w", err)
	}
	for i := range RecvSlots {
		if err := c.post(i); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *QPChannel) post(slot int) error {
	wr := verbs.RecvWR{WRID: uint64(slot), SGList: []verbs.SGE{c.mr.SGE(slot*RecvSlotSize, RecvSlotSize)}}
	if _, err := c.qp.PostRecv(wr); err != nil {
		return fmt.Errorf("rdma_cm exchange: post receive: %w", err)
	}
	return nil
}

// Send sends b (at most RecvSlotSize bytes; perftest 4.5 receives at most
// BinaryKeyLen) as one SEND and waits for its completion, which comes when
// the peer has acknowledged it.
func (c *QPChannel) Send(b []byte) error {
	if len(b) > RecvSlotSize {
		return fmt.Errorf("rdma_cm exchange: %d-byte message, at most %d", len(b), RecvSlotSize)
	}
	copy(c.buf[sendSlot:], b)
	wr := verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.mr.SGE(sendSlot, len(b))}}
	if _, err := c.qp.PostSend(wr); err != nil {
		return fmt.Errorf("rdma_cm exchange: post send: %w", err)
	}
	c.sends++
	for c.sends > 0 {
		if err := c.poll(); err != nil {
			return err
		}
	}
	return nil
}

// Recv returns the next message (valid until the next Recv).
func (c *QPChannel) Recv() ([]byte, error) {
	for len(c.inbox) == 0 {
		if err := c.poll(); err != nil {
			return nil, err
		}
	}
	m := c.inbox[0]
	c.inbox = c.inbox[1:]
	return m, nil
}

// sendWRID marks the send completions; receives carry their slot.
const sendWRID = 1 << 32

// poll waits for completions and sorts them: a send completion is counted,
// a received message is copied to the inbox and its slot posted again.
func (c *QPChannel) poll() error {
	wcs, err := c.w.Wait(c.ctx)
	if err != nil {
		return err
	}
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess {
			what := "SEND"
			if wc.WRID != sendWRID {
				what = "receive"
			}
			return fmt.Errorf("rdma_cm exchange: %s failed: %v (the peer went away?)", what, wc.Status)
		}
		if wc.WRID == sendWRID {
			c.sends--
			continue
		}
		slot := int(wc.WRID)
		if slot < 0 || slot >= RecvSlots || int(wc.ByteLen) > RecvSlotSize {
			return fmt.Errorf("rdma_cm exchange: unexpected completion %d (%d bytes)", wc.WRID, wc.ByteLen)
		}
		off := slot * RecvSlotSize
		c.inbox = append(c.inbox, append([]byte(nil), c.buf[off:off+int(wc.ByteLen)]...))
		if err := c.post(slot); err != nil {
			return err
		}
	}
	return nil
}
