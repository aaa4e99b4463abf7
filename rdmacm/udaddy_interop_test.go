package rdmacm_test

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// TestUdaddyInterop speaks librdmacm's udaddy protocol against a stock
// udaddy (rdmacm-utils) on an rdma_rxe host. It runs only when asked:
//
//	TBRDMA_UDADDY_BIND=<local address>     the tbrdma side's address
//	TBRDMA_UDADDY_SERVER=<guest address>   act as the client of `udaddy -b <guest>`
//	TBRDMA_UDADDY_LISTEN=1                 act as the server for `udaddy -s <local>`
//	TBRDMA_UDADDY_TIMEOUT=<duration>       how long to wait for the peer (2m)
//
// udaddy's exchange (defaults -C 10 -S 100, port 7174, RDMA_PS_UDP): the
// client resolves the server by SIDR, sends 10 SEND_WITH_IMM datagrams
// (immediate = its QPN) to the QPN/Q_Key/AH of ESTABLISHED; the server
// answers each with a datagram to the QPN in the immediate data.
func TestUdaddyInterop(t *testing.T) {
	bind := os.Getenv("TBRDMA_UDADDY_BIND")
	server, listen := os.Getenv("TBRDMA_UDADDY_SERVER"), os.Getenv("TBRDMA_UDADDY_LISTEN") != ""
	if bind == "" || (server == "" && !listen) {
		t.Skip("set TBRDMA_UDADDY_BIND and TBRDMA_UDADDY_SERVER or TBRDMA_UDADDY_LISTEN to run against a stock udaddy")
	}
	const count, size = 10, 100
	vctx, err := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr(bind)})
	must(t, err)
	defer vctx.Close()
	wait := 2 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("TBRDMA_UDADDY_TIMEOUT")); err == nil {
		wait = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ch, _ := rdmacm.CreateEventChannel(nil)
	defer ch.Destroy()
	next := func(want rdmacm.EventType) *rdmacm.Event {
		t.Helper()
		ev, err := ch.GetEvent(ctx)
		must(t, err)
		if ev.Type != want {
			t.Fatalf("event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
		}
		t.Logf("%v", ev.Type)
		return ev
	}
	var e *udEnd
	var peer *rdmacm.UDParam
	var peerQPN verbs.QPN
	setup := func(id *rdmacm.ID) {
		e = newUDEndN(t, id, 2*count)
		// newUDEnd posted one receive of 512 bytes; post the rest.
		for i := 1; i < count; i++ {
			_, err := id.QP().PostRecv(verbs.RecvWR{WRID: uint64(i + 1), SGList: []verbs.SGE{e.mr.SGE(0, 512)}})
			must(t, err)
		}
	}
	sendAll := func() {
		ah, err := e.pd.CreateAH(peer.AH)
		must(t, err)
		for range count {
			_, err := e.id.QP().PostSend(verbs.SendWR{Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
				ImmData: uint32(e.id.QP().QPN()), SGList: []verbs.SGE{e.mr.SGE(600, size)},
				AH: ah, RemoteQPN: peerQPN, RemoteQKey: peer.QKey})
			must(t, err)
			e.wait(t)
		}
	}
	recvAll := func() {
		for i := range count {
			wc := e.wait(t)
			if wc.Opcode != verbs.WCRecv || wc.ByteLen != 40+size {
				t.Fatalf("receive %d: %+v", i, wc)
			}
			if peerQPN == 0 {
				peerQPN = verbs.QPN(wc.ImmData)
			}
		}
		t.Logf("%d datagrams of %d bytes received", count, size)
	}
	if listen {
		lid, err := ch.CreateID(vctx, rdmacm.PSUDP)
		must(t, err)
		defer lid.Destroy()
		must(t, lid.Bind(netip.AddrPortFrom(netip.MustParseAddr(bind), 7174)))
		must(t, lid.Listen(0))
		req := next(rdmacm.EventConnectRequest)
		defer req.ID.Destroy()
		setup(req.ID)
		must(t, req.ID.Accept(nil))
		peer = req.UD
		recvAll()
		sendAll()
		return
	}
	id, err := ch.CreateID(vctx, rdmacm.PSUDP)
	must(t, err)
	defer id.Destroy()
	must(t, id.ResolveAddr(server+":7174", 2*time.Second))
	next(rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(2*time.Second))
	next(rdmacm.EventRouteResolved)
	setup(id)
	must(t, id.Connect(nil))
	est := next(rdmacm.EventEstablished)
	peer, peerQPN = est.UD, est.UD.QPN
	t.Logf("server UD QP %v, Q_Key %#x", est.UD.QPN, uint32(est.UD.QKey))
	sendAll()
	recvAll()
}
