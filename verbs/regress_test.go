package verbs_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// pollFake polls e's CQ on synctest's fake clock until n completions have
// arrived or limit (fake time) has passed.
func pollFake(t *testing.T, e *verbstest.End, n int, limit time.Duration) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wc := make([]verbs.WC, 16)
	for deadline := time.Now().Add(limit); len(out) < n; {
		k, err := e.CQ.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, wc[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after %v: %+v", len(out), n, limit, out)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return out
}

// dropFirst returns a filter that drops the packets for which match is
// true, the first count of them.
func dropFirst(count int32, match func(d transporttest.Dir, p *wire.Packet) bool) func(transporttest.Dir, []byte) transporttest.Verdict {
	var seen atomic.Int32
	return func(d transporttest.Dir, b []byte) transporttest.Verdict {
		var p wire.Packet
		if p.Parse(b) != nil || !match(d, &p) {
			return transporttest.Pass
		}
		if seen.Add(1) <= count {
			return transporttest.Drop
		}
		return transporttest.Pass
	}
}

// TestSeqNAKKeepsReadLimit is a regression test. A PSN sequence NAK
// rewinds the requester to the responder's expected PSN, which may lie
// past a READ whose response was lost. The requester used to count only
// the READs from that PSN on as outstanding, so it issued more than
// max_rd_atomic; the responder, which keeps that many READs for replay,
// forgot the oldest, its re-request matched nothing and was dropped, and
// the QP died of RETRY_EXC_ERR with the peer alive.
func TestSeqNAKKeepsReadLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, n := memPair(t, 5, transporttest.Faults{Delay: 10 * time.Microsecond},
			verbstest.Options{MaxRdAtomic: 2, RetryCnt: 3, SetRetry: true, RNRRetry: 7, Timeout: 10})
		defer n.Close()
		a, b := p.A, p.B
		la := a.Ctx.LocalAddr()
		// Lose READ 1's response once, and READ 2's request once.
		respDrop := dropFirst(1, func(d transporttest.Dir, pk *wire.Packet) bool {
			return d.From != la && pk.BTH.Opcode() == wire.ReadResponseOnly
		})
		var reqs atomic.Int32
		n.SetFilter(func(d transporttest.Dir, buf []byte) transporttest.Verdict {
			var pk wire.Packet
			if pk.Parse(buf) == nil && d.From == la && pk.BTH.Opcode() == wire.ReadRequest && reqs.Add(1) == 2 {
				return transporttest.Drop
			}
			return respDrop(d, buf)
		})
		fill(b.Buf[:64], 3)
		post := func(id uint64, op verbs.WROpcode, off int) {
			mustPost(t, a.QP, verbs.SendWR{WRID: id, Opcode: op, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(off, 8)}, RemoteAddr: b.MR.Addr() + uint64(off), RKey: b.MR.RKey()})
		}
		post(1, verbs.WRRDMARead, 0)
		post(2, verbs.WRRDMARead, 8)
		post(3, verbs.WRRDMAWrite, 1024) // overtakes the lost READ: sequence NAK
		post(4, verbs.WRRDMARead, 16)
		post(5, verbs.WRRDMARead, 24)
		for i, wc := range pollFake(t, a, 5, 10*time.Second) {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
				t.Fatalf("completion %d: %+v (requester counters %+v)", i, wc, a.Ctx.Counters())
			}
		}
		for _, off := range []int{0, 8, 16, 24} {
			if string(a.Buf[off:off+8]) != string(b.Buf[off:off+8]) {
				t.Errorf("READ at %d: data differs", off)
			}
		}
		if c := b.Ctx.Counters(); c.Drops[verbs.DropDuplicate] != 0 {
			t.Errorf("the responder dropped %d re-requests it no longer remembered", c.Drops[verbs.DropDuplicate])
		}
		p.A.Ctx.Close()
		p.B.Ctx.Close()
	})
}

// TestReadGapRearmedAfterTimeout is a regression test. A READ response
// gap is re-requested at once, once per gap; the flag that says so was
// cleared only by progress, so after a timeout a round whose first
// response was lost waited out another whole ACK timeout (and spent a
// retry) while the rest of its responses were arriving. Here the first
// response of a 4-packet READ is lost three times: with retry_cnt 1 the
// READ must still succeed, after one timeout.
func TestReadGapRearmedAfterTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, n := memPair(t, 6, transporttest.Faults{Delay: 10 * time.Microsecond},
			verbstest.Options{PathMTU: verbs.MTU1024, RetryCnt: 1, SetRetry: true, RNRRetry: 7, Timeout: 12})
		defer n.Close()
		a, b := p.A, p.B
		la := a.Ctx.LocalAddr()
		n.SetFilter(dropFirst(3, func(d transporttest.Dir, pk *wire.Packet) bool {
			return d.From != la && pk.BTH.Opcode() == wire.ReadResponseFirst
		}))
		fill(b.Buf[:4000], 8)
		mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 4000)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		wc := pollFake(t, a, 1, 10*time.Second)
		if wc[0].Status != verbs.WCSuccess {
			t.Fatalf("READ: %v (requester counters %+v)", wc[0].Status, a.Ctx.Counters())
		}
		if string(a.Buf[:4000]) != string(b.Buf[:4000]) {
			t.Fatal("READ data differs")
		}
		if got := a.Ctx.Counters().Timeouts; got != 1 {
			t.Errorf("%d ACK timeouts, want 1", got)
		}
		p.A.Ctx.Close()
		p.B.Ctx.Close()
	})
}
