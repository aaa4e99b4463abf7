package verbs_test

// The completion statuses of local errors, as rdma_rxe (Linux 6.1) gives
// them (docs/cabi-errors.md): the C library's conformance program
// (cabi/abitest/testdata/badinput.c) checks the same over libibverbs.

import (
	"testing"

	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// A requester SGE whose lkey names no region of the PD fails the MR
// lookup: rxe's copy_data returns -EINVAL, which its requester reports as
// LOC_QP_OP_ERR; an SGE that reaches outside its region fails the range
// check (-EFAULT): LOC_PROT_ERR. Either way the QP goes to ERR and what
// follows is flushed.
func TestRequesterSGEStatusAsRXE(t *testing.T) {
	for _, c := range []struct {
		name string
		sge  func(e *verbstest.End) verbs.SGE
		want verbs.WCStatus
	}{
		{"bad lkey", func(e *verbstest.End) verbs.SGE {
			s := e.MR.SGE(0, 64)
			s.LKey ^= 0x5a5a5a00
			return s
		}, verbs.WCLocQPOpErr},
		{"other PD", func(e *verbstest.End) verbs.SGE {
			pd, err := e.Ctx.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			return mr.SGE(0, 64)
		}, verbs.WCLocQPOpErr},
		{"outside the MR", func(e *verbstest.End) verbs.SGE {
			return verbs.SGE{Addr: e.MR.Addr() + uint64(e.MR.Len()) - 16, Length: 64, LKey: e.MR.LKey()}
		}, verbs.WCLocProtErr},
	} {
		for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite} {
			t.Run(c.name+"/"+op.String(), func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{})
				a, b := p.A, p.B
				if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(0, 64)}}); err != nil {
					t.Fatal(err)
				}
				mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: op, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{c.sge(a)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
				if wc := a.Wait(t, 1); wc[0].WRID != 1 || wc[0].Status != c.want {
					t.Fatalf("completion %+v, want %v", wc[0], c.want)
				}
				if st := a.QP.State(); st != verbs.QPStateErr {
					t.Fatalf("QP in %v after a local protection error, want ERR", st)
				}
				mustPost(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
				if wc := a.Wait(t, 1); wc[0].WRID != 2 || wc[0].Status != verbs.WCWRFlushErr {
					t.Fatalf("next completion %+v, want WR_FLUSH_ERR", wc[0])
				}
			})
		}
	}
}

// A SEND the receive cannot take — longer than its buffer, or into an SGE
// whose lkey is wrong — is a malformed receive WQE for rxe's responder
// (copy_data fails; class A): the receive completes with LOC_QP_OP_ERR,
// the requester gets NAK remote operation error (REM_OP_ERR), the
// responder QP goes to ERR, and no byte lands outside the receive's SGE.
func TestReceiveErrorStatusAsRXE(t *testing.T) {
	for _, c := range []struct {
		name string
		sge  func(e *verbstest.End) verbs.SGE
		n    int
	}{
		{"too small", func(e *verbstest.End) verbs.SGE { return e.MR.SGE(0, 16) }, 64},
		{"too small, second packet", func(e *verbstest.End) verbs.SGE { return e.MR.SGE(0, 1500) }, 3000},
		{"bad lkey", func(e *verbstest.End) verbs.SGE {
			s := e.MR.SGE(0, 64)
			s.LKey ^= 0x5a5a5a00
			return s
		}, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{PathMTU: verbs.MTU1024})
			a, b := p.A, p.B
			for i := range b.Buf {
				b.Buf[i] = 0x33
			}
			fill(a.Buf[:c.n], 5)
			sge := c.sge(b)
			if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{sge}},
				verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(8192, 64)}}); err != nil {
				t.Fatal(err)
			}
			mustPost(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, c.n)}})
			if wc := a.Wait(t, 1); wc[0].Status != verbs.WCRemOpErr {
				t.Fatalf("requester completion %+v, want REM_OP_ERR", wc[0])
			}
			wc := b.Wait(t, 2)
			if wc[0].WRID != 1 || wc[0].Status != verbs.WCLocQPOpErr || wc[1].WRID != 2 || wc[1].Status != verbs.WCWRFlushErr {
				t.Fatalf("responder completions %+v, want LOC_QP_OP_ERR then WR_FLUSH_ERR", wc)
			}
			if st := b.QP.State(); st != verbs.QPStateErr {
				t.Fatalf("responder QP in %v, want ERR", st)
			}
			end := 0
			if sge.LKey == b.MR.LKey() {
				end = int(sge.Length)
			}
			for i := end; i < len(b.Buf); i++ {
				if b.Buf[i] != 0x33 {
					t.Fatalf("byte %d of the responder's buffer changed (the receive's SGE is %d bytes)", i, end)
				}
			}
		})
	}
}
