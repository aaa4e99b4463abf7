package verbs

// The engine's share of a latency test's round trip, without system calls
// or goroutine switches: one goroutine posts a 64-byte RDMA READ on one
// context, hands the request to the other context's packet handling
// (Context.handle and flush, as its receive loop would), hands the
// response back the same way and polls the completion. What is left is
// what tbrdma itself costs per round trip (parse, QP, responder, completer,
// CQ, post, timers, flush), which the CLI's busy-poll read-lat adds to the
// system calls that sockperf also makes (docs/performance.md). Compare
// runs with benchstat; profile with -cpuprofile.

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// handConn is a transport.Conn whose packets are carried by hand: WriteBatch
// keeps copies of what was sent until take collects them, and ReadBatch
// blocks until Close (the receive loop stays idle; the benchmark calls the
// context's handling itself). It checks and computes no ICRC.
type handConn struct {
	local  netip.AddrPort
	mu     sync.Mutex
	out    []transport.Message
	closed chan struct{}
	once   sync.Once
}

func newHandConn(a netip.Addr) *handConn {
	return &handConn{local: netip.AddrPortFrom(a, 4791), closed: make(chan struct{})}
}

func (h *handConn) ReadBatch([]transport.Message) (int, error) {
	<-h.closed
	return 0, ErrClosed
}

func (h *handConn) WriteBatch(msgs []transport.Message) (int, error) {
	h.mu.Lock()
	for _, m := range msgs {
		// The engine reuses its buffers once the call returns.
		k := len(h.out)
		if k < cap(h.out) {
			h.out = h.out[:k+1]
		} else {
			h.out = append(h.out, transport.Message{})
		}
		h.out[k].Buf = append(h.out[k].Buf[:0], m.Buf...)
		h.out[k].Addr = h.local
	}
	h.mu.Unlock()
	return len(msgs), nil
}

// take returns what was written since the last take; valid until the
// next WriteBatch.
func (h *handConn) take() []transport.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.out
	h.out = h.out[:0]
	return out
}

func (h *handConn) BatchSize() int                    { return 64 }
func (h *handConn) LocalAddr() netip.AddrPort         { return h.local }
func (h *handConn) Stats() transport.Stats            { return transport.Stats{} }
func (h *handConn) Close() error                      { h.once.Do(func() { close(h.closed) }); return nil }
func (h *handConn) deliver(to *Context, lk *qpLookup) { deliverAll(h.take(), to, lk) }

// deliverAll has to handle msgs as its receive loop handles a batch.
func deliverAll(msgs []transport.Message, to *Context, lk *qpLookup) {
	var pkt wire.Packet
	now := engineNow()
	*lk = qpLookup{}
	for i := range msgs {
		to.handle(&msgs[i], &pkt, lk, now)
	}
	to.flush()
}

func BenchmarkEngineReadRoundTrip64B(b *testing.B) {
	ends := [2]struct {
		conn *handConn
		ctx  *Context
		cq   *CQ
		qp   *QP
		mr   *MR
	}{}
	for i := range ends {
		e := &ends[i]
		e.conn = newHandConn(netip.AddrFrom4([4]byte{198, 18, 9, byte(1 + i)}))
		ctx, err := NewContext(&Options{Conn: e.conn})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ctx.Close() })
		pd, _ := ctx.AllocPD()
		e.ctx = ctx
		if e.cq, err = ctx.CreateCQ(16, nil); err != nil {
			b.Fatal(err)
		}
		if e.qp, err = pd.CreateQP(&QPInitAttr{Type: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			b.Fatal(err)
		}
		if e.mr, err = pd.RegMR(make([]byte, 4096), AccessLocalWrite|AccessRemoteRead); err != nil {
			b.Fatal(err)
		}
	}
	for i := range ends {
		e, peer := &ends[i], &ends[1-i]
		steps := []struct {
			attr QPAttr
			mask QPAttrMask
		}{
			{QPAttr{State: QPStateInit, PortNum: 1, AccessFlags: AccessLocalWrite | AccessRemoteRead},
				QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
			{QPAttr{State: QPStateRTR, AH: AHAttr{DGID: peer.ctx.GID(), PortNum: 1, HopLimit: 64}, PathMTU: MTU4096,
				DestQPN: peer.qp.QPN(), RQPSN: 0x100, MaxDestRdAtomic: 4, MinRNRTimer: 1},
				QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer},
			{QPAttr{State: QPStateRTS, SQPSN: 0x100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := e.qp.Modify(&s.attr, s.mask); err != nil {
				b.Fatal(err)
			}
		}
	}
	cli, srv := &ends[0], &ends[1]
	wr := SendWR{Opcode: WRRDMARead, Flags: SendSignaled, SGList: []SGE{cli.mr.SGE(0, 64)},
		RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey()}
	wc := make([]WC, 1)
	var lkc, lks qpLookup
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := cli.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		cli.conn.deliver(srv.ctx, &lks) // the READ request
		srv.conn.deliver(cli.ctx, &lkc) // its response
		if n, err := cli.cq.Poll(wc); n != 1 || err != nil || wc[0].Status != WCSuccess {
			b.Fatalf("round trip %d: %d completions, %v, %v", i, n, err, wc[0].Status)
		}
	}
}
