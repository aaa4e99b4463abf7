package rdmacm_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// selfQP is a QP the application makes and moves itself with InitQPAttr
// (rping -q, rdma_init_qp_attr).
type selfEnd struct {
	end
	qp *verbs.QP
}

func selfQP(t *testing.T, vctx *verbs.Context) *selfEnd {
	t.Helper()
	pd, err := vctx.AllocPD()
	must(t, err)
	cq, err := vctx.CreateCQ(64, nil)
	must(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	must(t, err)
	return &selfEnd{end: end{pd: pd, cq: cq, mr: mr, buf: buf}, qp: qp}
}

func moveQP(t *testing.T, id *rdmacm.ID, qp *verbs.QP, states ...verbs.QPState) {
	t.Helper()
	for _, s := range states {
		a, mask, err := id.InitQPAttr(s)
		if err != nil {
			t.Fatalf("InitQPAttr(%v): %v", s, err)
		}
		if err := qp.Modify(&a, mask); err != nil {
			t.Fatalf("modify to %v with InitQPAttr's attributes: %v", s, err)
		}
	}
}

// TestInitQPAttrSelfCreatedQPs connects two QPs that neither side gave to
// CreateQP: the passive side moves its QP to RTS before Accept, the
// active side after CONNECT_RESPONSE and then calls Establish; a SEND
// each way and an RDMA WRITE must arrive.
func TestInitQPAttrSelfCreatedQPs(t *testing.T) {
	p := newPair(t, false)
	defer p.close()

	sch, _ := rdmacm.CreateEventChannel(nil)
	defer sch.Destroy()
	ln, err := sch.CreateID(p.a, rdmacm.PSTCP)
	must(t, err)
	defer ln.Destroy()
	must(t, ln.Bind(netip.MustParseAddrPort("0.0.0.0:7481")))
	must(t, ln.Listen(4))

	cch, _ := rdmacm.CreateEventChannel(nil)
	defer cch.Destroy()
	cl, err := cch.CreateID(p.b, rdmacm.PSTCP)
	must(t, err)
	defer cl.Destroy()
	must(t, cl.ResolveAddr(p.a.LocalAddr().Addr().String()+":7481", time.Second))
	waitEvent(t, cch, rdmacm.EventAddrResolved)
	must(t, cl.ResolveRoute(time.Second))
	waitEvent(t, cch, rdmacm.EventRouteResolved)

	ce := selfQP(t, p.b)
	if _, _, err := cl.InitQPAttr(verbs.QPStateRTR); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Fatalf("InitQPAttr(RTR) before the REP: %v, want ErrInvalidState", err)
	}
	moveQP(t, cl, ce.qp, verbs.QPStateInit)
	_, err = ce.qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{ce.mr.SGE(0, 64)}})
	must(t, err)
	must(t, cl.Connect(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
		QPNum: uint32(ce.qp.QPN())}))

	req := waitEvent(t, sch, rdmacm.EventConnectRequest)
	srv := req.ID
	defer srv.Destroy()
	se := selfQP(t, p.a)
	moveQP(t, srv, se.qp, verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS)
	_, err = se.qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{se.mr.SGE(0, 64)}})
	must(t, err)
	if a, _, err := srv.InitQPAttr(verbs.QPStateRTR); err != nil || a.MaxDestRdAtomic != 1 || a.DestQPN != ce.qp.QPN() {
		t.Fatalf("server RTR before Accept: %+v, %v; want the request's initiator depth 1 and the client's QP %v", a, err, ce.qp.QPN())
	}
	must(t, srv.Accept(&rdmacm.ConnParam{ResponderResources: 0, InitiatorDepth: 1, RNRRetryCount: 7,
		QPNum: uint32(se.qp.QPN())}))
	if a, _, err := srv.InitQPAttr(verbs.QPStateRTR); err != nil || a.MaxDestRdAtomic != 0 {
		t.Fatalf("server RTR after Accept with no responder resources: %+v, %v", a, err)
	}
	if a, _, err := srv.InitQPAttr(verbs.QPStateInit); err != nil || a.AccessFlags&verbs.AccessRemoteRead != 0 {
		t.Fatalf("server INIT after Accept with no responder resources grants %v, %v", a.AccessFlags, err)
	}

	resp := waitEvent(t, cch, rdmacm.EventConnectResponse)
	if resp.Param.QPNum != uint32(se.qp.QPN()) {
		t.Fatalf("CONNECT_RESPONSE names QP %d, want the server's %d", resp.Param.QPNum, se.qp.QPN())
	}
	moveQP(t, cl, ce.qp, verbs.QPStateRTR, verbs.QPStateRTS)
	must(t, cl.Establish())
	waitEvent(t, sch, rdmacm.EventEstablished)

	copy(ce.buf[100:], "from the client")
	_, err = ce.qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{ce.mr.SGE(100, 15)}})
	must(t, err)
	if wc := se.wait(t); wc.Opcode != verbs.WCRecv || string(se.buf[:wc.ByteLen]) != "from the client" {
		t.Fatalf("server received %v %q", wc.Opcode, se.buf[:wc.ByteLen])
	}
	ce.wait(t)
	copy(se.buf[200:], "written")
	_, err = se.qp.PostSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{se.mr.SGE(200, 7)}, RemoteAddr: ce.mr.Addr() + 300, RKey: ce.mr.RKey()})
	must(t, err)
	se.wait(t)
	if got := string(ce.buf[300:307]); got != "written" {
		t.Fatalf("RDMA WRITE left %q", got)
	}

	if q := ce.qp.Query(); q.State != verbs.QPStateRTS || q.DestQPN != se.qp.QPN() {
		t.Fatalf("client QP in %v connected to %v, want RTS and %v", q.State, q.DestQPN, se.qp.QPN())
	}
}

// TestInitQPAttrUD gives the UD steps CreateQP takes.
func TestInitQPAttrUD(t *testing.T) {
	p := newPair(t, false)
	defer p.close()
	ch, _ := rdmacm.CreateEventChannel(nil)
	defer ch.Destroy()
	id, err := ch.CreateID(p.a, rdmacm.PSUDP)
	must(t, err)
	defer id.Destroy()
	a, mask, err := id.InitQPAttr(verbs.QPStateInit)
	must(t, err)
	if a.QKey != rdmacm.UDPQKey || mask&verbs.QPAttrQKey == 0 || mask&verbs.QPAttrAccessFlags != 0 {
		t.Fatalf("UD INIT: %+v mask %#x", a, mask)
	}
	if _, mask, _ := id.InitQPAttr(verbs.QPStateRTS); mask != verbs.QPAttrState|verbs.QPAttrSQPSN {
		t.Fatalf("UD RTS mask %#x", mask)
	}
}
