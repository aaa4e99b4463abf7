package verbs_test

import (
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

func TestAllocBufferAlignedAndUsable(t *testing.T) {
	b, err := verbs.AllocBuffer(3 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(os.Getpagesize()) != 0 {
		t.Fatalf("buffer at %p is not page-aligned", &b[0])
	}
	p := verbstest.NewPair(t, verbstest.Options{})
	mr, err := p.B.PD.RegMR(b, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(p.A.Buf, "mmap")
	mustPost(t, p.A.QP, verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{p.A.MR.SGE(0, 4)},
		RemoteAddr: mr.Addr() + 8192, RKey: mr.RKey()})
	wantOK(t, p.A.Wait(t, 1), verbs.WCRDMAWrite)
	if string(b[8192:8196]) != "mmap" {
		t.Fatalf("mapped buffer holds %q", b[8192:8196])
	}
	mr.Deregister()
	if err := verbs.FreeBuffer(b); err != nil {
		t.Fatal(err)
	}
	if _, err := verbs.AllocBuffer(0); err == nil {
		t.Fatal("zero-size buffer allocated")
	}
}

// TestSteadyStateAllocs: posting, polling and the packets they cause
// allocate nothing once the pools are warm.
func TestSteadyStateAllocs(t *testing.T) {
	for _, c := range []struct {
		name      string
		seg, size int
		busy      bool
	}{
		{"standard", 0, 8192, false},             // two 4096-byte packets, payloads sent from the MR
		{"large segments", 32768, 100000, false}, // four segments of up to 32 KiB
		{"busy poll", 0, 64, true},               // a spinning poller and a polling receive loop
	} {
		t.Run(c.name, func(t *testing.T) {
			// real UDP: the in-memory link copies packets
			p := verbstest.NewPair(t, verbstest.Options{BufSize: max(c.size, 4096), SegmentSize: c.seg})
			a, b := p.A, p.B
			if c.busy {
				for _, x := range []*verbs.Context{a.Ctx, b.Ctx} {
					if !hooks.Of(x).SetBusyPoll(time.Millisecond) {
						t.Fatal("SetBusyPoll on a UDP context reported false")
					}
				}
				hooks.Of(a.Ctx).Spinning(true)
				defer hooks.Of(a.Ctx).Spinning(false)
			}
			wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, c.size)},
				RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
			wc := make([]verbs.WC, 1)
			op := func() {
				if _, err := a.QP.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				for {
					n, err := a.CQ.Poll(wc)
					if err != nil {
						t.Fatal(err)
					}
					if n == 1 {
						if wc[0].Status != verbs.WCSuccess {
							t.Fatalf("completion %v", wc[0].Status)
						}
						return
					}
					runtime.Gosched()
				}
			}
			for i := 0; i < 20; i++ {
				op()
			}
			if n := testing.AllocsPerRun(50, op); n != 0 {
				t.Errorf("%v allocations per WRITE (post + packets + poll), want 0", n)
			}
		})
	}
}
