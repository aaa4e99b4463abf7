package verbs_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// benchWrite pipelines RDMA WRITEs of size bytes, keeping depth outstanding,
// and sleeps on a completion channel whenever the CQ is empty (event mode:
// on a 2-core machine a spinning poller takes a core the receive path needs).
func benchWrite(b *testing.B, size, seg int) {
	const depth = 8
	p := verbstest.NewPair(b, verbstest.Options{BufSize: size, MaxSendWR: 64, SegmentSize: seg})
	a, r := p.A, p.B
	ch, _ := a.Ctx.CreateCompChannel()
	cq, _ := a.Ctx.CreateCQ(64, ch)
	qp, _ := a.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4}})
	rq, _ := r.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: r.CQ, RecvCQ: r.CQ, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	e := &verbstest.End{Ctx: a.Ctx, PD: a.PD, CQ: cq, QP: qp, MR: a.MR}
	f := &verbstest.End{Ctx: r.Ctx, PD: r.PD, CQ: r.CQ, QP: rq, MR: r.MR}
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 4, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite, SegmentSize: seg}
	if err := verbstest.Connect(e, f, o); err != nil {
		b.Fatal(err)
	}
	if err := verbstest.Connect(f, e, o); err != nil {
		b.Fatal(err)
	}
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, size)}, RemoteAddr: r.MR.Addr(), RKey: r.MR.RKey()}
	wc := make([]verbs.WC, 16)
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			wr.WRID = uint64(posted)
			if _, err := qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		cq.ReqNotify(false)
		n, err := cq.Poll(wc)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			c, err := ch.GetEvent(ctx)
			if err != nil {
				b.Fatal(err)
			}
			c.AckEvents(1)
			continue
		}
		for _, c := range wc[:n] {
			if c.Status != verbs.WCSuccess {
				b.Fatalf("completion %v", c.Status)
			}
		}
		done += n
	}
}

func BenchmarkWrite64KiB(b *testing.B) { benchWrite(b, 64<<10, 0) }
func BenchmarkWrite1MiB(b *testing.B)  { benchWrite(b, 1<<20, 0) }

// The large-segment extension (segment.go): 32 KiB segments (two per GSO
// send and GRO datagram) and the largest, 60 KiB (one per datagram).
func BenchmarkWrite1MiBSeg32K(b *testing.B) { benchWrite(b, 1<<20, 32768) }
func BenchmarkWrite1MiBSeg60K(b *testing.B) { benchWrite(b, 1<<20, verbs.SegmentSizeLimit) }

// benchRead measures one 64-byte RDMA READ round trip at a time. In event
// mode the poller sleeps on a completion channel (ibv_req_notify_cq +
// ibv_get_cq_event); otherwise it spins on Poll as perftest does. Both ends
// share this process's two Ps, so the spinning poller competes with both
// receive loops: the CLI's busy-poll mode (one process per core, the
// receive loops polling their sockets too) is measured by bench/run.sh.
func benchRead(b *testing.B, events bool) {
	p := verbstest.NewPair(b, verbstest.Options{BufSize: 4096})
	a, r := p.A, p.B
	ch, _ := a.Ctx.CreateCompChannel()
	cq, _ := a.Ctx.CreateCQ(16, ch)
	qp, _ := a.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	rq, _ := r.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: r.CQ, RecvCQ: r.CQ, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	e := &verbstest.End{Ctx: a.Ctx, PD: a.PD, CQ: cq, QP: qp, MR: a.MR}
	f := &verbstest.End{Ctx: r.Ctx, PD: r.PD, CQ: r.CQ, QP: rq, MR: r.MR}
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 4, Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}
	if err := verbstest.Connect(e, f, o); err != nil {
		b.Fatal(err)
	}
	if err := verbstest.Connect(f, e, o); err != nil {
		b.Fatal(err)
	}
	wr := verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 64)}, RemoteAddr: r.MR.Addr(), RKey: r.MR.RKey()}
	wc := make([]verbs.WC, 1)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if events {
			cq.ReqNotify(false)
		}
		if _, err := qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		for {
			n, err := cq.Poll(wc)
			if err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				if wc[0].Status != verbs.WCSuccess {
					b.Fatal(wc[0].Status)
				}
				break
			}
			if events {
				c, err := ch.GetEvent(ctx)
				if err != nil {
					b.Fatal(err)
				}
				c.AckEvents(1)
				cq.ReqNotify(false)
			}
		}
	}
}

func BenchmarkRead64BEvent(b *testing.B)    { benchRead(b, true) }
func BenchmarkRead64BBusyPoll(b *testing.B) { benchRead(b, false) }

// BenchmarkRawUDPPingPong64B is the latency yardstick: a 64-byte UDP
// datagram sent and echoed between two loopback sockets, blocking reads.
func BenchmarkRawUDPPingPong64B(b *testing.B) {
	a, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(verbstest.LoopbackAddr(), 4791)))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(verbstest.LoopbackAddr(), 4791)))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	dst := c.LocalAddr().(*net.UDPAddr).AddrPort()
	buf := make([]byte, 64+40)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := a.WriteToUDPAddrPort(buf, dst); err != nil {
			b.Fatal(err)
		}
		if _, _, err := a.ReadFromUDPAddrPort(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawUDP4KiB is the yardstick: plain UDP datagrams of a RoCE
// packet's size (4096 B payload + 28 B headers), one per system call, from
// one loopback socket to another, with the receiver confirming each byte
// count. b.SetBytes counts payload bytes as the WRITE benchmarks do.
func BenchmarkRawUDP4KiB(b *testing.B) {
	const size = 4096 + 28
	ra := netip.AddrPortFrom(verbstest.LoopbackAddr(), 4791)
	sa := netip.AddrPortFrom(verbstest.LoopbackAddr(), 4791)
	rc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ra))
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	sc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(sa))
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	rc.SetReadBuffer(4 << 20)
	sc.SetWriteBuffer(4 << 20)
	// Flow control so that no datagram is lost: the receiver acknowledges
	// every 64 datagrams, the sender keeps at most 128 outstanding (the
	// same window the RC requester uses).
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	received := 0
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		buf := make([]byte, 65536)
		for i := 0; i < b.N; i++ {
			if _, _, err := rc.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
			mu.Lock()
			received++
			cond.Signal()
			mu.Unlock()
		}
	}()
	pkt := make([]byte, size)
	for i := 0; i < b.N; i++ {
		mu.Lock()
		for i-received >= 128 {
			cond.Wait()
		}
		mu.Unlock()
		if _, err := sc.WriteToUDPAddrPort(pkt, ra); err != nil {
			b.Fatal(err)
		}
	}
	mu.Lock()
	for received < b.N {
		cond.Wait()
	}
	mu.Unlock()
}
