package rdmacm_test

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// floodREQ is a valid rdma_cm REQ from the intruder (198.18.7.3) to port
// of 198.18.7.2, with comm ID and QPN taken from i.
func floodREQ(i int, port uint16) []byte {
	src, dst := netip.MustParseAddr("198.18.7.3"), netip.MustParseAddr("198.18.7.2")
	f := cmwire.REQFields{
		LocalCommID: cmwire.CommID(0x10000 + i), ServiceID: cmwire.ServiceID(cmwire.PSTCP, port),
		LocalCAGUID: 0x0200_0000_0000_0042, LocalQPN: wire.QPN(0x100 + i), ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: 20, TransportType: cmwire.TransportRC, StartingPSN: wire.PSN(i),
		LocalCMResponseTimeout: 20, RetryCount: 7, PKey: wire.PKeyDefault, PathMTU: cmwire.MTU(verbs.MTU1024),
		RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: cmwire.PathFields{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: wire.GIDFromAddr(src),
			RemoteGID: wire.GIDFromAddr(dst), HopLimit: 64, LocalACKTimeout: 19},
	}
	cmwire.NewCMAHeader(40000+uint16(i%20000), src, dst).Append(f.PrivateData[:0])
	return cmwire.AppendMAD(nil, uint64(i), f)
}

// flood sends REQs from..to-1 in batches, letting the bubble settle
// between them so that the in-memory link never overflows.
func flood(t *testing.T, in *intruder, from, to int, port uint16) {
	t.Helper()
	for i := from; i < to; i++ {
		in.send(t, "198.18.7.2", floodREQ(i, port))
		if i%50 == 49 {
			synctest.Wait()
		}
	}
	synctest.Wait()
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestREQFloodHalfOpen: 3000 REQs (distinct comm IDs and QPNs) from one
// address to a Listener that accepts everything, and the RTU never comes.
// At most MaxHalfOpenPerPeer (64) connections exist at a time; the others
// get REJ 3 and move cm_rejects_limit; a legitimate peer on another
// address connects during the flood; the half-open connections expire
// after the REP's 16 sends (65.5 s) and their state is freed.
func TestREQFloodHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		in := newIntruder(t, p)
		defer in.vctx.Close()
		l, err := rdmacm.Listen(p.b, netip.AddrPortFrom(netip.IPv4Unspecified(), 7600), &rdmacm.ListenOptions{
			Backlog: 4096, Limits: rdmacm.Limits{MaxHalfOpenPerPeer: 64, MaxHalfOpen: 128}})
		must(t, err)
		defer l.Close()
		before := heapInUse()
		const n = 3000
		flood(t, in, 0, n/2, 7600)
		t.Logf("%d REQs sent", n/2)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dialed := make(chan error, 1)
		go func() {
			c, err := rdmacm.Dial(ctx, p.a, "198.18.7.2:7600", nil)
			if err == nil {
				defer c.Close()
				var sc *rdmacm.Conn
				if sc, err = l.Accept(ctx); err == nil {
					defer sc.Close()
				}
			}
			dialed <- err
		}()
		flood(t, in, n/2, n, 7600)
		if err := <-dialed; err != nil {
			t.Fatalf("legitimate peer during the flood: %v", err)
		}
		s, _ := rdmacm.StateOf(p.b)
		during := heapInUse()
		t.Logf("%d REQs sent: state %+v, heap +%d KiB", n, s, (int64(during)-int64(before))/1024)
		if s.Conns > 64+1 || s.Remote > 64+1 {
			t.Fatalf("state not bounded: %+v", s)
		}
		if got := cmCounter(p.b, verbs.CMRejectsLimit); got != n-64 {
			t.Fatalf("cm_rejects_limit %d, want %d", got, n-64)
		}
		// The REP's retries run out: every half-open connection is freed.
		time.Sleep(70 * time.Second)
		synctest.Wait()
		if got := cmCounter(p.b, verbs.CMHalfOpenExpired); got != 64 {
			t.Fatalf("cm_half_open_expired %d, want 64", got)
		}
		if got := cmCounter(p.b, verbs.CMRetries); got != 64*15 {
			t.Errorf("cm_retries %d, want %d (15 REP resends each)", got, 64*15)
		}
		s, _ = rdmacm.StateOf(p.b)
		t.Logf("after expiry: state %+v", s)
		if s.Conns > 1 || s.Remote > 0 {
			t.Fatalf("half-open state left: %+v", s)
		}
		// The peer may try again.
		flood(t, in, n, n+1, 7600)
		if got := cmCounter(p.b, verbs.CMRejectsLimit); got != n-64 {
			t.Fatalf("a REQ after the expiry was refused (cm_rejects_limit %d)", got)
		}
	})
}

// TestREQFloodTotal: pending requests the application has not answered
// count too. 2000 REQs from one address to a raw listener whose
// application never answers: 1000 pending (the limits), 1000 refused;
// a second peer is refused by the total limit with REJ 3 (REJECTED,
// status 3). Logs the heap per pending request.
func TestREQFloodTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		in := newIntruder(t, p)
		defer in.vctx.Close()
		sch, _ := rdmacm.CreateEventChannel(nil)
		defer sch.Destroy()
		lid, _ := sch.CreateID(p.b, rdmacm.PSTCP)
		defer lid.Destroy()
		must(t, lid.Bind(netip.MustParseAddrPort("0.0.0.0:7601")))
		must(t, lid.SetLimits(rdmacm.Limits{MaxHalfOpenPerPeer: 1000, MaxHalfOpen: 1000}))
		must(t, lid.Listen(100000))
		before := heapInUse()
		flood(t, in, 0, 1000, 7601)
		after := heapInUse()
		t.Logf("1000 pending requests: %d bytes each (ID, CM state, queued CONNECT_REQUEST event)", (int64(after)-int64(before))/1000)
		flood(t, in, 1000, 2000, 7601)
		if s, _ := rdmacm.StateOf(p.b); s.Conns != 1000 {
			t.Fatalf("%d connections, want 1000", s.Conns)
		}
		if got := cmCounter(p.b, verbs.CMRejectsLimit); got != 1000 {
			t.Fatalf("cm_rejects_limit %d, want 1000", got)
		}
		cch, cid := pskClient(t, p, 7601, nil)
		must(t, cid.Connect(nil))
		ev := waitEvent(t, cch, rdmacm.EventRejected)
		var rej *rdmacm.RejectError
		if ev.Status != int(rdmacm.RejectNoResources) || !errors.As(ev.Err, &rej) || errors.Is(ev.Err, rdmacm.ErrAuthFailed) {
			t.Fatalf("second peer: %v", ev.Err)
		}
		// The application rejects them all: the limit has room again.
		for range 1000 {
			req := waitEvent(t, sch, rdmacm.EventConnectRequest)
			must(t, req.ID.Reject(nil))
			must(t, req.ID.Destroy())
		}
		synctest.Wait()
		if s, _ := rdmacm.StateOf(p.b); s.Conns != 0 || s.IDs != 1 {
			t.Fatalf("state after the rejects: %+v", s)
		}
	})
}
