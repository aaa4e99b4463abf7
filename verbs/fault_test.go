package verbs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// memPair builds a connected pair over an in-memory network with faults.
func memPair(t testing.TB, seed uint64, f transporttest.Faults, o verbstest.Options) (*verbstest.Pair, *transporttest.Network) {
	t.Helper()
	n := transporttest.NewNetwork(seed)
	t.Cleanup(func() { n.Close() })
	a := n.Attach(netip.MustParseAddrPort("198.18.7.1:4791"))
	b := n.Attach(netip.MustParseAddrPort("198.18.7.2:4791"))
	o.Conns = [2]transport.Conn{a, b}
	p := verbstest.NewPair(t, o)
	n.SetFaults(f)
	return p, n
}

// TestSuiteMemoryAndUDP runs the same operations over the in-memory link and
// over real UDP sockets on loopback.
func TestSuiteMemoryAndUDP(t *testing.T) {
	for _, real := range []bool{false, true} {
		t.Run(fmt.Sprintf("udp=%v", real), func(t *testing.T) {
			// ACK timeout 16 (268 ms), not 14 (67 ms): the responder
			// answers a 4 MiB READ (4096 packets) in one burst, which under
			// the race detector takes longer than 67 ms. The requester then
			// times out and asks again, each request answered with 4 MiB
			// more, and the SEND that follows waits behind them until it
			// runs out of retries. Nothing here is lost; no fault is set.
			o := verbstest.Options{BufSize: 4 << 20, PathMTU: verbs.MTU1024, Timeout: 16}
			var p *verbstest.Pair
			if real {
				p = verbstest.NewPair(t, o)
			} else {
				p, _ = memPair(t, 1, transporttest.Faults{}, o)
			}
			exerciseRC(t, p, []int{0, 1, 1023, 1024, 1025, 100_000, 4 << 20})
		})
	}
}

// exerciseRC moves each size with WRITE, READ and SEND and checks every
// byte, then runs fetch-and-adds and checks each executed exactly once.
func exerciseRC(t *testing.T, p *verbstest.Pair, sizes []int) {
	t.Helper()
	a, b := p.A, p.B
	for i, size := range sizes {
		fmt.Fprintf(os.Stderr, "  size %d\n", size)
		fill(a.Buf[:size], uint64(i))
		mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
		tell(t, a, b) // the WRITE has landed
		if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
			t.Fatalf("size %d: WRITE data differs", size)
		}
		fill(b.Buf[:size], uint64(i)+100)
		tell(t, b, a) // the READ's source is ready
		mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		wantOK(t, a.Wait(t, 1), verbs.WCRDMARead)
		if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
			t.Fatalf("size %d: READ data differs", size)
		}
		fill(a.Buf[:size], uint64(i)+200)
		if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{b.MR.SGE(0, len(b.Buf))}}); err != nil {
			t.Fatal(err)
		}
		mustPost(t, a.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, size)}})
		wantOK(t, a.Wait(t, 1), verbs.WCSend)
		rw := b.Wait(t, 1)
		wantOK(t, rw, verbs.WCRecv)
		if rw[0].ByteLen != uint32(size) || !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
			t.Fatalf("size %d: SEND data differs (byte_len %d)", size, rw[0].ByteLen)
		}
		tell(t, b, a) // b is done with its buffer
	}
	// Atomics: 200 fetch-and-adds of 1, 16 outstanding at a time. Each must
	// return a distinct original value and the sum must be exact.
	const n = 200
	binary.NativeEndian.PutUint64(b.Buf[0:], 0)
	tell(t, b, a)
	seen := make(map[uint64]bool)
	for done := 0; done < n; {
		batch := min(16, n-done)
		for k := 0; k < batch; k++ {
			mustPost(t, a.QP, verbs.SendWR{WRID: uint64(k), Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(8*k, 8)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey(), CompareAdd: 1})
		}
		for _, wc := range a.Wait(t, batch) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("atomic: %v", wc.Status)
			}
			v := binary.NativeEndian.Uint64(a.Buf[8*wc.WRID:])
			if seen[v] {
				t.Fatalf("fetch-and-add returned %d twice: executed more than once", v)
			}
			seen[v] = true
		}
		done += batch
	}
	tell(t, a, b) // the atomics have executed
	if got := binary.NativeEndian.Uint64(b.Buf[0:]); got != n {
		t.Fatalf("after %d fetch-and-adds of 1 the counter is %d", n, got)
	}
}

// TestRCUnderFaults: with loss, reordering, duplication and corruption RC
// still delivers every byte exactly once and in order. The loss rate L
// applies to the requests; responses lose L/4 (a 20 % loss in both
// directions at once, plus corruption, would exhaust the IBTA retry count
// of 7 now and then, and a retry count that ends is what makes a dead peer
// an error instead of a hang). Duplication, reordering and corruption hit
// both directions. The ACK timeout is 67 ms (14), as perftest's: with
// 16 ms, a loaded machine under -race expired timers of live exchanges and
// the 20 % case now and then ran out of retries.
func TestRCUnderFaults(t *testing.T) {
	for _, loss := range []float64{0.01, 0.05, 0.20} {
		t.Run(fmt.Sprintf("loss=%g", loss), func(t *testing.T) {
			p, n := faultyPair(t, loss, memPair)
			exerciseRC(t, p, []int{1, 5000, 256 << 10})
			st := n.Stats()
			t.Logf("network: sent %d lost %d duplicated %d corrupted %d reordered %d; requester timeouts %d retransmits %d",
				st.Sent, st.Lost, st.Duplicated, st.Corrupted, st.Reordered,
				p.A.Ctx.Counters().Timeouts, p.A.Ctx.Counters().Retransmits)
			if st.Lost == 0 || st.Duplicated == 0 || st.Corrupted == 0 || st.Reordered == 0 {
				t.Errorf("the faults were not exercised: %+v", st)
			}
			// A stream of SENDs arrives in order, each exactly once.
			a, b := p.A, p.B
			const msgs = 100
			for i := 0; i < msgs; i++ {
				if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(i*8, 8)}}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < msgs; i++ {
				binary.BigEndian.PutUint64(a.Buf[i*8:], uint64(i))
				mustPost(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(i*8, 8)}})
			}
			for i, wc := range b.Wait(t, msgs) {
				if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
					t.Fatalf("receive %d: %+v", i, wc)
				}
				if got := binary.BigEndian.Uint64(b.Buf[i*8:]); got != uint64(i) {
					t.Fatalf("receive %d holds message %d", i, got)
				}
			}
		})
	}
}

// faultyPair connects a pair with pair (memPair, srPair) over a link with
// TestRCUnderFaults's faults at loss rate loss.
func faultyPair(t *testing.T, loss float64, pair func(testing.TB, uint64, transporttest.Faults, verbstest.Options) (*verbstest.Pair, *transporttest.Network)) (*verbstest.Pair, *transporttest.Network) {
	both := transporttest.Faults{Duplicate: loss / 2, Corrupt: loss / 4, Reorder: loss, ReorderAfter: 3,
		ReorderDelay: 200 * time.Microsecond}
	p, n := pair(t, uint64(loss*1000), both, verbstest.Options{BufSize: 256 << 10, PathMTU: verbs.MTU1024, Timeout: 14})
	req, resp := both, both
	req.Loss, resp.Loss = loss, loss/4
	la, lb := p.A.Ctx.LocalAddr(), p.B.Ctx.LocalAddr()
	n.SetDirFaults(transporttest.Dir{From: la, To: lb}, req)
	n.SetDirFaults(transporttest.Dir{From: lb, To: la}, resp)
	return p, n
}

// TestRetryExhaustion: a peer that never answers ends in RETRY_EXC_ERR after
// (retry_cnt+1) ACK timeouts, measured on synctest's fake clock.
func TestRetryExhaustion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout, retry = 14, 3
		p, n := memPair(t, 9, transporttest.Faults{}, verbstest.Options{Timeout: timeout, RetryCnt: retry, SetRetry: true, RNRRetry: 7})
		n.SetFilter(func(transporttest.Dir, []byte) transporttest.Verdict { return transporttest.Drop })
		a, b := p.A, p.B
		start := time.Now()
		mustPost(t, a.QP, verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 100)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		mustPost(t, a.QP, verbs.SendWR{WRID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 1)}})
		var wc [2]verbs.WC
		got := 0
		for got < 2 {
			time.Sleep(time.Millisecond)
			if time.Since(start) > 2*time.Second {
				c := a.Ctx.Counters()
				t.Fatalf("no completion after %v: timeouts %d sent %d state %v", time.Since(start), c.Timeouts, c.PacketsOut, a.QP.State())
			}
			k, _ := a.CQ.Poll(wc[got:])
			got += k
		}
		elapsed := time.Since(start)
		want := time.Duration(retry+1) * (4096 << timeout) * time.Nanosecond
		if wc[0].Status != verbs.WCRetryExcErr || wc[0].WRID != 7 || wc[1].Status != verbs.WCWRFlushErr {
			t.Fatalf("completions %+v", wc)
		}
		if elapsed < want || elapsed > want+2*time.Millisecond {
			t.Fatalf("RETRY_EXC_ERR after %v, want %v ((retry_cnt+1) x 4.096us x 2^%d)", elapsed, want, timeout)
		}
		if a.QP.State() != verbs.QPStateErr {
			t.Fatalf("state %v, want ERR", a.QP.State())
		}
		p.A.Ctx.Close()
		p.B.Ctx.Close()
		n.Close()
	})
}

// TestRNRRetryExhaustion: a receiver that never posts a receive answers
// every SEND with an RNR NAK; after rnr_retry retries the SEND completes
// with RNR_RETRY_EXC_ERR, each wait as long as the RNR timer code says.
func TestRNRRetryExhaustion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rnrRetry, rnrTimer = 4, 14 // 1.28 ms per wait
		p, n := memPair(t, 3, transporttest.Faults{}, verbstest.Options{RNRRetry: rnrRetry, RetryCnt: 7, SetRetry: true, MinRNRTimer: rnrTimer})
		a := p.A
		start := time.Now()
		mustPost(t, a.QP, verbs.SendWR{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 10)}})
		var wc [1]verbs.WC
		for {
			time.Sleep(100 * time.Microsecond)
			if k, _ := a.CQ.Poll(wc[:]); k == 1 {
				break
			}
		}
		elapsed := time.Since(start)
		want := rnrRetry * 1280 * time.Microsecond
		if wc[0].Status != verbs.WCRNRRetryExcErr {
			t.Fatalf("completion %+v, want RNR_RETRY_EXC_ERR", wc[0])
		}
		if elapsed < want || elapsed > want+time.Millisecond {
			t.Fatalf("RNR_RETRY_EXC_ERR after %v, want %v", elapsed, want)
		}
		if got := p.B.Ctx.Counters().RNRNAKsSent; got != rnrRetry+1 {
			t.Fatalf("responder sent %d RNR NAKs, want %d", got, rnrRetry+1)
		}
		p.A.Ctx.Close()
		p.B.Ctx.Close()
		n.Close()
	})
}

// TestManyQPs runs 32 QP pairs on one pair of contexts at once.
func TestManyQPs(t *testing.T) {
	const qps = 32
	base := verbstest.NewPair(t, verbstest.Options{BufSize: 2 * qps * (32 << 10)}) // a slice and its read-back per QP
	done := make(chan error, qps)
	for i := 0; i < qps; i++ {
		go func(i int) {
			done <- oneQP(base, i)
		}(i)
	}
	for i := 0; i < qps; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if g := runtime.NumGoroutine(); g > 100 {
		t.Errorf("%d goroutines after the QPs finished", g)
	}
}

func oneQP(base *verbstest.Pair, i int) error {
	mk := func(e *verbstest.End) (*verbstest.End, error) {
		cq, err := e.Ctx.CreateCQ(64, nil)
		if err != nil {
			return nil, err
		}
		qp, err := e.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
		if err != nil {
			return nil, err
		}
		return &verbstest.End{Ctx: e.Ctx, PD: e.PD, CQ: cq, QP: qp, MR: e.MR, Buf: e.Buf}, nil
	}
	a, err := mk(base.A)
	if err != nil {
		return err
	}
	b, err := mk(base.B)
	if err != nil {
		return err
	}
	defer a.QP.Close()
	defer b.QP.Close()
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 4,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead}
	if err := verbstest.Connect(a, b, o); err != nil {
		return err
	}
	if err := verbstest.Connect(b, a, o); err != nil {
		return err
	}
	// Each QP writes its own 32 KiB slice of b's buffer and reads it back
	// into the second half of a's over the QP (not from b.Buf: the race
	// detector cannot see that the WRITE's ACK came over a socket after b's
	// receive loop wrote it).
	off, size, back := i*32<<10, 32<<10, len(a.Buf)/2
	fill(a.Buf[off:off+size], uint64(i))
	wait := func(op verbs.WCOpcode) error {
		wc := make([]verbs.WC, 1)
		for deadline := time.Now().Add(60 * time.Second); ; {
			n, err := a.CQ.Poll(wc)
			if err != nil {
				return err
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("QP %d: no %v completion", i, op)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if wc[0].Status != verbs.WCSuccess || wc[0].Opcode != op {
			return fmt.Errorf("QP %d: %v %v", i, wc[0].Opcode, wc[0].Status)
		}
		return nil
	}
	if _, err := a.QP.PostSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(off, size)}, RemoteAddr: b.MR.Addr() + uint64(off), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	if err := wait(verbs.WCRDMAWrite); err != nil {
		return err
	}
	if _, err := a.QP.PostSend(verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(back+off, size)}, RemoteAddr: b.MR.Addr() + uint64(off), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	if err := wait(verbs.WCRDMARead); err != nil {
		return err
	}
	if !bytes.Equal(a.Buf[off:off+size], a.Buf[back+off:back+off+size]) {
		return fmt.Errorf("QP %d: data differs", i)
	}
	return nil
}

// TestWindowFallbackAfterLostACKs: a QP with the 512-packet window sends a
// 300-packet WRITE; the responder gets every packet but all its ACKs are
// lost until the requester's ACK timeout. The requester then falls back to
// the 128-packet window and resends from the oldest unacknowledged packet,
// which can no longer reach the last PSN it had sent; the responder answers
// the duplicates with an ACK for that last PSN, which must count: dropped
// as "never sent", every round timed out into RETRY_EXC_ERR. Fake clock.
func TestWindowFallbackAfterLostACKs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 12 // 16.8 ms
		ackTimeout := time.Duration(4096<<timeout) * time.Nanosecond
		p, n := memPair(t, 5, transporttest.Faults{}, verbstest.Options{BufSize: 512 << 10, PathMTU: verbs.MTU1024,
			Timeout: timeout, RetryCnt: 2, SetRetry: true, RNRRetry: 7})
		a, b := p.A, p.B
		if err := a.QP.SetSendWindow(512); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		bAddr := b.Ctx.LocalAddr()
		n.SetFilter(func(d transporttest.Dir, pkt []byte) transporttest.Verdict {
			if d.From == bAddr && time.Since(start) < ackTimeout {
				return transporttest.Drop // every ACK of the first burst
			}
			return transporttest.Pass
		})
		mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 300<<10)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		wc := pollWC(t, a.CQ, start)
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("WRITE: %v after %v (timeouts %d), want success", wc.Status, time.Since(start), a.Ctx.Counters().Timeouts)
		}
		if c := a.Ctx.Counters(); c.Timeouts == 0 {
			t.Fatalf("no ACK timeout happened: the test did not exercise the fallback (%+v)", c)
		}
		p.A.Ctx.Close()
		p.B.Ctx.Close()
		n.Close()
	})
}

// TestNarrowWindowAsksForACK: a QP whose window (SetSendWindow 16, as the
// perftest commands' -q shares a window among QPs) is narrower than the
// periodic AckReq (every 64 packets) sends a 100-packet WRITE. The
// requester asks for an ACK on the packet that fills the window, so the
// WRITE completes without a retransmit timeout; and a lost packet does
// not widen the window to the default 128 (the fallback after a loss is
// for windows SetSendWindow widened). Fake clock.
func TestNarrowWindowAsksForACK(t *testing.T) {
	for _, lose := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p, n := memPair(t, 5, transporttest.Faults{}, verbstest.Options{BufSize: 128 << 10, PathMTU: verbs.MTU1024,
				Timeout: 14, RetryCnt: 7, SetRetry: true, RNRRetry: 7})
			a, b := p.A, p.B
			const window = 16
			if err := a.QP.SetSendWindow(window); err != nil {
				t.Fatal(err)
			}
			aAddr, bAddr := a.Ctx.LocalAddr(), b.Ctx.LocalAddr()
			var mu sync.Mutex
			// ahead: how far A's highest PSN sent runs past the last
			// PSN B answered (an ACK's, or a NAK's expected one)
			var top, answered wire.PSN
			sent, dropped, started, ahead := 0, false, false, int32(0)
			n.SetFilter(func(d transporttest.Dir, pkt []byte) transporttest.Verdict {
				mu.Lock()
				defer mu.Unlock()
				if len(pkt) < wire.BTHSize {
					return transporttest.Pass
				}
				psn := wire.BTH(pkt[:wire.BTHSize]).PSN()
				switch d.From {
				case aAddr:
					if !started {
						started, top, answered = true, psn, psn.Add(-1)
					}
					if top.Less(psn) {
						top = psn
					}
					ahead = max(ahead, top.Diff(answered))
					sent++
					if lose && sent == 10 && !dropped {
						dropped = true
						return transporttest.Drop
					}
				case bAddr:
					if answered.Less(psn) {
						answered = psn
					}
				}
				return transporttest.Pass
			})
			mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, 100<<10)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
			start := time.Now()
			wc := pollWC(t, a.CQ, start)
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE: %v, want success", wc.Status)
			}
			c := a.Ctx.Counters()
			if !lose && (c.Timeouts != 0 || c.Retransmits != 0) {
				t.Errorf("timeouts %d, retransmits %d: the full window did not ask for an ACK", c.Timeouts, c.Retransmits)
			}
			mu.Lock()
			if ahead > window {
				t.Errorf("lose %v: %d PSNs sent past the last answered, window %d", lose, ahead, window)
			}
			mu.Unlock()
			p.A.Ctx.Close()
			p.B.Ctx.Close()
			n.Close()
		})
	}
}

// pollWC polls cq every 100 µs for one completion and returns it; the test
// fails when none came within 5 s of start.
func pollWC(t *testing.T, cq *verbs.CQ, start time.Time) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	for {
		time.Sleep(100 * time.Microsecond)
		if k, _ := cq.Poll(wc[:]); k == 1 {
			return wc[0]
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("no completion within 5 s")
		}
	}
}
