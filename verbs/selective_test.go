package verbs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// srPair is a connected pair whose QPs use selective retransmission and
// the 512-packet window, as two tbrdma ends that agreed on both.
func srPair(t testing.TB, seed uint64, f transporttest.Faults, o verbstest.Options) (*verbstest.Pair, *transporttest.Network) {
	t.Helper()
	p, n := memPair(t, seed, f, o)
	for _, e := range []*verbstest.End{p.A, p.B} {
		if err := e.QP.SetSelectiveRetransmit(true); err != nil {
			t.Fatal(err)
		}
		if err := e.QP.SetSendWindow(512); err != nil {
			t.Fatal(err)
		}
	}
	return p, n
}

// srLoss is a filter that drops chosen transmissions of A's request
// packets (by PSN offset from the first one A sends and by how often that
// PSN was sent before: 0 the first time) and chosen answers of B.
type srLoss struct {
	mu       sync.Mutex
	started  bool
	base     wire.PSN
	sends    map[int32]int
	dropReq  func(off int32, nth int) bool
	dropResp func(pkt *wire.Packet) bool
	dropped  int
}

func (l *srLoss) install(p *verbstest.Pair, n *transporttest.Network) {
	a := p.A.Ctx.LocalAddr()
	l.sends = map[int32]int{}
	n.SetFilter(func(d transporttest.Dir, b []byte) transporttest.Verdict {
		l.mu.Lock()
		defer l.mu.Unlock()
		var pkt wire.Packet
		if pkt.Parse(b) != nil {
			return transporttest.Pass
		}
		if d.From == a {
			if !l.started {
				l.started, l.base = true, pkt.BTH.PSN()
			}
			off := pkt.BTH.PSN().Diff(l.base)
			nth := l.sends[off]
			l.sends[off]++
			if l.dropReq != nil && l.dropReq(off, nth) {
				l.dropped++
				return transporttest.Drop
			}
			return transporttest.Pass
		}
		if l.dropResp != nil && l.dropResp(&pkt) {
			l.dropped++
			return transporttest.Drop
		}
		return transporttest.Pass
	})
}

// resent counts the request PSNs A sent more than once, and how often.
func (l *srLoss) resent() (psns, extra int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.sends {
		if k > 1 {
			psns++
			extra += k - 1
		}
	}
	return psns, extra
}

// srWrite posts one WRITE of size bytes from A to B and waits for it on
// the fake clock; it returns how long it took and checks every byte.
func srWrite(t *testing.T, p *verbstest.Pair, size int) time.Duration {
	t.Helper()
	a, b := p.A, p.B
	fill(a.Buf[:size], 7)
	start := time.Now()
	mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
	wc := pollWC(t, a.CQ, start)
	took := time.Since(start)
	if wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v after %v, want success (counters %+v)", wc.Status, took, a.Ctx.Counters())
	}
	if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
		t.Fatal("the WRITE's data differs at the responder")
	}
	return took
}

const srTimeout = 14 // 67 ms, as perftest's

func srOptions() verbstest.Options {
	return verbstest.Options{BufSize: 512 << 10, PathMTU: verbs.MTU1024, Timeout: srTimeout, RetryCnt: 7, SetRetry: true, RNRRetry: 7}
}

// TestSelectiveResendsOnlyTheGap: five packets lost in the middle of a
// 300-packet WRITE cost exactly those five packets sent again, no ACK
// timeout, and the responder held the packets behind the gap. Fake clock.
func TestSelectiveResendsOnlyTheGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, n := srPair(t, 5, transporttest.Faults{}, srOptions())
		l := &srLoss{dropReq: func(off int32, nth int) bool { return nth == 0 && off >= 100 && off < 105 }}
		l.install(p, n)
		srWrite(t, p, 300<<10)
		psns, extra := l.resent()
		ca, cb := p.A.Ctx.Counters(), p.B.Ctx.Counters()
		if psns != 5 || extra != 5 || ca.Retransmits != 5 {
			t.Errorf("%d PSNs sent again (%d times), retransmits counter %d: want the 5 lost ones, once each", psns, extra, ca.Retransmits)
		}
		if ca.Timeouts != 0 {
			t.Errorf("%d ACK timeouts, want none", ca.Timeouts)
		}
		if cb.Held == 0 || cb.NAKsSent[verbs.NAKSeq] == 0 {
			t.Errorf("responder held %d packets and sent %d sequence NAKs: want both", cb.Held, cb.NAKsSent[verbs.NAKSeq])
		}
		p.A.Ctx.Close()
		p.B.Ctx.Close()
		n.Close()
	})
}

// TestSelectiveTailLoss: the last packets of a WRITE (which nothing follows
// to reveal the gap), a resend lost again and lost ACKs each cost a
// tail-loss probe interval (~1 ms), not the 67 ms ACK timeout, and spend
// no retry; a lost gap report costs not even that. Fake clock.
func TestSelectiveTailLoss(t *testing.T) {
	const pkts = 200
	ackTimeout := time.Duration(4096<<srTimeout) * time.Nanosecond
	cases := []struct {
		name     string
		dropReq  func(off int32, nth int) bool
		dropResp func(*wire.Packet) bool
		probe    bool // only a probe can find it
	}{
		{"last three packets", func(off int32, nth int) bool { return nth == 0 && off >= pkts-3 }, nil, true},
		{"last packet twice", func(off int32, nth int) bool { return nth < 2 && off == pkts-1 }, nil, true},
		{"a resent gap lost again", func(off int32, nth int) bool { return nth < 2 && off >= 50 && off < 53 }, nil, true},
		// the next AckReq brings the report again
		{"the first gap report", func(off int32, nth int) bool { return nth == 0 && off == 20 }, firstNAK(), false},
		{"every ACK once", nil, everyACKOnce(), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, n := srPair(t, 5, transporttest.Faults{}, srOptions())
				l := &srLoss{dropReq: c.dropReq, dropResp: c.dropResp}
				l.install(p, n)
				took := srWrite(t, p, pkts<<10)
				ca := p.A.Ctx.Counters()
				if ca.Timeouts != 0 || took >= ackTimeout {
					t.Errorf("took %v with %d ACK timeouts: want no timeout (%v)", took, ca.Timeouts, ackTimeout)
				}
				if c.probe && ca.Probes == 0 {
					t.Errorf("no tail-loss probe was sent")
				}
				if l.dropped == 0 {
					t.Errorf("the filter dropped nothing")
				}
				t.Logf("took %v: %d probes, %d retransmits", took, ca.Probes, ca.Retransmits)
				p.A.Ctx.Close()
				p.B.Ctx.Close()
				n.Close()
			})
		})
	}
}

func firstNAK() func(*wire.Packet) bool {
	done := false
	return func(p *wire.Packet) bool {
		if !done && p.Opcode() == wire.Acknowledge && p.AETH.Syndrome() == wire.SyndromePSNSeqError {
			done = true
			return true
		}
		return false
	}
}

func everyACKOnce() func(*wire.Packet) bool {
	seen := map[wire.PSN]bool{}
	return func(p *wire.Packet) bool {
		if p.Opcode() != wire.Acknowledge || seen[p.BTH.PSN()] {
			return false
		}
		seen[p.BTH.PSN()] = true
		return true
	}
}

// TestSelectiveRNRWhileHolding: SENDs held past a gap meet a responder
// with too few receives once the gap is filled: it answers RNR and drops
// what it held, the requester waits and goes back, and every message
// still arrives once and in order. Fake clock.
func TestSelectiveRNRWhileHolding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, n := srPair(t, 5, transporttest.Faults{}, srOptions())
		a, b := p.A, p.B
		l := &srLoss{dropReq: func(off int32, nth int) bool { return nth == 0 && off == 2 }}
		l.install(p, n)
		const msgs, early = 40, 10
		post := func(from, to int) {
			for i := from; i < to; i++ {
				if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(i*8, 8)}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		post(0, early)
		for i := range msgs {
			binary.BigEndian.PutUint64(a.Buf[i*8:], uint64(i))
			mustPost(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(i*8, 8)}})
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		post(early, msgs)
		got := b.Wait(t, msgs)
		for i, wc := range got {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
				t.Fatalf("receive %d: %+v", i, wc)
			}
			if v := binary.BigEndian.Uint64(b.Buf[i*8:]); v != uint64(i) {
				t.Fatalf("receive %d holds message %d", i, v)
			}
		}
		if cb := b.Ctx.Counters(); cb.RNRNAKsSent == 0 || cb.Held == 0 {
			t.Errorf("RNR NAKs sent %d, packets held %d: the case was not exercised", cb.RNRNAKsSent, cb.Held)
		}
		a.Ctx.Close()
		b.Ctx.Close()
		n.Close()
	})
}

// TestRCUnderFaultsSelective is TestRCUnderFaults between QPs with
// selective retransmission and the 512-packet window: loss, duplication,
// corruption and reordering in both directions, every byte once and in
// order, atomics executed once, and no RETRY_EXC_ERR.
func TestRCUnderFaultsSelective(t *testing.T) {
	for _, loss := range []float64{0.01, 0.05, 0.20} {
		t.Run(fmt.Sprintf("loss=%g", loss), func(t *testing.T) {
			p, n := faultyPair(t, loss, srPair)
			exerciseRC(t, p, []int{1, 5000, 256 << 10})
			st := n.Stats()
			ca, cb := p.A.Ctx.Counters(), p.B.Ctx.Counters()
			t.Logf("network: sent %d lost %d; requester timeouts %d retransmits %d probes %d; responder held %d",
				st.Sent, st.Lost, ca.Timeouts, ca.Retransmits, ca.Probes, cb.Held)
			if st.Lost == 0 || cb.Held == 0 {
				t.Errorf("nothing was lost (%d) or held (%d): the case was not exercised", st.Lost, cb.Held)
			}
		})
	}
}

// TestSelectiveProbeWaitsOutRNR: a requester waiting out an RNR NAK sends
// no probe and does not spin its timer (a probe deadline left in the past
// during the wait fired the timer again at once, for the whole wait; on
// the fake clock the Sleep below then never returned, until go test's
// timeout). After the wait the SEND goes again and completes. Fake clock.
func TestSelectiveProbeWaitsOutRNR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := srOptions()
		o.MinRNRTimer = 31 // 491.52 ms, far longer than the 1 ms probe interval
		p, n := srPair(t, 5, transporttest.Faults{}, o)
		a, b := p.A, p.B
		start := time.Now()
		mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 64)}})
		time.Sleep(100 * time.Millisecond) // inside the RNR wait
		synctest.Wait()
		if c := a.Ctx.Counters(); c.RNRNAKsRcvd == 0 || c.Probes != 0 {
			t.Fatalf("%d RNR NAKs, %d probes: want an RNR wait and no probe in it", c.RNRNAKsRcvd, c.Probes)
		}
		if at := verbs.QPTimerAt(a.QP); !at.IsZero() && at.Before(time.Now()) {
			t.Fatalf("in the RNR wait the timer is armed for %v ago: it fires again and again", time.Since(at))
		}
		if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollWC(t, a.CQ, start); wc.Status != verbs.WCSuccess {
			t.Fatalf("SEND: %v, want success after the RNR wait", wc.Status)
		}
		a.Ctx.Close()
		b.Ctx.Close()
		n.Close()
	})
}
