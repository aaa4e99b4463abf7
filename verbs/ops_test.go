package verbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// pairs returns the same pair shape over the in-memory link and over UDP.
func pairs(t *testing.T, o verbstest.Options, f func(t *testing.T, p *verbstest.Pair)) {
	for _, real := range []bool{false, true} {
		t.Run(fmt.Sprintf("udp=%v", real), func(t *testing.T) {
			var p *verbstest.Pair
			if real {
				p = verbstest.NewPair(t, o)
			} else {
				p, _ = memPair(t, 5, transporttest.Faults{}, o)
			}
			f(t, p)
		})
	}
}

func TestUCWriteAndSend(t *testing.T) {
	pairs(t, verbstest.Options{Type: verbs.QPTypeUC, PathMTU: verbs.MTU1024,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}, func(t *testing.T, p *verbstest.Pair) {
		a, b := p.A, p.B
		for _, size := range []int{0, 1, 1024, 1025, 50000} {
			fill(a.Buf[:size], uint64(size))
			// UC never retries: the receive must be posted before the data arrives.
			if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 2}); err != nil {
				t.Fatal(err)
			}
			mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, ImmData: 77,
				SGList: []verbs.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
			wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
			rw := b.Wait(t, 1)
			if rw[0].Status != verbs.WCSuccess || rw[0].Opcode != verbs.WCRecvRDMAWithImm || rw[0].ImmData != 77 || rw[0].ByteLen != uint32(size) {
				t.Fatalf("size %d: receive completion %+v", size, rw[0])
			}
			if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
				t.Fatalf("size %d: UC WRITE data differs", size)
			}
			if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{b.MR.SGE(0, len(b.Buf))}}); err != nil {
				t.Fatal(err)
			}
			fill(a.Buf[:size], uint64(size)+1)
			mustPost(t, a.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, size)}})
			wantOK(t, a.Wait(t, 1), verbs.WCSend)
			rw = b.Wait(t, 1)
			if rw[0].Status != verbs.WCSuccess || rw[0].ByteLen != uint32(size) || !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
				t.Fatalf("size %d: UC SEND %+v", size, rw[0])
			}
		}
		// UC has no READ or atomics.
		if _, err := a.QP.PostSend(verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.MR.SGE(0, 8)}}); err == nil {
			t.Fatal("READ on a UC QP was accepted")
		}
	})
}

func TestUDSendWithGRH(t *testing.T) {
	pairs(t, verbstest.Options{Type: verbs.QPTypeUD, PathMTU: verbs.MTU1024}, func(t *testing.T, p *verbstest.Pair) {
		a, b := p.A, p.B
		ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: b.Ctx.GID(), PortNum: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{0, 3, 1024} {
			if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(0, 40+1024)}}); err != nil {
				t.Fatal(err)
			}
			fill(a.Buf[:size], uint64(size))
			mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: 5,
				SGList: []verbs.SGE{a.MR.SGE(0, size)}, AH: ah, RemoteQPN: b.QP.QPN(), RemoteQKey: 0x11111111})
			wantOK(t, a.Wait(t, 1), verbs.WCSend)
			rw := b.Wait(t, 1)
			wc := rw[0]
			if wc.Status != verbs.WCSuccess || wc.ByteLen != uint32(40+size) || wc.SrcQP != a.QP.QPN() ||
				wc.Flags&verbs.WCFlagGRH == 0 || wc.ImmData != 5 {
				t.Fatalf("size %d: UD completion %+v", size, wc)
			}
			if !bytes.Equal(b.Buf[40:40+size], a.Buf[:size]) {
				t.Fatalf("size %d: UD payload differs", size)
			}
			// IPv4: the IPv4 header sits in bytes 20..39 of the GRH area.
			grh := b.Buf[20:40]
			src := a.Ctx.LocalAddr().Addr().As4()
			if grh[0] != 0x45 || !bytes.Equal(grh[12:16], src[:]) {
				t.Fatalf("GRH area % x, want an IPv4 header from %v", grh, a.Ctx.LocalAddr().Addr())
			}
		}
		// A message larger than the path MTU is not sent and not an error
		// (IBA C10-93.1.1, as rdma_rxe): it completes successfully, and
		// the receive posted for it takes the next datagram instead.
		if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 10, SGList: []verbs.SGE{b.MR.SGE(0, 40+1024)}}); err != nil {
			t.Fatal(err)
		}
		mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 2000)}, AH: ah, RemoteQPN: b.QP.QPN(), RemoteQKey: 0x11111111})
		if wc := a.Wait(t, 1); wc[0].Status != verbs.WCSuccess || wc[0].WRID != 2 {
			t.Fatalf("oversized UD send: %+v, want success", wc[0])
		}
		mustPost(t, a.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 4)}, AH: ah, RemoteQPN: b.QP.QPN(), RemoteQKey: 0x11111111})
		wantOK(t, a.Wait(t, 1), verbs.WCSend)
		if wc := b.Wait(t, 1); wc[0].Status != verbs.WCSuccess || wc[0].ByteLen != 40+4 {
			t.Fatalf("receive after the oversized send: %+v, want the 4-byte datagram", wc[0])
		}
		// A wrong Q_Key is dropped and counted.
		before := b.Ctx.Counters().Drops[verbs.DropQKey]
		mustPost(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 4)}, AH: ah,
			RemoteQPN: b.QP.QPN(), RemoteQKey: 0x22222222})
		for deadline := time.Now().Add(10 * time.Second); b.Ctx.Counters().Drops[verbs.DropQKey] == before; {
			if time.Now().After(deadline) {
				t.Fatal("wrong Q_Key not counted")
			}
			time.Sleep(time.Millisecond)
		}
	})
}

func TestSRQInlineImmInvalidate(t *testing.T) {
	pairs(t, verbstest.Options{}, func(t *testing.T, p *verbstest.Pair) {
		a, b := p.A, p.B
		// A second QP pair on b uses an SRQ with a limit event.
		srq, err := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 8, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := srq.Modify(3); err != nil { // fires once fewer than 3 WRs remain
			t.Fatal(err)
		}
		cqB, _ := b.Ctx.CreateCQ(32, nil)
		qpB, err := b.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, SRQ: srq,
			Cap: verbs.QPCap{MaxSendWR: 8}})
		if err != nil {
			t.Fatal(err)
		}
		cqA, _ := a.Ctx.CreateCQ(32, nil)
		qpA, _ := a.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cqA, RecvCQ: cqA,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxInlineData: 64}})
		ea := &verbstest.End{Ctx: a.Ctx, PD: a.PD, CQ: cqA, QP: qpA, MR: a.MR, Buf: a.Buf}
		eb := &verbstest.End{Ctx: b.Ctx, PD: b.PD, CQ: cqB, QP: qpB, MR: b.MR, Buf: b.Buf}
		o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1,
			MaxRdAtomic: 1, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}
		if err := verbstest.Connect(ea, eb, o); err != nil {
			t.Fatal(err)
		}
		if err := verbstest.Connect(eb, ea, o); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if _, err := srq.PostRecv(verbs.RecvWR{WRID: uint64(100 + i), SGList: []verbs.SGE{b.MR.SGE(i*64, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
		// Inline SEND: the buffer may change right after posting.
		copy(a.Buf, "inline payload!!")
		mustPost(t, qpA, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
			SGList: []verbs.SGE{a.MR.SGE(0, 16)}})
		copy(a.Buf, "overwritten.....")
		wantOK(t, ea.Wait(t, 1), verbs.WCSend)
		rw := eb.Wait(t, 1)
		if rw[0].WRID != 100 || string(b.Buf[:16]) != "inline payload!!" {
			t.Fatalf("inline send: %+v %q", rw[0], b.Buf[:16])
		}
		// SEND_WITH_INV invalidates the named rkey on the receiver.
		victim, err := b.PD.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		mustPost(t, qpA, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, InvalidateRKey: victim.RKey(),
			SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
		wantOK(t, ea.Wait(t, 1), verbs.WCSend)
		rw = eb.Wait(t, 1)
		if rw[0].Flags&verbs.WCFlagWithInv == 0 || rw[0].InvalidatedRKey != victim.RKey() {
			t.Fatalf("send with invalidate: %+v", rw[0])
		}
		// Two of four WRs used: the SRQ fell below its limit of 3.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ev, err := b.Ctx.GetAsyncEvent(ctx)
		if err != nil || ev.Type != verbs.EventSRQLimitReached || ev.SRQ != srq {
			t.Fatalf("async event %+v, %v; want SRQ limit reached", ev, err)
		}
		// A WRITE to the invalidated key now fails with REM_ACCESS_ERR.
		mustPost(t, qpA, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: victim.Addr(), RKey: victim.RKey()})
		if wc := ea.Wait(t, 1); wc[0].Status != verbs.WCRemAccessErr {
			t.Fatalf("write to invalidated rkey: %+v", wc[0])
		}
	})
}

func TestDeregisterRevokesAtOnce(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	buf := make([]byte, 4096)
	mr, err := b.PD.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	addr, key := mr.Addr(), mr.RKey()
	mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 16)}, RemoteAddr: addr, RKey: key})
	wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	before := append([]byte(nil), buf...)
	mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(16, 16)}, RemoteAddr: addr, RKey: key})
	if wc := a.Wait(t, 1); wc[0].Status != verbs.WCRemAccessErr {
		t.Fatalf("write after deregister: %+v", wc[0])
	}
	if !bytes.Equal(before, buf) {
		t.Fatal("a write after deregistration changed memory")
	}
}

func TestRNRRecovery(t *testing.T) {
	// The receive is posted only after the first SEND was refused: the
	// requester waits out the RNR timer and delivers.
	p := verbstest.NewPair(t, verbstest.Options{MinRNRTimer: 1})
	a, b := p.A, p.B
	binary.BigEndian.PutUint32(a.Buf, 0xfeedface)
	mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 4)}})
	for deadline := time.Now().Add(10 * time.Second); b.Ctx.Counters().RNRNAKsSent == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{b.MR.SGE(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, a.Wait(t, 1), verbs.WCSend)
	if rw := b.Wait(t, 1); rw[0].WRID != 7 || binary.BigEndian.Uint32(b.Buf) != 0xfeedface {
		t.Fatalf("receive %+v", rw[0])
	}
}

func TestSolicitedNotification(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	ch, _ := b.Ctx.CreateCompChannel()
	cq, _ := b.Ctx.CreateCQ(16, ch)
	qpB, _ := b.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	cqA, _ := a.Ctx.CreateCQ(16, nil)
	qpA, _ := a.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	ea := &verbstest.End{Ctx: a.Ctx, PD: a.PD, CQ: cqA, QP: qpA, MR: a.MR}
	eb := &verbstest.End{Ctx: b.Ctx, PD: b.PD, CQ: cq, QP: qpB, MR: b.MR}
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 1,
		Access: verbs.AccessLocalWrite}
	verbstest.Connect(ea, eb, o)
	verbstest.Connect(eb, ea, o)
	qpB.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.MR.SGE(0, 8)}}, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(8, 8)}})
	if err := cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	// An unsolicited SEND completes without an event...
	mustPost(t, qpA, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	eb.Wait(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := ch.GetEvent(ctx); err == nil {
		t.Fatal("event for an unsolicited completion with solicited-only notification")
	}
	cancel()
	// ...a solicited one raises it.
	mustPost(t, qpA, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSolicited, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := ch.GetEvent(ctx)
	if err != nil || got != cq {
		t.Fatalf("GetEvent: %v %v", got, err)
	}
	cq.AckEvents(1)
	eb.Wait(t, 1)
}

func TestModifyQPValidation(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	cq, _ := p.A.Ctx.CreateCQ(4, nil)
	qp, _ := p.A.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	// RESET -> RTR skips INIT.
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err == nil {
		t.Fatal("RESET -> RTR accepted")
	}
	// RESET -> INIT without the access flags.
	err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrPKeyIndex)
	if err == nil {
		t.Fatal("RESET -> INIT without ACCESS_FLAGS accepted")
	}
	// A bit the transition does not allow.
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags|verbs.QPAttrSQPSN)
	if err == nil {
		t.Fatal("RESET -> INIT with SQ_PSN accepted")
	}
	if _, err := qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend}); err == nil {
		t.Fatal("post send in RESET accepted")
	}
	if s := qp.State(); s != verbs.QPStateReset {
		t.Fatalf("state %v after failed modifies", s)
	}
}

// TestModifyQPWithoutState: a mask without STATE changes attributes in the
// current state when that state allows them (RTS: MIN_RNR_TIMER, as
// libfabric's verbs provider sets it on a connected QP), and fails when
// the state has no transition to itself (RTR) or does not allow the bit.
func TestModifyQPWithoutState(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	qp := p.A.QP // RTS
	if err := qp.Modify(&verbs.QPAttr{MinRNRTimer: 12}, verbs.QPAttrMinRNRTimer); err != nil {
		t.Fatalf("RTS: MIN_RNR_TIMER alone: %v", err)
	}
	if a := qp.Query(); a.State != verbs.QPStateRTS || a.MinRNRTimer != 12 {
		t.Fatalf("after MIN_RNR_TIMER alone: state %v, min_rnr_timer %d; want RTS, 12", a.State, a.MinRNRTimer)
	}
	if err := qp.Modify(&verbs.QPAttr{SQPSN: 5}, verbs.QPAttrSQPSN); err == nil {
		t.Fatal("RTS: SQ_PSN alone accepted")
	}
	// The QP still works.
	if _, err := p.B.QP.PostRecv(verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{p.B.MR.SGE(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	mustPost(t, qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{p.A.MR.SGE(0, 4)}})
	wantOK(t, p.A.Wait(t, 1), verbs.WCSend)
	p.B.Wait(t, 1)

	cq, _ := p.A.Ctx.CreateCQ(4, nil)
	q2, _ := p.A.PD.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err := q2.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := q2.Modify(&verbs.QPAttr{AccessFlags: verbs.AccessRemoteWrite}, verbs.QPAttrAccessFlags); err != nil {
		t.Fatalf("INIT: ACCESS_FLAGS alone: %v", err)
	}
	if a := q2.Query(); a.State != verbs.QPStateInit || a.AccessFlags != verbs.AccessRemoteWrite {
		t.Fatalf("after ACCESS_FLAGS alone: state %v, access %v", a.State, a.AccessFlags)
	}
	if err := q2.Modify(&verbs.QPAttr{MinRNRTimer: 1}, verbs.QPAttrMinRNRTimer); err == nil {
		t.Fatal("INIT: MIN_RNR_TIMER alone accepted")
	}
}
