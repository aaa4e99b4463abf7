package verbs_test

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// wantLimitError checks that err wraps target and names the limit and what
// to do about it.
func wantLimitError(t *testing.T, what string, err error, target error, words ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not say %q", what, err, w)
		}
	}
}

func memContext(t *testing.T) *verbs.Context {
	n := transporttest.NewNetwork(1)
	ctx, err := verbs.NewContext(&verbs.Options{Conn: n.Attach(netip.MustParseAddrPort("198.18.6.1:4791"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close(); n.Close() })
	return ctx
}

// TestQPLimit: the MaxQP+1-th QP is refused with an error that names the
// limit and the remedy; closing one makes room.
func TestQPLimit(t *testing.T) {
	ctx := memContext(t)
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(1, nil)
	attr := &verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}
	qps := make([]*verbs.QP, 0, verbs.MaxQP)
	for range verbs.MaxQP {
		qp, err := pd.CreateQP(attr)
		if err != nil {
			t.Fatalf("QP %d of %d: %v", len(qps)+1, verbs.MaxQP, err)
		}
		qps = append(qps, qp)
	}
	_, err := pd.CreateQP(attr)
	wantLimitError(t, "QP past the limit", err, verbs.ErrResourceLimit, "4096", "verbs.MaxQP", "close QPs")
	qps[100].Close()
	if _, err := pd.CreateQP(attr); err != nil {
		t.Fatalf("after closing a QP: %v", err)
	}
}

// TestMRLimit: the MaxMR+1-th registration is refused; deregistering one
// makes room.
func TestMRLimit(t *testing.T) {
	ctx := memContext(t)
	pd, _ := ctx.AllocPD()
	buf := make([]byte, verbs.MaxMR)
	mrs := make([]*verbs.MR, 0, verbs.MaxMR)
	for i := range verbs.MaxMR {
		mr, err := pd.RegMR(buf[i:i+1], verbs.AccessLocalWrite)
		if err != nil {
			t.Fatalf("MR %d of %d: %v", i+1, verbs.MaxMR, err)
		}
		mrs = append(mrs, mr)
	}
	_, err := pd.RegMR(buf[:8], verbs.AccessLocalWrite)
	wantLimitError(t, "MR past the limit", err, verbs.ErrResourceLimit, "65536", "verbs.MaxMR", "deregister")
	mrs[7].Deregister()
	if _, err := pd.RegMR(buf[:8], verbs.AccessLocalWrite); err != nil {
		t.Fatalf("after deregistering an MR: %v", err)
	}
}

// TestQueueLimits: CQ entries, work requests, SGEs, inline data and
// rd_atomic beyond the device's limits are refused with clear errors.
func TestQueueLimits(t *testing.T) {
	ctx := memContext(t)
	pd, _ := ctx.AllocPD()
	_, err := ctx.CreateCQ(verbs.MaxCQE+1, nil)
	wantLimitError(t, "CQ entries", err, verbs.ErrInvalidArgument, "verbs.MaxCQE", "poll")
	_, err = ctx.CreateCQ(0, nil)
	wantLimitError(t, "zero CQ entries", err, verbs.ErrInvalidArgument, "want 1..")
	cq, _ := ctx.CreateCQ(4, nil)
	for _, c := range []struct {
		name  string
		cap   verbs.QPCap
		words []string
	}{
		{"send WRs", verbs.QPCap{MaxSendWR: verbs.MaxQPWR + 1, MaxRecvWR: 1}, []string{"verbs.MaxQPWR"}},
		{"recv WRs", verbs.QPCap{MaxSendWR: 1, MaxRecvWR: verbs.MaxQPWR + 1}, []string{"verbs.MaxQPWR"}},
		{"SGEs", verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: verbs.MaxSGE + 1}, []string{"verbs.MaxSGE"}},
		{"inline", verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: verbs.MaxInlineData + 1}, []string{"verbs.MaxInlineData"}},
	} {
		_, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: c.cap})
		wantLimitError(t, c.name, err, verbs.ErrInvalidArgument, c.words...)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, AH: verbs.AHAttr{DGID: wire.GIDFromAddr(netip.MustParseAddr("198.18.6.2"))},
		PathMTU: verbs.MTU1024, DestQPN: 0x20, MaxDestRdAtomic: verbs.MaxRdAtomic + 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	wantLimitError(t, "max_dest_rd_atomic", err, verbs.ErrInvalidArgument, "verbs.MaxRdAtomic", "fewer outstanding")
	// A full send queue says so.
	qp2, _ := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	qp2.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
	if _, err := qp2.PostRecv(verbs.RecvWR{}, verbs.RecvWR{}); !errors.Is(err, verbs.ErrQueueFull) {
		t.Errorf("second receive on a 1-entry queue: %v, want ErrQueueFull", err)
	}
}

// TestCQOverrun: completions beyond a CQ's capacity put it in error, as in
// ibverbs, and Poll says completions were lost.
func TestCQOverrun(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a := p.A
	small, err := a.Ctx.CreateCQ(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: small, RecvCQ: small, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := verbstest.Connect(&verbstest.End{Ctx: a.Ctx, QP: qp}, p.B, verbstest.Options{Type: verbs.QPTypeUD}); err != nil {
		t.Fatal(err)
	}
	ah, _ := a.PD.CreateAH(verbs.AHAttr{DGID: p.B.Ctx.GID(), PortNum: 1})
	for i := range 4 {
		mustPost(t, qp, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
			AH: ah, RemoteQPN: 0x7777, RemoteQKey: 0x11111111})
	}
	wc := make([]verbs.WC, 4)
	if n, err := small.Poll(wc); n != 2 || err != nil {
		t.Fatalf("first poll: %d, %v; want the 2 that fit", n, err)
	}
	if _, err := small.Poll(wc); !errors.Is(err, verbs.ErrQueueFull) {
		t.Fatalf("poll after an overrun: %v, want ErrQueueFull", err)
	}
}

// TestReadAtomicLimit: the requester never has more READs and atomics
// outstanding than max_rd_atomic, counted on the wire.
func TestReadAtomicLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 3
		p, n := memPair(t, 2, transporttest.Faults{Delay: 20 * time.Microsecond}, verbstest.Options{MaxRdAtomic: limit})
		defer n.Close()
		a, b := p.A, p.B
		la := a.Ctx.LocalAddr()
		var mu sync.Mutex
		out, most := 0, 0
		n.SetFilter(func(d transporttest.Dir, buf []byte) transporttest.Verdict {
			var pk wire.Packet
			if pk.Parse(buf) != nil {
				return transporttest.Pass
			}
			mu.Lock()
			defer mu.Unlock()
			switch op := pk.BTH.Opcode(); {
			case d.From == la && (op == wire.ReadRequest || op.IsAtomic()):
				out++
				most = max(most, out)
			case d.From != la && (op == wire.ReadResponseOnly || op == wire.ReadResponseLast || op == wire.AtomicAcknowledge):
				out--
			}
			return transporttest.Pass
		})
		const ops = 40
		for i := range ops {
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(i*64, 64)}, RemoteAddr: b.MR.Addr() + uint64(i*64), RKey: b.MR.RKey()}
			if i%3 == 2 {
				wr.Opcode, wr.SGList, wr.RemoteAddr, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, []verbs.SGE{a.MR.SGE(8192+i*8, 8)}, b.MR.Addr()+8192, 1
			}
			mustPost(t, a.QP, wr)
		}
		for i, wc := range pollFake(t, a, ops, 10*time.Second) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %d: %v", i, wc.Status)
			}
		}
		if most > limit || most < 2 {
			t.Errorf("at most %d READs/atomics were outstanding, want 2..%d", most, limit)
		}
		p.A.Ctx.Close()
		p.B.Ctx.Close()
	})
}

// TestNoLeaksAfterClose opens and closes contexts on real UDP sockets,
// with QPs that moved data and one whose peer vanished mid-transfer: after
// Close, the goroutine count and (on Linux) the open file descriptors are
// back where they started.
func TestNoLeaksAfterClose(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return -1
		}
		return len(ents)
	}
	runtime.GC()
	g0, f0 := runtime.NumGoroutine(), fds()
	for round := range 10 {
		// Timeout 14 (67 ms) with 7 retries: the first WRITE must succeed
		// even on a loaded machine; the vanished peer costs 8 × 67 ms.
		p := verbstest.NewPair(t, verbstest.Options{Timeout: 14, RetryCnt: 7, SetRetry: true, RNRRetry: 7})
		a, b := p.A, p.B
		mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 4096)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
		if round%2 == 1 {
			// The peer vanishes with a WRITE in flight: RETRY_EXC_ERR
			// after (7+1) × 67 ms.
			b.Ctx.Close()
			mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, 4096)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
			if wc := a.Wait(t, 1); wc[0].Status != verbs.WCRetryExcErr {
				t.Fatalf("WRITE to a vanished peer: %v", wc[0].Status)
			}
		}
		a.Ctx.Close()
		b.Ctx.Close()
	}
	// Goroutines end asynchronously after Close returns (timer callbacks
	// in flight); wait for them, bounded.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > g0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after closing everything, %d before", runtime.NumGoroutine(), g0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f1 := fds(); f1 > f0 {
		t.Errorf("%d open file descriptors after closing everything, %d before", f1, f0)
	}
}
