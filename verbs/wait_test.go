package verbs_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// waitCtx is the bound on every wait in these tests: far longer than any
// of them takes, so that a bug fails the test instead of hanging it.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// untilAsleep returns once n Wait calls sleep on cq.
func untilAsleep(t *testing.T, cq *verbs.CQ, n int) {
	ctx := waitCtx(t)
	for cq.Waiters() != n {
		if ctx.Err() != nil {
			t.Fatalf("%d waiters on the CQ, want %d", cq.Waiters(), n)
		}
		runtime.Gosched()
	}
}

type waitResult struct {
	n   int
	wc  verbs.WC
	err error
}

func goWait(ctx context.Context, cq *verbs.CQ) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		wc := make([]verbs.WC, 4)
		n, err := cq.Wait(ctx, wc)
		done <- waitResult{n, wc[0], err}
	}()
	return done
}

// newCQ returns a CQ of a fresh context, and that context; with
// withChannel the CQ has a completion channel, ch.
func newCQ(t *testing.T, withChannel bool) (cq *verbs.CQ, ch *verbs.CompChannel, ctx *verbs.Context) {
	t.Helper()
	ctx, err := verbs.NewContext(&verbs.Options{Addr: verbstest.LoopbackAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	if withChannel {
		if ch, err = ctx.CreateCompChannel(); err != nil {
			t.Fatal(err)
		}
	}
	if cq, err = ctx.CreateCQ(8, ch); err != nil {
		t.Fatal(err)
	}
	return cq, ch, ctx
}

func TestCQWaitWakesOnCompletion(t *testing.T) {
	cq, ch, _ := newCQ(t, true)
	done := goWait(waitCtx(t), cq)
	untilAsleep(t, cq, 1)
	cq.Push(verbs.WC{WRID: 7})
	r := <-done
	if r.err != nil || r.n != 1 || r.wc.WRID != 7 {
		t.Fatalf("Wait = %d %+v %v, want the pushed completion", r.n, r.wc, r.err)
	}
	if ev, acked := cq.EventCounts(); ev != 1 || acked != 1 {
		t.Fatalf("events %d, acked %d: Wait must acknowledge the one event it took", ev, acked)
	}
	if ch.Queued() != 0 {
		t.Fatal("Wait's event also went to the completion channel")
	}
	// The CQ is left disarmed: the next completion raises no event.
	cq.Push(verbs.WC{WRID: 8})
	if ev, _ := cq.EventCounts(); ev != 1 || ch.Queued() != 0 {
		t.Fatal("a completion after Wait returned raised an event")
	}
}

func TestCQWaitCompletionAlreadyThere(t *testing.T) {
	cq, _, _ := newCQ(t, false)
	cq.Push(verbs.WC{WRID: 1})
	cq.Push(verbs.WC{WRID: 2})
	wc := make([]verbs.WC, 4)
	n, err := cq.Wait(waitCtx(t), wc)
	if err != nil || n != 2 || wc[0].WRID != 1 || wc[1].WRID != 2 {
		t.Fatalf("Wait = %d %v, %+v", n, err, wc[:n])
	}
	if ev, _ := cq.EventCounts(); ev != 0 {
		t.Fatal("Wait armed a CQ that had completions")
	}
}

func TestCQWaitContextCancelled(t *testing.T) {
	cq, ch, _ := newCQ(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := goWait(ctx, cq)
	untilAsleep(t, cq, 1)
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) || r.n != 0 {
		t.Fatalf("Wait after cancel = %d %v, want context.Canceled", r.n, r.err)
	}
	// The CQ Wait armed is disarmed again: a later completion sends no
	// stray event to the channel.
	cq.Push(verbs.WC{WRID: 1})
	if ev, _ := cq.EventCounts(); ev != 0 || ch.Queued() != 0 {
		t.Fatal("a CQ left by a cancelled Wait still raised an event")
	}
	// An already cancelled context still returns what is there.
	wc := make([]verbs.WC, 1)
	if n, err := cq.Wait(ctx, wc); n != 1 || err != nil {
		t.Fatalf("Wait with a cancelled context and a completion = %d %v", n, err)
	}
	if n, err := cq.Wait(ctx, wc); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context on an empty CQ = %d %v", n, err)
	}
}

// TestCQWaitNoChannel: Wait sleeps on the CQ itself, so it works on a CQ
// created without a completion channel, where ReqNotify fails.
func TestCQWaitNoChannel(t *testing.T) {
	cq, _, _ := newCQ(t, false)
	if err := cq.ReqNotify(false); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("ReqNotify without a channel = %v", err)
	}
	done := goWait(waitCtx(t), cq)
	untilAsleep(t, cq, 1)
	cq.Push(verbs.WC{WRID: 3})
	if r := <-done; r.err != nil || r.n != 1 || r.wc.WRID != 3 {
		t.Fatalf("Wait = %d %+v %v", r.n, r.wc, r.err)
	}
}

// TestCQWaitSharedChannel: two CQs on one channel, one waited on with
// Wait, the other armed with ReqNotify and read with GetEvent. Each sees
// its own events only, and each event is acknowledged once by its owner.
func TestCQWaitSharedChannel(t *testing.T) {
	cq1, ch, vctx := newCQ(t, true)
	cq2, err := vctx.CreateCQ(8, ch)
	if err != nil {
		t.Fatal(err)
	}
	ctx := waitCtx(t)
	done := goWait(ctx, cq1)
	untilAsleep(t, cq1, 1)
	if err := cq2.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	cq2.Push(verbs.WC{WRID: 20})
	got, err := ch.GetEvent(ctx)
	if err != nil || got != cq2 {
		t.Fatalf("GetEvent = %p %v, want cq2's event (%p)", got, err, cq2)
	}
	select {
	case r := <-done:
		t.Fatalf("Wait on cq1 returned for cq2's completion: %+v", r)
	default:
	}
	cq2.AckEvents(1)
	cq1.Push(verbs.WC{WRID: 10})
	if r := <-done; r.err != nil || r.n != 1 || r.wc.WRID != 10 {
		t.Fatalf("Wait = %d %+v %v", r.n, r.wc, r.err)
	}
	if ch.Queued() != 0 {
		t.Fatal("cq1's event, taken by Wait, also reached the channel")
	}
	for i, cq := range []*verbs.CQ{cq1, cq2} {
		if ev, acked := cq.EventCounts(); ev != 1 || acked != 1 {
			t.Fatalf("cq%d: %d events, %d acknowledged, want 1 and 1", i+1, ev, acked)
		}
	}
	wc := make([]verbs.WC, 1)
	if n, _ := cq2.Poll(wc); n != 1 || wc[0].WRID != 20 {
		t.Fatal("cq2's completion is gone")
	}
}

func TestCQWaitEndsOnClose(t *testing.T) {
	cq, ch, vctx := newCQ(t, true)
	done := goWait(waitCtx(t), cq)
	untilAsleep(t, cq, 1)
	// The channel cannot go while its CQ is open (ibv_destroy_comp_channel:
	// EBUSY); closing the CQ ends the Wait, and then the channel closes.
	if err := ch.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("closing the channel of an open CQ = %v, want ErrBusy", err)
	}
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !errors.Is(r.err, verbs.ErrClosed) {
		t.Fatalf("Wait after the CQ closed = %v, want ErrClosed", r.err)
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("closing the channel after its CQ = %v", err)
	}
	if _, err := vctx.CreateCQ(8, ch); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("CreateCQ on a closed channel = %v, want ErrClosed", err)
	}
	cq2, _ := vctx.CreateCQ(8, nil)
	done = goWait(waitCtx(t), cq2)
	untilAsleep(t, cq2, 1)
	if err := cq2.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !errors.Is(r.err, verbs.ErrClosed) || !errors.Is(r.err, net.ErrClosed) {
		t.Fatalf("Wait after the CQ closed = %v, want ErrClosed", r.err)
	}
}

func TestCQWaitSpin(t *testing.T) {
	cq, _, _ := newCQ(t, false)
	if _, err := cq.Wait(waitCtx(t), nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("Wait with no room = %v", err)
	}
	// Completions found while spinning.
	cq.Push(verbs.WC{WRID: 5})
	wc := make([]verbs.WC, 2)
	n, err := cq.WaitSpin(waitCtx(t), wc, verbs.SpinPolicy{Polls: 1000, HoldEngine: true})
	if err != nil || n != 1 || wc[0].WRID != 5 {
		t.Fatalf("WaitSpin = %d %v", n, err)
	}
	// All polls empty: it sleeps, and a completion wakes it.
	done := make(chan waitResult, 1)
	go func() {
		n, err := cq.WaitSpin(waitCtx(t), wc, verbs.SpinPolicy{Polls: 300, HoldEngine: true})
		done <- waitResult{n, wc[0], err}
	}()
	untilAsleep(t, cq, 1)
	cq.Push(verbs.WC{WRID: 6})
	if r := <-done; r.err != nil || r.n != 1 || r.wc.WRID != 6 {
		t.Fatalf("WaitSpin = %+v", r)
	}
	// A context that is done stops the spin.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cq.WaitSpin(ctx, wc, verbs.SpinPolicy{Polls: 1 << 20}); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitSpin with a cancelled context = %v", err)
	}
}

// TestCQWaitOverRC: a receive completion that a peer's SEND produces wakes
// a Wait asleep on the CQ (the engine's path, not Push).
func TestCQWaitOverRC(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	done := goWait(waitCtx(t), b.CQ)
	untilAsleep(t, b.CQ, 1)
	mustPost(t, a.QP, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	if r := <-done; r.err != nil || r.n != 1 || r.wc.WRID != 9 || r.wc.Opcode != verbs.WCRecv {
		t.Fatalf("Wait = %+v", r)
	}
	a.Wait(t, 1)
}

// TestCQWaitSpinInline: with inline receive on (SpinPolicy.Inline), the
// receive loop does not read, so completions come only from what the
// waiter reads itself: a spin that never sleeps gets its READ's completion
// only by reading the socket between its polls, and a waiter that sleeps
// gets a later SEND only because WaitSpin hands the socket back to the
// receive loop while it sleeps (without that, nobody reads and both hang
// until waitCtx ends them).
func TestCQWaitSpinInline(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	if !a.Ctx.SetInlineReceive(true) {
		t.Skip("no inline receive on this system's endpoint")
	}
	defer a.Ctx.SetInlineReceive(false)
	wc := make([]verbs.WC, 1)
	inline := verbs.SpinPolicy{Polls: 1 << 30, HoldEngine: true, Inline: true}
	for i := range 100 {
		mustPost(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 64)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		n, err := a.CQ.WaitSpin(waitCtx(t), wc, inline)
		if err != nil || n != 1 || wc[0].WRID != uint64(i) || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("READ %d: WaitSpin = %d, %v, %+v", i, n, err, wc[0])
		}
	}
	// The sleeping waiter: one empty poll, then asleep while the SEND comes.
	if _, err := a.QP.PostRecv(verbs.RecvWR{WRID: 77, SGList: []verbs.SGE{a.MR.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan waitResult, 1)
	go func() {
		n, err := a.CQ.WaitSpin(waitCtx(t), wc, verbs.SpinPolicy{Polls: 1, HoldEngine: true, Inline: true})
		done <- waitResult{n, wc[0], err}
	}()
	untilAsleep(t, a.CQ, 1)
	mustPost(t, b.QP, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{b.MR.SGE(0, 8)}})
	if r := <-done; r.err != nil || r.n != 1 || r.wc.WRID != 77 || r.wc.Opcode != verbs.WCRecv {
		t.Fatalf("sleeping inline WaitSpin = %+v", r)
	}
	// Inline receive is on again after the sleep: the spin still reads.
	mustPost(t, a.QP, verbs.SendWR{WRID: 500, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 64)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
	if n, err := a.CQ.WaitSpin(waitCtx(t), wc, inline); err != nil || n != 1 || wc[0].WRID != 500 {
		t.Fatalf("READ after the sleep: WaitSpin = %d, %v, %+v", n, err, wc[0])
	}
}

// TestCQWaitSpinInlineACK: the ACK of a SEND that an inline spin received
// waits for the spinner's next post (to share its system call), so it must
// still leave when the spinner turns inline receive off without posting.
// The peer's ACK timeout is hours: nothing but that ACK completes its SEND.
func TestCQWaitSpinInlineACK(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{Timeout: 31})
	a, b := p.A, p.B
	if !a.Ctx.SetInlineReceive(true) {
		t.Skip("no inline receive on this system's endpoint")
	}
	if _, err := a.QP.PostRecv(verbs.RecvWR{WRID: 5, SGList: []verbs.SGE{a.MR.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	mustPost(t, b.QP, verbs.SendWR{WRID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{b.MR.SGE(0, 8)}})
	wc := make([]verbs.WC, 1)
	n, err := a.CQ.WaitSpin(waitCtx(t), wc, verbs.SpinPolicy{Polls: 1 << 30, Inline: true})
	if err != nil || n != 1 || wc[0].WRID != 5 {
		t.Fatalf("WaitSpin = %d, %v, %+v", n, err, wc[0])
	}
	a.Ctx.SetInlineReceive(false)
	n, err = b.CQ.Wait(waitCtx(t), wc)
	if err != nil || n != 1 || wc[0].WRID != 6 || wc[0].Status != verbs.WCSuccess {
		t.Fatalf("the peer's SEND: Wait = %d, %v, %+v", n, err, wc[0])
	}
}

// TestCQWaitSpinInlineNotOn: SpinPolicy.Inline from a caller that never
// turned inline receive on must not leave it on after a sleep (the receive
// loop would then wait for a reader that never comes): completions keep
// arriving through the receive loop afterwards.
func TestCQWaitSpinInlineNotOn(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	wc := make([]verbs.WC, 1)
	for i := range 2 {
		if _, err := a.QP.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{a.MR.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan waitResult, 1)
	go func() {
		n, err := a.CQ.WaitSpin(waitCtx(t), wc, verbs.SpinPolicy{Polls: 1, Inline: true})
		done <- waitResult{n, wc[0], err}
	}()
	untilAsleep(t, a.CQ, 1)
	mustPost(t, b.QP, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{b.MR.SGE(0, 8)}})
	if r := <-done; r.err != nil || r.n != 1 || r.wc.WRID != 0 {
		t.Fatalf("WaitSpin = %+v", r)
	}
	mustPost(t, b.QP, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{b.MR.SGE(0, 8)}})
	if n, err := a.CQ.Wait(waitCtx(t), wc); err != nil || n != 1 || wc[0].WRID != 1 {
		t.Fatalf("the next Wait = %d, %v, %+v", n, err, wc[0])
	}
}

func TestErrorsMatchStdlib(t *testing.T) {
	if !errors.Is(verbs.ErrClosed, net.ErrClosed) || !errors.Is(verbs.ErrClosed, verbs.ErrClosed) {
		t.Fatal("ErrClosed is not net.ErrClosed")
	}
	if !errors.Is(verbs.ErrBusy, syscall.EBUSY) || errors.Is(verbs.ErrBusy, syscall.EINVAL) {
		t.Fatal("ErrBusy is not (only) syscall.EBUSY")
	}
}

// TestCloseOrder: CQs, SRQs and PDs refuse to close while objects that use
// them live (ErrBusy, which is syscall.EBUSY), and close in the right
// order; closing twice is harmless.
func TestCloseOrder(t *testing.T) {
	ctx, err := verbs.NewContext(&verbs.Options{Addr: verbstest.LoopbackAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	scq, _ := ctx.CreateCQ(8, nil)
	rcq, _ := ctx.CreateCQ(8, nil)
	srq, err := pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: scq, RecvCQ: rcq, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	ah, err := pd.CreateAH(verbs.AHAttr{DGID: ctx.GID()})
	if err != nil {
		t.Fatal(err)
	}
	busy := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, verbs.ErrBusy) || !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("closing %s in use = %v, want ErrBusy", what, err)
		}
	}
	busy("the send CQ", scq.Close())
	busy("the receive CQ", rcq.Close())
	busy("the SRQ", srq.Close())
	err = pd.Close()
	busy("the PD", err)
	if !strings.Contains(err.Error(), "1 MR, 1 QP, 1 SRQ, 1 AH still use it") {
		t.Errorf("PD busy error does not say what uses it: %v", err)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{scq, rcq, srq, scq} {
		if err := c.Close(); err != nil {
			t.Fatalf("close after the QP: %v", err)
		}
	}
	busy("the PD with an MR and an AH", pd.Close())
	mr.Deregister()
	busy("the PD with an AH", pd.Close())
	ah.Close()
	ah.Close()
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Close(); err != nil {
		t.Fatalf("second PD close = %v", err)
	}
	// Closed objects refuse new users with ErrClosed.
	if _, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("RegMR on a closed PD = %v", err)
	}
	pd2, _ := ctx.AllocPD()
	if _, err := pd2.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: scq, RecvCQ: scq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("CreateQP on a closed CQ = %v", err)
	}
	if err := pd2.Close(); err != nil {
		t.Fatalf("a failed CreateQP left the PD in use: %v", err)
	}
	if _, err := scq.Poll(make([]verbs.WC, 1)); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("Poll on a closed CQ = %v", err)
	}
	if _, err := srq.PostRecv(verbs.RecvWR{}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("PostRecv on a closed SRQ = %v", err)
	}
}

// TestContextCloseReleasesQPs: closing the Context closes its QPs, after
// which their CQs and PD close.
func TestContextCloseReleasesQPs(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a := p.A
	if err := a.CQ.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("CQ close with a live QP = %v", err)
	}
	a.Ctx.Close()
	if err := a.CQ.Close(); err != nil {
		t.Fatal(err)
	}
	a.MR.Deregister()
	if err := a.PD.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestQPAttrMaskString(t *testing.T) {
	for _, c := range []struct {
		m    verbs.QPAttrMask
		want string
	}{
		{0, "0"},
		{verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort, "State|PKeyIndex|Port"},
		{verbs.QPAttrDestQPN, "DestQPN"},
		{verbs.QPAttrSegmentSize | 1<<25, "SegmentSize|0x2000000"},
		{1 << 31, "0x80000000"},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("%#x.String() = %q, want %q", uint32(c.m), got, c.want)
		}
	}
	// Modify's mask errors name the attributes.
	p := verbstest.NewPair(t, verbstest.Options{})
	ctx := p.A.Ctx
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(4, nil)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit}, verbs.QPAttrState)
	if err == nil || !strings.Contains(err.Error(), "PKeyIndex|Port|AccessFlags") && !strings.Contains(err.Error(), "AccessFlags|PKeyIndex|Port") {
		t.Fatalf("RESET→INIT with State only = %v, want the missing attributes named", err)
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags|verbs.QPAttrSQPSN)
	if err == nil || !strings.Contains(err.Error(), "has SQPSN,") {
		t.Fatalf("RESET→INIT with SQPSN = %v, want SQPSN named", err)
	}
}
