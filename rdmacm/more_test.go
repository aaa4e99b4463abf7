package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// clientTo resolves and creates the QP of a client ID aimed at addr.
func clientTo(t testing.TB, vctx *verbs.Context, addr string) (*rdmacm.EventChannel, *rdmacm.ID, *end) {
	t.Helper()
	ch, _ := rdmacm.CreateEventChannel(nil)
	id, err := ch.CreateID(vctx, rdmacm.PSTCP)
	must(t, err)
	must(t, id.ResolveAddr(addr, time.Second))
	waitEvent(t, ch, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	waitEvent(t, ch, rdmacm.EventRouteResolved)
	return ch, id, newEnd(t, id)
}

// TestRejectByApplication: the server rejects with private data; the
// client sees REJECTED 28 with it.
func TestRejectByApplication(t *testing.T) {
	noLeak(t)
	p := newPair(t, true)
	defer p.close()
	sch, _ := rdmacm.CreateEventChannel(nil)
	lid, _ := sch.CreateID(p.b, rdmacm.PSTCP)
	defer lid.Destroy()
	must(t, lid.Bind(netip.AddrPortFrom(p.b.LocalAddr().Addr(), 5000)))
	must(t, lid.Listen(0))
	ch, id, _ := clientTo(t, p.a, fmt.Sprintf("%v:5000", p.b.LocalAddr().Addr()))
	defer id.Destroy()
	must(t, id.Connect(nil))
	req := waitEvent(t, sch, rdmacm.EventConnectRequest)
	must(t, req.ID.Reject([]byte("go away")))
	defer req.ID.Destroy()
	ev := waitEvent(t, ch, rdmacm.EventRejected)
	var rej *rdmacm.RejectError
	if ev.Status != 28 || !errors.As(ev.Err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("go away\x00")) || len(ev.PrivateData()) != 148 {
		t.Fatalf("REJECTED %d %v %q", ev.Status, ev.Err, ev.PrivateData())
	}
}

// TestLostRTU: the first RTU is lost; the server resends its REP after
// conv(20) = 4.096 s, the client answers the duplicate REP with another
// RTU, and the server reaches ESTABLISHED.
func TestLostRTU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		var mu sync.Mutex
		dropped := 0
		p.net.SetFilter(func(_ transporttest.Dir, pkt []byte) transporttest.Verdict {
			mu.Lock()
			defer mu.Unlock()
			// BTH 12 + DETH 8, then the MAD: attribute ID at MAD byte 16.
			if len(pkt) > 20+18 && wire.BTH(pkt).DestQP() == 1 && cmwire.AttrID(uint16(pkt[36])<<8|uint16(pkt[37])) == cmwire.AttrRTU && dropped == 0 {
				dropped++
				return transporttest.Drop
			}
			return transporttest.Pass
		})
		sch, _ := rdmacm.CreateEventChannel(nil)
		lid, _ := sch.CreateID(p.b, rdmacm.PSTCP)
		defer lid.Destroy()
		must(t, lid.Bind(netip.MustParseAddrPort("0.0.0.0:18515")))
		must(t, lid.Listen(1))
		ch, id, _ := clientTo(t, p.a, "198.18.7.2:18515")
		defer id.Destroy()
		must(t, id.Connect(nil))
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		newEnd(t, req.ID)
		defer req.ID.Destroy()
		start := time.Now()
		must(t, req.ID.Accept(nil))
		waitEvent(t, ch, rdmacm.EventEstablished)
		waitEvent(t, sch, rdmacm.EventEstablished)
		if el := time.Since(start); el != 4096*time.Millisecond || dropped != 1 {
			t.Fatalf("server ESTABLISHED after %v with %d RTUs dropped", el, dropped)
		}
		if a := req.ID.QP().Query(); a.MaxRdAtomic != verbs.MaxRdAtomic || a.MaxDestRdAtomic != verbs.MaxRdAtomic {
			t.Errorf("default resources: %+v", a)
		}
	})
}

// TestManyConnects: 200 clients connect to one listener at once.
func TestManyConnects(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	noLeak(t)
	const n = 200
	p := newPair(t, true)
	defer p.close()
	sch, _ := rdmacm.CreateEventChannel(nil)
	lid, _ := sch.CreateID(p.b, rdmacm.PSTCP)
	must(t, lid.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7000)))
	must(t, lid.Listen(n))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var servers []*rdmacm.ID
	serverDone := make(chan error, 1)
	go func() {
		established := 0
		pd, _ := p.b.AllocPD()
		cq, _ := p.b.CreateCQ(4*n, nil)
		for established < n {
			ev, err := sch.GetEvent(ctx)
			if err != nil {
				serverDone <- err
				return
			}
			switch ev.Type {
			case rdmacm.EventConnectRequest:
				servers = append(servers, ev.ID)
				if _, err := ev.ID.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
					serverDone <- err
					return
				}
				if err := ev.ID.Accept(&rdmacm.ConnParam{PrivateData: ev.PrivateData()[:8]}); err != nil {
					serverDone <- err
					return
				}
			case rdmacm.EventEstablished:
				established++
			default:
				serverDone <- fmt.Errorf("server event %v", ev)
				return
			}
		}
		serverDone <- nil
	}()

	errs := make(chan error, n)
	ids := make([]*rdmacm.ID, n)
	chans := make([]*rdmacm.EventChannel, n)
	dst := fmt.Sprintf("%v:7000", p.b.LocalAddr().Addr())
	pd, _ := p.a.AllocPD()
	cq, _ := p.a.CreateCQ(4*n, nil)
	for i := range n {
		go func() {
			ch, _ := rdmacm.CreateEventChannel(nil)
			chans[i] = ch
			id, err := ch.CreateID(p.a, rdmacm.PSTCP)
			if err != nil {
				errs <- err
				return
			}
			ids[i] = id
			step := func(want rdmacm.EventType) error {
				ev, err := ch.GetEvent(ctx)
				if err != nil {
					return err
				}
				if ev.Type != want {
					return fmt.Errorf("client %d: %v, want %v", i, ev, want)
				}
				if want == rdmacm.EventEstablished && string(ev.PrivateData()[:8]) != fmt.Sprintf("%08d", i) {
					return fmt.Errorf("client %d: private data %q", i, ev.PrivateData()[:8])
				}
				return nil
			}
			err = id.ResolveAddr(dst, time.Second)
			if err == nil {
				err = step(rdmacm.EventAddrResolved)
			}
			if err == nil {
				err = id.ResolveRoute(time.Second)
			}
			if err == nil {
				err = step(rdmacm.EventRouteResolved)
			}
			if err == nil {
				_, err = id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
			}
			if err == nil {
				err = id.Connect(&rdmacm.ConnParam{PrivateData: fmt.Appendf(nil, "%08d", i), RetryCount: 7, RNRRetryCount: 7})
			}
			if err == nil {
				err = step(rdmacm.EventEstablished)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := <-serverDone; err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ids[i].Destroy()
		chans[i].Destroy()
	}
	for _, s := range servers {
		s.Destroy()
	}
	lid.Destroy()
	sch.Destroy()
}
