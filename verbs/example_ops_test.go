package verbs_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// end is one side of the examples' connection.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

// connectedPair opens two contexts on loopback addresses a and b, each
// with a PD, a CQ (attached to a completion channel), an RC QP and a
// 4 KiB MR that the peer may read, write and use atomics on, and connects
// the QPs. B's memory starts with bMem: it is written before the MR is
// registered, because once registered it belongs to the engine, which
// may read it for the peer at any time. close releases both in the order
// ibverbs requires.
func connectedPair(a, b string, bMem []byte) (ea, eb *end, close func()) {
	open := func(ip string, mem []byte) *end {
		ctx, err := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr(ip)})
		must(err)
		pd, err := ctx.AllocPD()
		must(err)
		ch, err := ctx.CreateCompChannel()
		must(err)
		cq, err := ctx.CreateCQ(16, ch)
		must(err)
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
		must(err)
		buf := make([]byte, 4096)
		copy(buf, mem)
		mr, err := pd.RegMR(buf,
			verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		must(err)
		return &end{ctx, pd, cq, qp, mr}
	}
	connect := func(e, peer *end) {
		must(e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
			AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
		must(e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, AH: verbs.AHAttr{DGID: peer.ctx.GID(), PortNum: 1},
			PathMTU: verbs.MTU4096, DestQPN: peer.qp.QPN(), RQPSN: 0, MaxDestRdAtomic: 4, MinRNRTimer: 12},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		must(e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	}
	ea, eb = open(a, nil), open(b, bMem)
	connect(ea, eb)
	connect(eb, ea)
	return ea, eb, func() {
		for _, e := range []*end{ea, eb} {
			must(e.qp.Close()) // first the QP, which uses the CQ and the PD
			must(e.mr.Deregister())
			must(e.cq.Close())
			must(e.pd.Close())
			must(e.ctx.Close())
		}
	}
}

// complete waits for e's next completion and fails unless it succeeded.
func (e *end) complete() verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if _, err := e.cq.Wait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	if err := wc[0].Err(); err != nil {
		log.Fatal(err)
	}
	return wc[0]
}

// Example_read reads a peer's memory with RDMA READ: the peer's CPU takes
// no part, and only the reader gets a completion.
func Example_read() {
	a, b, closeAll := connectedPair("127.0.99.11", "127.0.99.12", []byte("B's memory, read by A"))
	defer closeAll()
	// B tells A where its buffer is (a real program sends rb to A, e.g. in
	// connection private data: rb.MarshalBinary).
	rb := b.mr.RemoteBuffer()
	_, err := a.qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 21)}, RemoteAddr: rb.Addr, RKey: rb.RKey})
	must(err)
	wc := a.complete()
	fmt.Println(wc.Opcode, wc.ByteLen, string(a.mr.Buf()[:21]))
	// Output:
	// RDMA_READ 21 B's memory, read by A
}

// Example_atomics runs FETCH_AND_ADD and CMP_AND_SWP on an 8-byte counter
// in the peer's memory. Each returns the value before the operation into
// the local SGE, in host byte order; the target is 8-byte aligned.
func Example_atomics() {
	a, b, closeAll := connectedPair("127.0.99.13", "127.0.99.14", binary.NativeEndian.AppendUint64(nil, 40))
	defer closeAll()
	counter := b.mr.RemoteBuffer() // the counter: B's first 8 bytes, 40
	atomic := func(wr verbs.SendWR) uint64 {
		wr.Flags, wr.SGList = verbs.SendSignaled, []verbs.SGE{a.mr.SGE(0, 8)}
		wr.RemoteAddr, wr.RKey = counter.Addr, counter.RKey
		_, err := a.qp.PostSend(wr)
		must(err)
		a.complete()
		return binary.NativeEndian.Uint64(a.mr.Buf())
	}
	fmt.Println("fetch-add 2: was", atomic(verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 2}))
	fmt.Println("cmp-swap 42->7: was", atomic(verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 7}))
	fmt.Println("cmp-swap 42->9: was", atomic(verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 9}))
	// Read the counter back through the QP: b's CPU never looked at it.
	_, err := a.qp.PostSend(verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: counter.Addr, RKey: counter.RKey})
	must(err)
	a.complete()
	fmt.Println("counter now", binary.NativeEndian.Uint64(a.mr.Buf()))
	// Output:
	// fetch-add 2: was 40
	// cmp-swap 42->7: was 42
	// cmp-swap 42->9: was 7
	// counter now 7
}

// ExampleCQ_Wait sleeps until a completion arrives instead of spinning on
// Poll: B waits for the SEND that A posts later. Wait arms the CQ, polls
// once more (a completion may have landed in between), sleeps and
// acknowledges the event itself.
func ExampleCQ_Wait() {
	a, b, closeAll := connectedPair("127.0.99.15", "127.0.99.16", nil)
	defer closeAll()
	_, err := b.qp.PostRecv(verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{b.mr.SGE(0, 64)}})
	must(err)
	got := make(chan verbs.WC)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		wc := make([]verbs.WC, 4)
		n, err := b.cq.Wait(ctx, wc) // sleeps until the SEND lands, if it has not yet
		must(err)
		got <- wc[n-1]
	}()
	copy(a.mr.Buf(), "wake up")
	_, err = a.qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 7)}})
	must(err)
	wc := <-got
	fmt.Println(wc.WRID, wc.Opcode, string(b.mr.Buf()[:wc.ByteLen]))
	a.complete()
	// Output:
	// 7 RECV wake up
}
