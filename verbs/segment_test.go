package verbs_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

func TestSegmentSizeForLink(t *testing.T) {
	for _, c := range []struct{ mtu, want int }{
		{65520, 61440}, {65535, 61440}, {9000, 8192}, {1500, 0}, {4200, 0}, {8192 + 103, 8192}, {8192 + 102, 0},
	} {
		if got := verbs.SegmentSizeForLink(c.mtu); got != c.want {
			t.Errorf("SegmentSizeForLink(%d) = %d, want %d", c.mtu, got, c.want)
		}
	}
	for _, n := range []int{0, 4096, 8191, 12288 + 1, 65536, 61440 + 4096} {
		if verbs.ValidSegmentSize(n) {
			t.Errorf("ValidSegmentSize(%d) = true", n)
		}
	}
	for _, n := range []int{8192, 12288, 32768, 61440} {
		if !verbs.ValidSegmentSize(n) {
			t.Errorf("ValidSegmentSize(%d) = false", n)
		}
	}
}

// Two contexts that both enabled large segments move WRITE, READ and SEND
// data of one and many segments, over real UDP sockets on loopback.
func TestLargeSegmentsRC(t *testing.T) {
	for _, seg := range []int{32768, verbs.SegmentSizeLimit} {
		for _, size := range []int{0, 1, 4097, seg - 1, seg, seg + 1, 3*seg + 5, 1 << 20} {
			p := verbstest.NewPair(t, verbstest.Options{BufSize: 2 << 20, SegmentSize: seg})
			a, b := p.A, p.B
			if got := a.QP.Query().SegmentSize; got != seg {
				t.Fatalf("Query().SegmentSize = %d, want %d", got, seg)
			}
			before := a.Ctx.Counters().PacketsOut
			fill(a.Buf[:size], uint64(size))
			mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
			wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
			// The WRITE took ceil(size/seg) packets (the counters also
			// count retransmissions, so at least that many; a 4096-byte
			// path MTU would have needed more than twice as many).
			npk := max(1, (size+seg-1)/seg)
			if sent := a.Ctx.Counters().PacketsOut - before; sent < uint64(npk) || size >= 2*seg && sent >= uint64((size+4095)/4096) {
				t.Fatalf("seg %d size %d: %d packets out, want about %d", seg, size, sent, npk)
			}
			tell(t, a, b) // the WRITE has landed
			if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
				t.Fatalf("seg %d size %d: WRITE data differs", seg, size)
			}
			half := len(a.Buf) / 2
			fill(b.Buf[:size], uint64(size)+1)
			tell(t, b, a) // the READ's source is ready
			mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(half, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
			wc := a.Wait(t, 1)
			wantOK(t, wc, verbs.WCRDMARead)
			if wc[0].ByteLen != uint32(size) || !bytes.Equal(a.Buf[half:half+size], b.Buf[:size]) {
				t.Fatalf("seg %d size %d: READ data differs (byte_len %d)", seg, size, wc[0].ByteLen)
			}
			if _, err := a.QP.PostRecv(verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{a.MR.SGE(0, len(a.Buf))}}); err != nil {
				t.Fatal(err)
			}
			mustPost(t, b.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: 7,
				SGList: []verbs.SGE{b.MR.SGE(0, size)}})
			wantOK(t, b.Wait(t, 1), verbs.WCSend)
			rwc := a.Wait(t, 1)
			wantOK(t, rwc, verbs.WCRecv)
			if rwc[0].ByteLen != uint32(size) || rwc[0].ImmData != 7 || !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
				t.Fatalf("seg %d size %d: SEND completion %+v or data differs", seg, size, rwc[0])
			}
		}
	}
}

// A QP without the extension treats a large segment as rdma_rxe does a
// packet longer than the path MTU: NAK invalid request, so the sender's WR
// completes with REM_INV_REQ_ERR and no byte is placed.
func TestLargeSegmentRejectedWithoutExtension(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{BufSize: 64 << 10})
	a, b := p.A, p.B
	if err := a.Ctx.SetMaxSegmentSize(16384); err != nil {
		t.Fatal(err)
	}
	if err := a.QP.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1,
		MaxRdAtomic: 16, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead, SegmentSize: 16384}
	if err := verbstest.Connect(a, b, o); err != nil {
		t.Fatal(err)
	}
	fill(a.Buf[:16384], 1)
	mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 16384)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
	wc := a.Wait(t, 1)
	if wc[0].Status != verbs.WCRemInvReqErr {
		t.Fatalf("completion %v, want REM_INV_REQ_ERR", wc[0].Status)
	}
	if !bytes.Equal(b.Buf[:16384], make([]byte, 16384)) {
		t.Fatal("the standard QP placed bytes of an oversize packet")
	}
}

// The extension is off unless the context enables it, and a QP's segment
// size cannot exceed the context's.
func TestSegmentSizeNeedsContext(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{BufSize: 4096})
	a, b := p.A, p.B
	if a.Ctx.MaxSegmentSize() != 0 {
		t.Fatalf("MaxSegmentSize() = %d on a default context, want 0", a.Ctx.MaxSegmentSize())
	}
	if err := a.QP.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: verbs.MTU4096, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1,
		MaxRdAtomic: 16, Access: verbs.AccessLocalWrite, SegmentSize: 32768}
	if err := verbstest.Connect(a, b, o); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("RTR with a segment size on a standard context: %v, want ErrInvalidArgument", err)
	}
	for _, n := range []int{4096, 10000, 65536} {
		if err := a.Ctx.SetMaxSegmentSize(n); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("SetMaxSegmentSize(%d) = %v, want ErrInvalidArgument", n, err)
		}
	}
	if err := a.Ctx.SetMaxSegmentSize(16384); err != nil {
		t.Fatal(err)
	}
	if err := verbstest.Connect(a, b, o); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("RTR with segment size 32768 on a context allowing 16384: %v, want ErrInvalidArgument", err)
	}
	// Back to RESET clears the attribute, and the QP is standard again.
	if err := a.QP.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	o.SegmentSize = 0
	if err := verbstest.Connect(a, b, o); err != nil {
		t.Fatal(err)
	}
	if got := a.QP.Query().SegmentSize; got != 0 {
		t.Fatalf("SegmentSize after RESET and a standard connect = %d", got)
	}
}
