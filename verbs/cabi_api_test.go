package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// The three entry points tbrdma's C library needs beyond ibverbs' Go
// shape: inline data from unregistered memory, an MR at a chosen IOVA and
// a completion channel that signals through a function.

func TestInlineFromUnregisteredMemory(t *testing.T) {
	pairs(t, verbstest.Options{}, func(t *testing.T, p *verbstest.Pair) {
		a, b := p.A, p.B
		if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{b.MR.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		data := []byte("not registered anywhere")
		mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: data})
		copy(data, "overwritten after post!")
		wantOK(t, a.Wait(t, 1), verbs.WCSend)
		rw := b.Wait(t, 1)
		if rw[0].ByteLen != 23 || string(b.Buf[:23]) != "not registered anywhere" {
			t.Fatalf("inline send from unregistered memory: %+v %q", rw[0], b.Buf[:23])
		}
		// More than the QP's inline capacity is refused at post time.
		_, err := a.QP.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline, Inline: make([]byte, 65)})
		if !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Fatalf("65 inline bytes on a 64-byte QP: %v, want ErrInvalidArgument", err)
		}
	})
}

func TestRegMRAtIOVA(t *testing.T) {
	// Over the in-memory link: the test reads buf after the WRITE's
	// completion, an order the race detector sees only through channels.
	p, _ := memPair(t, 1, transporttest.Faults{}, verbstest.Options{})
	a, b := p.A, p.B
	const iova = 0x1000_0000
	buf := make([]byte, 4096)
	mr, err := b.PD.RegMRAt(buf, iova, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	if mr.Addr() != iova {
		t.Fatalf("Addr %#x, want %#x", mr.Addr(), uint64(iova))
	}
	copy(a.Buf, "at an iova")
	mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 10)}, RemoteAddr: iova + 100, RKey: mr.RKey()})
	wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
	if string(buf[100:110]) != "at an iova" {
		t.Fatalf("WRITE to iova+100 landed elsewhere: %q", buf[100:110])
	}
	// The buffer's own address is not part of the region.
	mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: uint64(uintptr(unsafe.Pointer(&buf[0]))), RKey: mr.RKey()})
	if wc := a.Wait(t, 1); wc[0].Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE to the buffer's real address: %v, want REM_ACCESS_ERR", wc[0].Status)
	}
	if _, err := b.PD.RegMRAt(buf, ^uint64(0)-10, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("iova that wraps: %v", err)
	}
}

func TestCompChannelFunc(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	got := make(chan *verbs.CQ, 4)
	ch, err := b.Ctx.CreateCompChannelFunc(func(cq *verbs.CQ) { got <- cq })
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	cq, err := b.Ctx.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := b.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	eb := &verbstest.End{Ctx: b.Ctx, PD: b.PD, CQ: cq, QP: qp, MR: b.MR, Buf: b.Buf}
	cqA, _ := a.Ctx.CreateCQ(16, nil)
	qpA, err := a.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer qpA.Close()
	ea := &verbstest.End{Ctx: a.Ctx, PD: a.PD, CQ: cqA, QP: qpA, MR: a.MR, Buf: a.Buf}
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1,
		MaxRdAtomic: 1, Access: verbs.AccessLocalWrite}
	if err := verbstest.Connect(ea, eb, o); err != nil {
		t.Fatal(err)
	}
	if err := verbstest.Connect(eb, ea, o); err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.MR.SGE(0, 64)}}, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(64, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	mustPost(t, qpA, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	select {
	case c := <-got:
		if c != cq {
			t.Fatalf("notified for %p, want %p", c, cq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification for an armed CQ")
	}
	// Not armed again: the second completion notifies nobody.
	mustPost(t, qpA, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	eb.Wait(t, 2)
	select {
	case <-got:
		t.Fatal("notified without ReqNotify")
	case <-time.After(50 * time.Millisecond):
	}
	// GetEvent on such a channel only waits for Close.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ch.GetEvent(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetEvent on a func channel: %v", err)
	}
	if _, err := b.Ctx.CreateCompChannelFunc(nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("nil func: %v", err)
	}
}

// TestInlineReceive: with inline receive on, the caller's ReceiveInline
// calls handle the packets, in order (the loop may still handle the ones
// that arrive before it leaves its read); off again, the receive loop
// takes over as before.
func TestInlineReceive(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	if !b.Ctx.SetInlineReceive(true) {
		t.Fatal("SetInlineReceive on a UDP endpoint: not supported")
	}
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE((i%16)*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		mustPost(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 32)}})
	}
	var wc [16]verbs.WC
	got, handled := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for got < n && time.Now().Before(deadline) {
		handled += b.Ctx.ReceiveInline()
		k, err := b.CQ.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess || w.WRID != uint64(got) {
				t.Fatalf("completion %d: %+v (out of order or failed)", got, w)
			}
			got++
		}
	}
	if got != n || handled == 0 {
		t.Fatalf("inline receive: %d of %d completions, %d packets handled inline", got, n, handled)
	}
	a.Wait(t, n)
	// The loop, out of its read by now, receives nothing while inline
	// receive is on: a SEND waits for the next ReceiveInline.
	time.Sleep(20 * time.Millisecond)
	if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 1000, SGList: []verbs.SGE{b.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	mustPost(t, a.QP, verbs.SendWR{WRID: 1000, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	time.Sleep(50 * time.Millisecond)
	if k, _ := b.CQ.Poll(wc[:]); k != 0 {
		t.Fatalf("the receive loop handled a packet while inline receive was on: %+v", wc[0])
	}
	for got = 0; got == 0 && time.Now().Before(deadline); {
		b.Ctx.ReceiveInline()
		got, _ = b.CQ.Poll(wc[:])
	}
	if got != 1 || wc[0].WRID != 1000 {
		t.Fatalf("SEND after the loop stopped reading: %d completions %+v", got, wc[0])
	}
	if !b.Ctx.SetInlineReceive(false) {
		t.Fatal("SetInlineReceive(false)")
	}
	// The loop receives again: a WRITE lands without anyone calling
	// ReceiveInline.
	copy(a.Buf, "loop is back")
	mustPost(t, a.QP, verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 12)}, RemoteAddr: b.MR.Addr() + 2048, RKey: b.MR.RKey()})
	wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
	// Read back over the QP rather than from b.Buf: the loop wrote b.Buf,
	// and the race detector cannot see that the WRITE's ACK came after.
	mustPost(t, a.QP, verbs.SendWR{WRID: 10, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(4096, 12)}, RemoteAddr: b.MR.Addr() + 2048, RKey: b.MR.RKey()})
	wantOK(t, a.Wait(t, 1), verbs.WCRDMARead)
	if string(a.Buf[4096:4108]) != "loop is back" {
		t.Fatalf("after inline receive, b's buffer holds %q", a.Buf[4096:4108])
	}
	if b.Ctx.ReceiveInline() != 0 {
		t.Fatal("ReceiveInline read with inline receive off")
	}
}
