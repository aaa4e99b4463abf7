package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"math/bits"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// udEnd is a UD ID with its QP, CQ and a registered buffer.
type udEnd struct {
	id  *rdmacm.ID
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	buf []byte
}

func newUDEnd(t testing.TB, id *rdmacm.ID) *udEnd { return newUDEndN(t, id, 8) }

// newUDEndN is newUDEnd with queues of depth n.
func newUDEndN(t testing.TB, id *rdmacm.ID, n int) *udEnd {
	t.Helper()
	vctx := id.VerbsContext()
	pd, _ := vctx.AllocPD()
	cq, err := vctx.CreateCQ(4*n, nil)
	must(t, err)
	typ := verbs.QPType(0) // the ID's default: UD on PSUDP and on IDs from a SIDR_REQ
	if id.PortSpace() == rdmacm.PSIB {
		typ = verbs.QPTypeUD
	}
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: n, MaxRecvWR: n, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	if qp.Type() != verbs.QPTypeUD || qp.State() != verbs.QPStateRTS || qp.Query().QKey != rdmacm.UDPQKey {
		t.Fatalf("UD QP: type %v state %v qkey %#x", qp.Type(), qp.State(), uint32(qp.Query().QKey))
	}
	buf := make([]byte, 1024)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	must(t, err)
	_, err = qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 512)}})
	must(t, err)
	return &udEnd{id: id, pd: pd, cq: cq, mr: mr, buf: buf}
}

func (e *udEnd) wait(t testing.TB) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	for i := 0; ; i++ {
		n, err := e.cq.Poll(wc[:])
		must(t, err)
		if n == 1 {
			if err := wc[0].Err(); err != nil {
				t.Fatal(err)
			}
			return wc[0]
		}
		if i > 1_000_000 {
			t.Fatal("no completion")
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// send posts a UD SEND of msg to ud.
func (e *udEnd) send(t testing.TB, ud *rdmacm.UDParam, qpn verbs.QPN, msg string) {
	t.Helper()
	ah, err := e.pd.CreateAH(ud.AH)
	must(t, err)
	copy(e.buf[600:], msg)
	_, err = e.id.QP().PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{e.mr.SGE(600, len(msg))}, AH: ah, RemoteQPN: qpn, RemoteQKey: ud.QKey})
	must(t, err)
}

// sidrExchange resolves a UD peer through SIDR and exchanges one datagram
// each way with the addressing from the events.
func sidrExchange(t *testing.T, p *pair, ps rdmacm.PortSpace, port uint16) {
	sch, _ := rdmacm.CreateEventChannel(nil)
	defer sch.Destroy()
	lid, err := sch.CreateID(p.b, ps)
	must(t, err)
	defer lid.Destroy()
	must(t, lid.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
	must(t, lid.Listen(4))

	cch, _ := rdmacm.CreateEventChannel(nil)
	defer cch.Destroy()
	cid, err := cch.CreateID(p.a, ps)
	must(t, err)
	defer cid.Destroy()
	must(t, cid.ResolveAddr(netip.AddrPortFrom(p.b.LocalAddr().Addr(), port).String(), time.Second))
	waitEvent(t, cch, rdmacm.EventAddrResolved)
	must(t, cid.ResolveRoute(time.Second))
	waitEvent(t, cch, rdmacm.EventRouteResolved)
	client := newUDEnd(t, cid)
	must(t, cid.Connect(&rdmacm.ConnParam{PrivateData: []byte("udaddy client")}))

	req := waitEvent(t, sch, rdmacm.EventConnectRequest)
	defer req.ID.Destroy()
	if req.Listen != lid || len(req.PrivateData()) != 180 || !bytes.HasPrefix(req.PrivateData(), []byte("udaddy client\x00")) {
		t.Fatalf("CONNECT_REQUEST private data %q (%d bytes)", req.PrivateData(), len(req.PrivateData()))
	}
	if req.UD == nil || req.UD.QKey != rdmacm.UDPQKey || req.UD.AH.DGID.Addr() != p.a.LocalAddr().Addr() || req.UD.QPN != 0 {
		t.Fatalf("CONNECT_REQUEST UD %+v", req.UD)
	}
	if got := req.ID.RemoteAddr(); got != cid.LocalAddr() {
		t.Fatalf("server sees the client at %v, client bound %v", got, cid.LocalAddr())
	}
	server := newUDEnd(t, req.ID)
	must(t, req.ID.Accept(&rdmacm.ConnParam{PrivateData: []byte("udaddy server")}))
	if err := req.ID.Accept(nil); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Errorf("second Accept: %v", err)
	}

	est := waitEvent(t, cch, rdmacm.EventEstablished)
	if est.UD == nil || est.UD.QPN != req.ID.QP().QPN() || est.UD.QKey != rdmacm.UDPQKey || est.UD.AH.DGID.Addr() != p.b.LocalAddr().Addr() {
		t.Fatalf("ESTABLISHED UD %+v, server QP %v", est.UD, req.ID.QP().QPN())
	}
	if len(est.PrivateData()) != 136 || !bytes.HasPrefix(est.PrivateData(), []byte("udaddy server\x00")) {
		t.Fatalf("ESTABLISHED private data %q", est.PrivateData())
	}
	if err := cid.Disconnect(); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Errorf("Disconnect on UD: %v", err)
	}

	// Client → server with the SIDR_REP's QPN and Q_Key; the server
	// answers to the WC's source QP through the CONNECT_REQUEST's AH.
	client.send(t, est.UD, est.UD.QPN, "ping over UD")
	client.wait(t)
	wc := server.wait(t)
	if wc.Opcode != verbs.WCRecv || wc.SrcQP != cid.QP().QPN() || wc.ByteLen != 40+12 || string(server.buf[40:52]) != "ping over UD" {
		t.Fatalf("server completion %+v, payload %q", wc, server.buf[40:52])
	}
	server.send(t, req.UD, wc.SrcQP, "pong")
	server.wait(t)
	if wc := client.wait(t); wc.SrcQP != req.ID.QP().QPN() || string(client.buf[40:44]) != "pong" {
		t.Fatalf("client completion %+v, payload %q", wc, client.buf[40:44])
	}
}

func TestSIDRUDP(t *testing.T) {
	noLeak(t)
	p := newPair(t, true)
	defer p.close()
	sidrExchange(t, p, rdmacm.PSUDP, 7175)
}

func TestSIDRMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		sidrExchange(t, p, rdmacm.PSUDP, 7175)
	})
}

// TestSIDRPortSpaceIB: the same in RDMA_PS_IB with UD QPs (service ID
// 0x013F<<16 | port).
func TestSIDRPortSpaceIB(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		sidrExchange(t, p, rdmacm.PSIB, 7176)
	})
}

// madAttr returns the CM attribute of a packet to QP1, or 0.
func madAttr(pkt []byte) cmwire.AttrID {
	if len(pkt) < 20+wire.MADSize || wire.BTH(pkt).DestQP() != 1 {
		return 0
	}
	return cmwire.AttrID(uint16(pkt[36])<<8 | uint16(pkt[37]))
}

// udClient resolves a UD client ID aimed at addr and gives it a QP.
func udClient(t testing.TB, vctx *verbs.Context, addr string) (*rdmacm.EventChannel, *rdmacm.ID) {
	t.Helper()
	ch, _ := rdmacm.CreateEventChannel(nil)
	id, err := ch.CreateID(vctx, rdmacm.PSUDP)
	must(t, err)
	must(t, id.ResolveAddr(addr, time.Second))
	waitEvent(t, ch, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	waitEvent(t, ch, rdmacm.EventRouteResolved)
	newUDEnd(t, id)
	return ch, id
}

// TestSIDRLostRequest: the first SIDR_REQ is lost; the copy 4.096 s later
// (1 << (CM response timeout 20 − 8) ms) gets the answer.
func TestSIDRLostRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		var mu sync.Mutex
		reqs := 0
		var first, second []byte
		p.net.SetFilter(func(_ transporttest.Dir, pkt []byte) transporttest.Verdict {
			mu.Lock()
			defer mu.Unlock()
			if madAttr(pkt) == cmwire.AttrSIDRREQ {
				reqs++
				if reqs == 1 {
					first = append([]byte(nil), pkt[20:20+256]...)
					return transporttest.Drop
				}
				second = append([]byte(nil), pkt[20:20+256]...)
			}
			return transporttest.Pass
		})
		sch, _ := rdmacm.CreateEventChannel(nil)
		defer sch.Destroy()
		lid, _ := sch.CreateID(p.b, rdmacm.PSUDP)
		defer lid.Destroy()
		must(t, lid.Bind(netip.MustParseAddrPort("0.0.0.0:4711")))
		must(t, lid.Listen(1))
		ch, id := udClient(t, p.a, "198.18.7.2:4711")
		defer ch.Destroy()
		defer id.Destroy()
		start := time.Now()
		must(t, id.Connect(nil))
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		defer req.ID.Destroy()
		newUDEnd(t, req.ID)
		must(t, req.ID.Accept(nil))
		waitEvent(t, ch, rdmacm.EventEstablished)
		if el := time.Since(start); el != 4096*time.Millisecond || reqs != 2 {
			t.Fatalf("ESTABLISHED after %v with %d SIDR_REQs", el, reqs)
		}
		// The SIDR_REQ as the kernel builds it (roce-wire.md §7.8; the
		// TID's low word is the request ID byte-swapped, see
		// cmwire.KernelTID), resent unchanged.
		if !bytes.Equal(first, second) {
			t.Error("the retransmitted SIDR_REQ differs from the first")
		}
		m, _, err := cmwire.ParseMessage(first)
		must(t, err)
		r := m.SIDRREQ()
		hdr, _, err := cmwire.ParseCMAHeader(r.PrivateData())
		must(t, err)
		if uint32(m.TransactionID()) != bits.ReverseBytes32(uint32(r.RequestID())) || r.PKey() != 0xFFFF || r.ServiceID() != 0x0000000001110000|4711 ||
			hdr.Src() != netip.MustParseAddr("198.18.7.1") || hdr.Dst() != netip.MustParseAddr("198.18.7.2") || hdr.Port() != id.LocalAddr().Port() {
			t.Errorf("SIDR_REQ: TID %#x, %+v, CMA header %v→%v port %d", m.TransactionID(), r.Fields(), hdr.Src(), hdr.Dst(), hdr.Port())
		}
		if st, _ := rdmacm.StateOf(p.a); st.SIDRs != 0 {
			t.Errorf("client dispatcher after the reply: %+v", st)
		}
	})
}

// TestSIDRUnreachable: nobody answers → 16 SIDR_REQs 4.096 s apart, then
// UNREACHABLE -ETIMEDOUT.
func TestSIDRUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		p.net.SetFilter(func(transporttest.Dir, []byte) transporttest.Verdict { return transporttest.Drop })
		ch, id := udClient(t, p.a, "198.18.7.2:4711")
		defer ch.Destroy()
		defer id.Destroy()
		start := time.Now()
		must(t, id.Connect(nil))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		ev, err := ch.GetEvent(ctx)
		must(t, err)
		if ev.Type != rdmacm.EventUnreachable || ev.Status != -110 {
			t.Fatalf("event %v status %d", ev.Type, ev.Status)
		}
		if el, want := time.Since(start), 16*4096*time.Millisecond; el != want {
			t.Errorf("UNREACHABLE after %v, want %v", el, want)
		}
		if got := p.net.Stats().Filtered; got != 16 {
			t.Errorf("%d SIDR_REQs sent, want 16", got)
		}
	})
}

// TestSIDRRefused: no listener → SIDR_REP status 1 at once (a TCP
// listener on the port does not count: its service ID is PS_TCP's); a
// rejecting server → status 2 with its private data; all reported as
// UNREACHABLE with Status = the SIDR status.
func TestSIDRRefused(t *testing.T) {
	noLeak(t)
	t.Run("udp=true", func(t *testing.T) { sidrRefused(t, true) })
	t.Run("udp=false", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { sidrRefused(t, false) }) })
}

func sidrRefused(t *testing.T, real bool) {
	p := newPair(t, real)
	defer p.close()
	srv := p.b.LocalAddr().Addr()
	sch, _ := rdmacm.CreateEventChannel(nil)
	defer sch.Destroy()
	lid, _ := sch.CreateID(p.b, rdmacm.PSUDP)
	defer lid.Destroy()
	must(t, lid.Bind(netip.AddrPortFrom(srv, 6000)))
	must(t, lid.Listen(1))
	tid, _ := sch.CreateID(p.b, rdmacm.PSTCP)
	defer tid.Destroy()
	must(t, tid.Bind(netip.AddrPortFrom(srv, 6001)))
	must(t, tid.Listen(1))

	refused := func(port uint16, want rdmacm.SIDRStatus, answer func()) *rdmacm.Event {
		ch, id := udClient(t, p.a, netip.AddrPortFrom(srv, port).String())
		defer ch.Destroy()
		defer id.Destroy()
		start := time.Now()
		must(t, id.Connect(nil))
		if answer != nil {
			answer()
		}
		ev := waitEvent(t, ch, rdmacm.EventUnreachable)
		var se *rdmacm.SIDRError
		if ev.Status != int(want) || !errors.As(ev.Err, &se) || se.Status != want {
			t.Fatalf("port %d: UNREACHABLE status %d err %v, want %d", port, ev.Status, ev.Err, want)
		}
		// On the fake clock: answered before the first resend.
		if el := time.Since(start); !real && el >= 4096*time.Millisecond {
			t.Errorf("port %d: refusal took %v", port, el)
		}
		return ev
	}
	refused(6002, rdmacm.SIDRUnsupported, nil)
	refused(6001, rdmacm.SIDRUnsupported, nil)
	ev := refused(6000, rdmacm.SIDRReject, func() {
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		defer req.ID.Destroy()
		must(t, req.ID.Reject([]byte("not today")))
	})
	if !bytes.HasPrefix(ev.PrivateData(), []byte("not today\x00")) || len(ev.PrivateData()) != 136 {
		t.Errorf("reject private data %q", ev.PrivateData())
	}
	// A request whose ID is destroyed unanswered is refused too.
	refused(6000, rdmacm.SIDRReject, func() {
		waitEvent(t, sch, rdmacm.EventConnectRequest).ID.Destroy()
	})
}

// TestPortSpaces: a REQ to a port where only a UD listener listens finds
// no PS_TCP listener (REJ 8); port spaces and QP types must fit.
func TestPortSpaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		sch, _ := rdmacm.CreateEventChannel(nil)
		defer sch.Destroy()
		lid, _ := sch.CreateID(p.b, rdmacm.PSUDP)
		defer lid.Destroy()
		must(t, lid.Bind(netip.MustParseAddrPort("0.0.0.0:6000")))
		must(t, lid.Listen(1))
		ch, id, _ := clientTo(t, p.a, "198.18.7.2:6000")
		defer ch.Destroy()
		defer id.Destroy()
		must(t, id.Connect(nil))
		if ev := waitEvent(t, ch, rdmacm.EventRejected); ev.Status != 8 {
			t.Fatalf("REQ to PS_TCP 6000: status %d", ev.Status)
		}
		if _, err := sch.CreateID(p.b, rdmacm.PortSpace(0x0107)); !errors.Is(err, rdmacm.ErrNotSupported) {
			t.Errorf("unknown port space: %v", err)
		}
		pd, _ := p.b.AllocPD()
		cq, _ := p.b.CreateCQ(4, nil)
		attr := func(typ verbs.QPType) *verbs.QPInitAttr {
			return &verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
		}
		udp, _ := sch.CreateID(p.b, rdmacm.PSUDP)
		defer udp.Destroy()
		if _, err := udp.CreateQP(pd, attr(verbs.QPTypeRC)); !errors.Is(err, rdmacm.ErrNotSupported) {
			t.Errorf("RC QP on a PS_UDP ID: %v", err)
		}
		tcp, _ := sch.CreateID(p.b, rdmacm.PSTCP)
		defer tcp.Destroy()
		if _, err := tcp.CreateQP(pd, attr(verbs.QPTypeUD)); !errors.Is(err, rdmacm.ErrNotSupported) {
			t.Errorf("UD QP on a PS_TCP ID: %v", err)
		}
		ib, _ := sch.CreateID(p.b, rdmacm.PSIB)
		defer ib.Destroy()
		if qp, err := ib.CreateQP(pd, attr(verbs.QPTypeUD)); err != nil || qp.State() != verbs.QPStateRTS {
			t.Errorf("UD QP on a PS_IB ID: %v", err)
		}
	})
}

// TestSIDRDuplicate: a copy of a SIDR_REQ that arrives while the first is
// waiting for Accept is dropped (one CONNECT_REQUEST); once answered, a
// copy is a new request, as in the kernel.
func TestSIDRDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		sch, _ := rdmacm.CreateEventChannel(nil)
		defer sch.Destroy()
		lid, _ := sch.CreateID(p.b, rdmacm.PSUDP)
		defer lid.Destroy()
		must(t, lid.Bind(netip.MustParseAddrPort("0.0.0.0:4712")))
		must(t, lid.Listen(4))
		ch, id := udClient(t, p.a, "198.18.7.2:4712")
		defer ch.Destroy()
		defer id.Destroy()
		must(t, id.Connect(nil))
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		defer req.ID.Destroy()
		time.Sleep(5 * time.Second) // the client resends at 4.096 s
		synctest.Wait()
		if st, _ := rdmacm.StateOf(p.b); st.Duplicates != 1 || st.SIDRPending != 1 {
			t.Fatalf("server state %+v", st)
		}
		newUDEnd(t, req.ID)
		must(t, req.ID.Accept(nil))
		waitEvent(t, ch, rdmacm.EventEstablished)
		if st, _ := rdmacm.StateOf(p.b); st.SIDRPending != 0 {
			t.Fatalf("server state after Accept %+v", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if ev, err := sch.GetEvent(ctx); err == nil {
			t.Fatalf("unexpected server event %v", ev)
		}
	})
}
