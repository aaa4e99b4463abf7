package verbs_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func mustPost(t *testing.T, qp *verbs.QP, wr verbs.SendWR) {
	t.Helper()
	if _, err := qp.PostSend(wr); err != nil {
		t.Fatalf("post send: %v", err)
	}
}

// tell is one end telling the other, over their RC QPs, that it may go on:
// a zero-byte SEND from "from" that "to" receives; it waits for both
// completions. Tests over real UDP need it where the test touches memory
// that the peer's requests also touch, because the race detector cannot see
// the order a datagram creates (docs/architecture.md, "The race detector
// cannot see across sockets"). It sees this one, as a program relies on it:
//   - RC executes from's requests in order, so once to's CQ has returned the
//     receive completion, from's earlier WRITEs and atomics have changed
//     to.Buf: the test may read it.
//   - from posts the SEND after the test's last access to from.Buf, and
//     from's engine serves the peer's later requests (READ sources, atomic
//     and WRITE targets in from.Buf) after that post.
func tell(t *testing.T, from, to *verbstest.End) {
	t.Helper()
	if _, err := to.QP.PostRecv(verbs.RecvWR{WRID: 0x7e11}); err != nil {
		t.Fatal(err)
	}
	mustPost(t, from.QP, verbs.SendWR{WRID: 0x7e11, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	wantOK(t, from.Wait(t, 1), verbs.WCSend)
	if wc := to.Wait(t, 1); wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRecv || wc[0].WRID != 0x7e11 {
		t.Fatalf("tell: receive completion %+v", wc[0])
	}
}

func wantOK(t *testing.T, wcs []verbs.WC, op verbs.WCOpcode) {
	t.Helper()
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess || wc.Opcode != op {
			t.Fatalf("completion %+v: want %v success", wc, op)
		}
	}
}

func TestRCWriteReadSendAtomic(t *testing.T) {
	for _, size := range []int{0, 1, 3, 4096, 4097, 3*4096 + 5, 60000} {
		p := verbstest.NewPair(t, verbstest.Options{})
		a, b := p.A, p.B
		fill(a.Buf[:size], uint64(size))
		// WRITE a -> b
		mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		wantOK(t, a.Wait(t, 1), verbs.WCRDMAWrite)
		tell(t, a, b) // the WRITE has landed
		if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
			t.Fatalf("size %d: WRITE data differs", size)
		}
		// READ b -> a (into the second half of a's buffer)
		half := len(a.Buf) / 2
		fill(b.Buf[:size], uint64(size)+1)
		tell(t, b, a) // the READ's source is ready
		if size <= half {
			mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(half, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
			wc := a.Wait(t, 1)
			wantOK(t, wc, verbs.WCRDMARead)
			if wc[0].ByteLen != uint32(size) || !bytes.Equal(a.Buf[half:half+size], b.Buf[:size]) {
				t.Fatalf("size %d: READ data differs (byte_len %d)", size, wc[0].ByteLen)
			}
		}
		// SEND with immediate b -> a
		if _, err := a.QP.PostRecv(verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{a.MR.SGE(0, len(a.Buf))}}); err != nil {
			t.Fatal(err)
		}
		mustPost(t, b.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: 0xdeadbeef,
			SGList: []verbs.SGE{b.MR.SGE(0, size)}})
		wantOK(t, b.Wait(t, 1), verbs.WCSend)
		rwc := a.Wait(t, 1)
		wantOK(t, rwc, verbs.WCRecv)
		if rwc[0].ByteLen != uint32(size) || rwc[0].ImmData != 0xdeadbeef || rwc[0].Flags&verbs.WCFlagWithImm == 0 || rwc[0].WRID != 3 {
			t.Fatalf("recv completion %+v", rwc[0])
		}
		if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
			t.Fatalf("size %d: SEND data differs", size)
		}
	}
}

func TestRCAtomics(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	binary.NativeEndian.PutUint64(b.Buf[8:], 100)
	tell(t, b, a) // the target is set
	mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.Addr() + 8, RKey: b.MR.RKey(), CompareAdd: 5})
	wantOK(t, a.Wait(t, 1), verbs.WCFetchAdd)
	if got := binary.NativeEndian.Uint64(a.Buf[0:]); got != 100 {
		t.Fatalf("fetch-add returned %d, want 100", got)
	}
	tell(t, a, b) // the atomic has executed
	if got := binary.NativeEndian.Uint64(b.Buf[8:]); got != 105 {
		t.Fatalf("remote after fetch-add %d, want 105", got)
	}
	tell(t, b, a) // b is done reading
	mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(16, 8)}, RemoteAddr: b.MR.Addr() + 8, RKey: b.MR.RKey(), CompareAdd: 105, Swap: 7})
	wantOK(t, a.Wait(t, 1), verbs.WCCompSwap)
	if got := binary.NativeEndian.Uint64(a.Buf[16:]); got != 105 {
		t.Fatalf("cmp-swap returned %d, want 105", got)
	}
	tell(t, a, b)
	if got := binary.NativeEndian.Uint64(b.Buf[8:]); got != 7 {
		t.Fatalf("remote after cmp-swap %d, want 7", got)
	}
	tell(t, b, a)
	// A failed compare leaves memory alone and returns the current value.
	mustPost(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(24, 8)}, RemoteAddr: b.MR.Addr() + 8, RKey: b.MR.RKey(), CompareAdd: 1, Swap: 9})
	wantOK(t, a.Wait(t, 1), verbs.WCCompSwap)
	tell(t, a, b)
	if got := binary.NativeEndian.Uint64(a.Buf[24:]); got != 7 || binary.NativeEndian.Uint64(b.Buf[8:]) != 7 {
		t.Fatalf("failed cmp-swap: returned %d, remote %d", got, binary.NativeEndian.Uint64(b.Buf[8:]))
	}
}

func TestRCRemoteAccessError(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	a, b := p.A, p.B
	guard := append([]byte(nil), b.Buf...)
	mustPost(t, a.QP, verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 16)}, RemoteAddr: b.MR.Addr() + uint64(len(b.Buf)) - 8, RKey: b.MR.RKey()})
	mustPost(t, a.QP, verbs.SendWR{WRID: 10, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 16)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
	wcs := a.Wait(t, 2)
	if wcs[0].Status != verbs.WCRemAccessErr || wcs[0].WRID != 9 {
		t.Fatalf("first completion %+v, want REM_ACCESS_ERR for WR 9", wcs[0])
	}
	if wcs[1].Status != verbs.WCWRFlushErr || wcs[1].WRID != 10 {
		t.Fatalf("second completion %+v, want WR_FLUSH_ERR for WR 10", wcs[1])
	}
	if !bytes.Equal(guard, b.Buf) {
		t.Fatal("rejected WRITE changed memory")
	}
	if a.QP.State() != verbs.QPStateErr {
		t.Fatalf("requester state %v, want ERR", a.QP.State())
	}
}
