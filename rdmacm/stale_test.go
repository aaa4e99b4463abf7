package rdmacm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
)

// intruder is a third context on the in-memory network that sends raw
// MADs from its QP1 and reads the answers.
type intruder struct {
	vctx *verbs.Context
	gsi  hooks.GSI
}

func newIntruder(t testing.TB, p *pair) *intruder {
	t.Helper()
	v, err := verbs.NewContext(&verbs.Options{Conn: p.net.Attach(netip.MustParseAddrPort("198.18.7.3:4791"))})
	must(t, err)
	return &intruder{vctx: v, gsi: hooks.Of(v).GSI()}
}

func (in *intruder) send(t testing.TB, to string, mad []byte) {
	t.Helper()
	must(t, in.gsi.Send(netip.AddrPortFrom(netip.MustParseAddr(to), 0), mad))
}

// recv returns the next CM message, or nil when none comes within 10 s.
func (in *intruder) recv(t testing.TB) cmwire.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := in.gsi.Recv(ctx)
	if err != nil {
		return nil
	}
	msg, _, err := cmwire.ParseMessage(m.MAD[:])
	must(t, err)
	return msg
}

func (in *intruder) wantREJ(t testing.TB, what string, reason cmwire.RejectReason, local, remote cmwire.CommID) {
	t.Helper()
	msg := in.recv(t)
	if msg == nil || msg.Attr() != cmwire.AttrREJ {
		t.Fatalf("%s: got %v, want a REJ", what, msg)
	}
	rej := msg.REJ()
	if rej.Reason() != reason || rej.RemoteCommID() != remote || (local != 0 && rej.LocalCommID() != local) {
		t.Fatalf("%s: REJ %v local %#x remote %#x, want %v local %#x remote %#x", what, rej.Reason(), rej.LocalCommID(), rej.RemoteCommID(), reason, local, remote)
	}
}

// TestStaleConnections covers the kernel CM's stale-connection rules
// (cm_match_req) and timewait:
//
//   - a new REQ from a peer QP (QPN, CA GUID) that is still connected →
//     REJ 10 without state, and the old connection gets a DREQ;
//   - a copy of a REQ whose connection is in timewait → REJ 10, also after
//     the passive ID was destroyed, until the 2.048 s timewait ends;
//   - after that the copy is a new request.
func TestStaleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		in := newIntruder(t, p)
		defer in.vctx.Close()
		var mu sync.Mutex
		var reqMAD []byte
		var serverID cmwire.CommID
		p.net.SetFilter(func(d transporttest.Dir, pkt []byte) transporttest.Verdict {
			mu.Lock()
			defer mu.Unlock()
			switch madAttr(pkt) {
			case cmwire.AttrREQ:
				if reqMAD == nil {
					reqMAD = append([]byte(nil), pkt[20:20+256]...)
				}
			case cmwire.AttrREP:
				serverID = cmwire.REP(pkt[20+24:]).LocalCommID()
			}
			return transporttest.Pass
		})
		sch, _ := rdmacm.CreateEventChannel(nil)
		defer sch.Destroy()
		lid, _ := sch.CreateID(p.b, rdmacm.PSTCP)
		defer lid.Destroy()
		must(t, lid.Bind(netip.MustParseAddrPort("0.0.0.0:7400")))
		must(t, lid.Listen(4))
		cch, cid, _ := clientTo(t, p.a, "198.18.7.2:7400")
		defer cch.Destroy()
		defer cid.Destroy()
		must(t, cid.Connect(nil))
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		newEnd(t, req.ID)
		must(t, req.ID.Accept(nil))
		waitEvent(t, cch, rdmacm.EventEstablished)
		waitEvent(t, sch, rdmacm.EventEstablished)
		mu.Lock()
		orig := append([]byte(nil), reqMAD...)
		mu.Unlock()
		clientID := cmwire.CommID(binary.BigEndian.Uint32(orig[24:]))

		// A new REQ (other comm ID) from the connected client QP.
		fresh := append([]byte(nil), orig...)
		binary.BigEndian.PutUint32(fresh[24:], uint32(clientID)+1)
		in.send(t, "198.18.7.2", fresh)
		in.wantREJ(t, "REQ from a connected QP", cmwire.RejStaleConn, 0, clientID+1)
		waitEvent(t, cch, rdmacm.EventDisconnected) // the DREQ the stale check sent
		if req.ID.QP().State() != verbs.QPStateErr {
			t.Errorf("server QP %v after the stale REQ", req.ID.QP().State())
		}
		must(t, cid.Disconnect()) // DREP
		waitEvent(t, sch, rdmacm.EventDisconnected)

		// Copies of the original REQ during the server's timewait.
		in.send(t, "198.18.7.2", orig)
		in.wantREJ(t, "copy of the REQ in timewait", cmwire.RejStaleConn, serverID, clientID)
		time.Sleep(time.Second)
		must(t, req.ID.Destroy())
		in.send(t, "198.18.7.2", orig)
		in.wantREJ(t, "copy of the REQ after Destroy in timewait", cmwire.RejStaleConn, serverID, clientID)
		// Stale counts the dispatcher's REJ 10s (the QPN one and this one;
		// the live ID's state machine answered the first copy).
		if st, _ := rdmacm.StateOf(p.b); st.Timewait != 1 || st.Stale != 2 || st.RemoteQP != 0 {
			t.Errorf("server state in timewait: %+v", st)
		}

		// After the timewait the copy is a new request.
		time.Sleep(1100 * time.Millisecond)
		synctest.Wait()
		if st, _ := rdmacm.StateOf(p.b); st.Timewait != 0 || st.Conns != 0 || st.Remote != 0 {
			t.Errorf("server state after timewait: %+v", st)
		}
		in.send(t, "198.18.7.2", orig)
		again := waitEvent(t, sch, rdmacm.EventConnectRequest)
		must(t, again.ID.Reject(nil))
		must(t, again.ID.Destroy())
	})
}

// TestDeviceRemoval: closing the verbs.Context under live IDs posts
// DEVICE_REMOVAL on each; the Go layer's Listener and Conns end with
// ErrDeviceRemoved; the peer's Close gives up after CloseTimeout.
func TestDeviceRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		ch, _ := rdmacm.CreateEventChannel(nil)
		defer ch.Destroy()
		idle, _ := ch.CreateID(p.b, rdmacm.PSUDP)
		defer idle.Destroy()

		l, err := rdmacm.Listen(p.b, netip.MustParseAddrPort("0.0.0.0:7500"), nil)
		must(t, err)
		defer l.Close()
		ctx := context.Background()
		c, err := rdmacm.Dial(ctx, p.a, "198.18.7.2:7500", nil)
		must(t, err)
		s, err := l.Accept(ctx)
		must(t, err)

		must(t, p.b.Close())
		ev := waitEvent(t, ch, rdmacm.EventDeviceRemoval)
		if ev.ID != idle || ev.Status != -19 || !errors.Is(ev.Err, rdmacm.ErrDeviceRemoved) {
			t.Fatalf("DEVICE_REMOVAL %+v", ev)
		}
		<-s.Done()
		if !errors.Is(s.Err(), rdmacm.ErrDeviceRemoved) {
			t.Errorf("accepted Conn: %v", s.Err())
		}
		if _, err := l.Accept(ctx); !errors.Is(err, rdmacm.ErrDeviceRemoved) {
			t.Errorf("Accept after removal: %v", err)
		}
		if _, err := ch.CreateID(p.b, rdmacm.PSTCP); !errors.Is(err, rdmacm.ErrDeviceRemoved) {
			t.Errorf("CreateID on a removed device: %v", err)
		}
		must(t, s.Close())
		start := time.Now()
		if err := c.Close(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close towards a removed peer: %v", err)
		}
		if el := time.Since(start); el != rdmacm.CloseTimeout {
			t.Errorf("Close gave up after %v", el)
		}
	})
}

// TestRouteError: ResolveRoute posts ROUTE_ERROR (-ENETUNREACH) for
// destinations the bound address cannot reach, and the ID stays
// address-resolved; Dial reports a *RouteError.
func TestRouteError(t *testing.T) {
	noLeak(t)
	v := loopbackContext(t)
	defer v.Close()
	ch, _ := rdmacm.CreateEventChannel(nil)
	defer ch.Destroy()
	for _, dst := range []string{"198.18.0.9:7000", "[2001:db8::1]:7000", "0.0.0.0:7000", "224.0.0.1:7000"} {
		id, err := ch.CreateID(v, rdmacm.PSTCP)
		must(t, err)
		must(t, id.ResolveAddr(dst, time.Second))
		waitEvent(t, ch, rdmacm.EventAddrResolved)
		for range 2 {
			must(t, id.ResolveRoute(time.Second))
			ev := waitEvent(t, ch, rdmacm.EventRouteError)
			var re *rdmacm.RouteError
			if ev.Status != -101 || !errors.As(ev.Err, &re) {
				t.Fatalf("%s: ROUTE_ERROR %d %v", dst, ev.Status, ev.Err)
			}
		}
		if err := id.Connect(nil); !errors.Is(err, rdmacm.ErrInvalidState) {
			t.Errorf("%s: Connect without a route: %v", dst, err)
		}
		id.Destroy()
	}
	_, err := rdmacm.Dial(context.Background(), v, "198.18.0.9:7000", nil)
	var re *rdmacm.RouteError
	if !errors.As(err, &re) {
		t.Fatalf("Dial without a route: %v", err)
	}
}
