package verbs_test

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/tbrdma/tbrdma/verbs"
)

// Example connects two RC queue pairs on loopback and moves 16 bytes with
// one RDMA WRITE: the ibverbs sequence of PD, MR, CQ, QP, INIT → RTR → RTS,
// post, poll. The WRITE carries an immediate value, so that B learns from
// its own CQ that the bytes are in its memory before it reads them.
func Example() {
	open := func(ip string) (*verbs.Context, *verbs.PD, *verbs.CQ, *verbs.QP, *verbs.MR) {
		ctx, err := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr(ip)})
		if err != nil {
			log.Fatal(err)
		}
		pd, _ := ctx.AllocPD()
		cq, _ := ctx.CreateCQ(16, nil)
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			log.Fatal(err)
		}
		return ctx, pd, cq, qp, mr
	}
	ctxA, _, cqA, qpA, mrA := open("127.0.99.1")
	defer ctxA.Close()
	ctxB, _, cqB, qpB, mrB := open("127.0.99.2")
	defer ctxB.Close()

	connect := func(qp *verbs.QP, peer *verbs.Context, peerQPN verbs.QPN) {
		must(qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
		must(qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, AH: verbs.AHAttr{DGID: peer.GID(), PortNum: 1},
			PathMTU: verbs.MTU4096, DestQPN: peerQPN, RQPSN: 0x1000, MaxDestRdAtomic: 1, MinRNRTimer: 12},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		must(qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0x1000, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	}
	connect(qpA, ctxB, qpB.QPN())
	connect(qpB, ctxA, qpA.QPN())

	// The immediate consumes a receive on B.
	_, err := qpB.PostRecv(verbs.RecvWR{WRID: 2})
	must(err)
	copy(mrA.Buf(), "hello over RoCE!")
	_, err = qpA.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mrA.SGE(0, 16)}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey(), ImmData: 42})
	must(err)
	poll := func(cq *verbs.CQ) verbs.WC {
		wc := make([]verbs.WC, 1)
		for {
			n, err := cq.Poll(wc)
			must(err)
			if n == 1 {
				return wc[0]
			}
		}
	}
	wc := poll(cqA)
	fmt.Println("A:", wc.Status, wc.Opcode)
	wc = poll(cqB)
	fmt.Println("B:", wc.Status, wc.Opcode, wc.ImmData, string(mrB.Buf()[:16]))
	// Output:
	// A: success RDMA_WRITE
	// B: success RECV_RDMA_WITH_IMM 42 hello over RoCE!
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
