// Package rping speaks rping's protocol (rdma-core
// librdmacm/examples/rping.c; tools-and-discovery.md §3.3) over package
// rdmacm: a [Client] that runs and times one iteration at a time (tbrdma
// ping) and a persistent server, [Serve], that answers any number of
// clients at once, as `rping -s -P` does (tbrdma serve). Either side may be
// the stock rping on rdma_rxe.
package rping

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// rping's constants.
const (
	DefaultPort = 7174 // rdma_cm port (RDMA_PS_TCP)
	DefaultSize = 64   // -S
	// MinSize and MaxSize bound -S: the buffer must hold "rdma-ping-%d: "
	// for any int (RPING_MIN_BUFSIZE), and be below RPING_BUFSIZE (64 KiB).
	MinSize = 26
	MaxSize = 65535
	// infoSize is struct rping_rdma_info: buf (u64), rkey (u32), size
	// (u32), big-endian; the only SEND payload of the protocol.
	infoSize = verbs.RemoteBufferSize
	backlog  = 3 // rdma_listen's backlog in rping
	spin     = 20
)

// ErrDisconnected reports that the peer disconnected (DISCONNECTED event).
var ErrDisconnected = errors.New("rping: the peer disconnected")

// conn is rping's control block for one connection: the QP of an rdma_cm
// ID, its CQ and completion channel, and the four buffers.
type conn struct {
	id              *rdmacm.ID
	pd              *verbs.PD
	ch              *verbs.CompChannel
	cq              *verbs.CQ
	recvMR, sendMR  *verbs.MR
	startMR, rdmaMR *verbs.MR // startMR only on the client
	info            [infoSize]byte
	wc              [1]verbs.WC
}

// newConn creates the QP of id (send queue 16, 2 receives, 1 SGE, CQ of
// 32) and registers the buffers: a client's source (startSize, which the
// server reads) and sink (written by the server); a server's rdma buffer,
// local only (startSize 0, server true).
func newConn(id *rdmacm.ID, startSize, rdmaSize int, server bool) (*conn, error) {
	vctx := id.VerbsContext()
	c := &conn{id: id}
	var err error
	if c.pd, err = vctx.AllocPD(); err != nil {
		return nil, err
	}
	if c.ch, err = vctx.CreateCompChannel(); err != nil {
		return nil, err
	}
	if c.cq, err = vctx.CreateCQ(32, c.ch); err != nil {
		c.free()
		return nil, err
	}
	if _, err = id.CreateQP(c.pd, &verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		c.free()
		return nil, err
	}
	rdmaAcc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if server {
		rdmaAcc = verbs.AccessLocalWrite
	}
	for _, m := range []struct {
		mr  **verbs.MR
		n   int
		acc verbs.AccessFlags
	}{{&c.recvMR, infoSize, verbs.AccessLocalWrite}, {&c.sendMR, infoSize, 0}, {&c.startMR, startSize, verbs.AccessLocalWrite | verbs.AccessRemoteRead}, {&c.rdmaMR, rdmaSize, rdmaAcc}} {
		if m.n == 0 {
			continue
		}
		if *m.mr, err = c.pd.RegMR(make([]byte, m.n), m.acc); err != nil {
			c.free()
			return nil, err
		}
	}
	if err := c.postRecv(); err != nil {
		c.free()
		return nil, err
	}
	return c, nil
}

// free closes the QP and releases the buffers.
func (c *conn) free() {
	c.id.DestroyQP()
	for _, mr := range []*verbs.MR{c.recvMR, c.sendMR, c.startMR, c.rdmaMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if c.cq != nil {
		c.cq.Close()
	}
	if c.ch != nil {
		c.ch.Close()
	}
	c.pd.Close()
}

func (c *conn) postRecv() error {
	_, err := c.id.QP().PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{c.recvMR.SGE(0, infoSize)}})
	return err
}

// sendInfo sends rping_rdma_info {addr of mr, its rkey, n}, which is the
// layout of a marshalled verbs.RemoteBuffer.
func (c *conn) sendInfo(mr *verbs.MR, n int) error {
	rb := mr.RemoteBuffer()
	rb.Len = uint32(n)
	if _, err := rb.AppendBinary(c.sendMR.Buf()[:0]); err != nil {
		return err
	}
	_, err := c.id.QP().PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.sendMR.SGE(0, infoSize)}})
	return err
}

// goAhead sends the server's "go ahead": 16 bytes the client ignores
// (zeros here; rping sends whatever its send buffer holds).
func (c *conn) goAhead() error {
	clear(c.sendMR.Buf())
	_, err := c.id.QP().PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.sendMR.SGE(0, infoSize)}})
	return err
}

// peerInfo returns the last rping_rdma_info received.
func (c *conn) peerInfo() (addr uint64, rkey verbs.RKey, size uint32) {
	var rb verbs.RemoteBuffer
	rb.UnmarshalBinary(c.info[:]) // c.info has infoSize (verbs.RemoteBufferSize) bytes
	return rb.Addr, rb.RKey, rb.Len
}

// wait returns the next completion of opcode want, skipping the others
// (send completions). A RECV's payload is copied to c.info and the receive
// re-posted, as rping does. It polls a little, then sleeps on the CQ
// (CQ.WaitSpin) until ctx ends.
func (c *conn) wait(ctx context.Context, want verbs.WCOpcode) error {
	for {
		if _, err := c.cq.WaitSpin(ctx, c.wc[:], verbs.SpinPolicy{Polls: spin}); err != nil {
			return err
		}
		if done, err := c.handle(ctx, &c.wc[0], want); done || err != nil {
			return err
		}
	}
}

// handle deals with one completion for wait: done when it is the one
// wanted.
func (c *conn) handle(ctx context.Context, wc *verbs.WC, want verbs.WCOpcode) (done bool, err error) {
	if err := wc.Err(); err != nil {
		if ctx.Err() != nil { // flushed by a Disconnect
			return false, ctx.Err()
		}
		return false, fmt.Errorf("rping: %v completion: %w", wc.Opcode, err)
	}
	if wc.Opcode == verbs.WCRecv {
		if wc.ByteLen != infoSize {
			return false, fmt.Errorf("rping: received bogus data, size %d", wc.ByteLen)
		}
		copy(c.info[:], c.recvMR.Buf())
		if err := c.postRecv(); err != nil {
			return false, err
		}
	}
	return wc.Opcode == want, nil
}

// Fill writes rping's pattern for ping n into b: "rdma-ping-<n>: " then
// ASCII 65..122 cycling from 65 + n mod 58, and a NUL in the last byte.
func Fill(b []byte, n int) {
	cc := copy(b, "rdma-ping-"+strconv.Itoa(n)+": ")
	c := byte(65 + n%58)
	for i := cc; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

// cstr returns b up to its first NUL.
func cstr(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
