package rdmacm_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// segConnect connects a client offering offer and a server accepting up to
// accept, over loopback UDP, and returns the two IDs, the ESTABLISHED
// events and the private data the server saw.
func segConnect(t *testing.T, p *pair, port uint16, offer, accept int) (cl, sv *end, cest, sest *rdmacm.Event, reqPD []byte, reqSeg int) {
	t.Helper()
	sch, _ := rdmacm.CreateEventChannel(nil)
	t.Cleanup(func() { sch.Destroy() })
	cch, _ := rdmacm.CreateEventChannel(nil)
	t.Cleanup(func() { cch.Destroy() })
	lid, err := sch.CreateID(p.b, rdmacm.PSTCP)
	must(t, err)
	t.Cleanup(func() { lid.Destroy() })
	must(t, lid.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
	must(t, lid.Listen(4))
	cid, err := cch.CreateID(p.a, rdmacm.PSTCP)
	must(t, err)
	t.Cleanup(func() { cid.Destroy() })
	must(t, cid.ResolveAddr(fmt.Sprintf("%v:%d", p.b.LocalAddr().Addr(), port), time.Second))
	waitEvent(t, cch, rdmacm.EventAddrResolved)
	must(t, cid.ResolveRoute(time.Second))
	waitEvent(t, cch, rdmacm.EventRouteResolved)
	cl = newEnd(t, cid)
	must(t, cid.Connect(&rdmacm.ConnParam{PrivateData: []byte("client data"), ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7, SegmentSize: offer}))
	req := waitEvent(t, sch, rdmacm.EventConnectRequest)
	sid := req.ID
	t.Cleanup(func() { sid.Destroy() })
	sv = newEnd(t, sid)
	must(t, sid.Accept(&rdmacm.ConnParam{PrivateData: []byte("server data"), ResponderResources: 1, InitiatorDepth: 1,
		RNRRetryCount: 7, SegmentSize: accept}))
	cest = waitEvent(t, cch, rdmacm.EventEstablished)
	sest = waitEvent(t, sch, rdmacm.EventEstablished)
	return cl, sv, cest, sest, req.PrivateData(), req.Param.SegmentSize
}

// writeAcross RDMA WRITEs size bytes from one end to the other and checks
// them. The WRITE carries an immediate, and the target's buffer is read
// after the target's own receive completion: the initiator's completion
// comes from the peer's ACK over UDP, an ordering the race detector cannot
// see (docs/architecture.md).
func writeAcross(t *testing.T, from, to *end, size int) {
	t.Helper()
	apd, bpd := from.pd, to.pd
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	smr, err := apd.RegMR(src, verbs.AccessLocalWrite)
	must(t, err)
	dmr, err := bpd.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	_, err = from.id.QP().PostSend(verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{smr.SGE(0, size)}, RemoteAddr: dmr.Addr(), RKey: dmr.RKey(), ImmData: 0x5e9})
	must(t, err)
	from.wait(t)
	if wc := to.wait(t); wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ImmData != 0x5e9 {
		t.Fatalf("target completion %+v, want RECV_RDMA_WITH_IMM 0x5e9", wc)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("WRITE data differs")
	}
}

func TestLargeSegmentTrailer(t *testing.T) {
	p := newPair(t, true)
	defer p.close()
	const size = 300000

	// Both offer: the smaller size wins, both QPs use it, data moves in
	// large packets, and the applications see only their own bytes.
	before := p.a.TransportStats()
	cid, sid, cest, sest, reqPD, reqSeg := segConnect(t, p, 7301, verbs.SegmentSizeLimit, 32768)
	if reqSeg != verbs.SegmentSizeLimit {
		t.Fatalf("CONNECT_REQUEST SegmentSize = %d, want the offer %d", reqSeg, verbs.SegmentSizeLimit)
	}
	if cest.Param.SegmentSize != 32768 || sest.Param.SegmentSize != 32768 {
		t.Fatalf("ESTABLISHED SegmentSize %d (client) / %d (server), want 32768", cest.Param.SegmentSize, sest.Param.SegmentSize)
	}
	if want := append([]byte("client data"), make([]byte, 56-11)...); !bytes.Equal(reqPD, want) {
		t.Fatalf("server saw private data %q, want the client's bytes only", reqPD)
	}
	if want := append([]byte("server data"), make([]byte, 196-11)...); !bytes.Equal(cest.PrivateData(), want) {
		t.Fatalf("client saw private data %q, want the server's bytes only", cest.PrivateData())
	}
	for _, e := range []*end{cid, sid} {
		if got := e.id.QP().Query().SegmentSize; got != 32768 {
			t.Fatalf("QP segment size %d, want 32768", got)
		}
	}
	writeAcross(t, cid, sid, size)
	st := p.a.TransportStats()
	if pk, by := st.PacketsOut-before.PacketsOut, st.BytesOut-before.BytesOut; pk == 0 || by/pk < 8192 {
		t.Fatalf("%d bytes in %d packets: not large segments", by, pk)
	}

	// Offered and declined: a standard connection.
	cid, sid, cest, sest, _, _ = segConnect(t, p, 7302, 32768, 0)
	if cest.Param.SegmentSize != 0 || sest.Param.SegmentSize != 0 || cid.id.QP().Query().SegmentSize != 0 || sid.id.QP().Query().SegmentSize != 0 {
		t.Fatal("a declined offer left a segment size")
	}
	writeAcross(t, cid, sid, size)

	// Not offered: no trailer at all, whatever the server would accept.
	_, _, cest, _, reqPD, reqSeg = segConnect(t, p, 7303, 0, 32768)
	if reqSeg != 0 || cest.Param.SegmentSize != 0 {
		t.Fatal("a segment size without an offer")
	}
	if want := append([]byte("client data"), make([]byte, 56-11)...); !bytes.Equal(reqPD, want) {
		t.Fatalf("REQ private data %q without an offer", reqPD)
	}
}

func TestLargeSegmentConnectErrors(t *testing.T) {
	p := newPair(t, true)
	defer p.close()
	cch, _ := rdmacm.CreateEventChannel(nil)
	defer cch.Destroy()
	cid, err := cch.CreateID(p.a, rdmacm.PSTCP)
	must(t, err)
	defer cid.Destroy()
	must(t, cid.ResolveAddr(fmt.Sprintf("%v:%d", p.b.LocalAddr().Addr(), 7304), time.Second))
	waitEvent(t, cch, rdmacm.EventAddrResolved)
	must(t, cid.ResolveRoute(time.Second))
	waitEvent(t, cch, rdmacm.EventRouteResolved)
	newEnd(t, cid)
	for _, cp := range []rdmacm.ConnParam{
		{SegmentSize: 4096}, {SegmentSize: 65536},
		{SegmentSize: 32768, PrivateData: make([]byte, 49)},
	} {
		if err := cid.Connect(&cp); err == nil {
			t.Errorf("Connect with segment size %d and %d bytes of private data accepted", cp.SegmentSize, len(cp.PrivateData))
		}
	}
}
