package rdmacm_test

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// cycles runs n connect / SEND / disconnect / destroy cycles between
// p.a (Dial) and a Listener on p.b, calling check after each.
func cycles(t *testing.T, p *pair, port uint16, n int, check func(i int)) {
	t.Helper()
	l, err := rdmacm.Listen(p.b, netip.AddrPortFrom(netip.IPv4Unspecified(), port), nil)
	must(t, err)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr := netip.AddrPortFrom(p.b.LocalAddr().Addr(), port).String()
	for i := range n {
		c, err := rdmacm.Dial(ctx, p.a, addr, &rdmacm.DialOptions{EndpointOptions: rdmacm.EndpointOptions{
			QP: verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}}})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		exchange(t, c, s, "one SEND per cycle")
		must(t, c.Close())
		<-s.Done()
		must(t, s.Close())
		check(i)
	}
}

// serverClean fails when the server dispatcher holds more than the
// listener and timewait records after a cycle.
func serverClean(t *testing.T, p *pair, i, extraIDs int) rdmacm.DispatcherState {
	t.Helper()
	st, _ := rdmacm.StateOf(p.b)
	if st.Conns != 0 || st.Remote != 0 || st.RemoteQP != 0 || st.IDs != 1+extraIDs || st.Timewait > i+1 {
		t.Fatalf("cycle %d: server dispatcher %+v", i, st)
	}
	return st
}

// TestConnectCyclesUDP: 1 000 sequential connect, SEND, disconnect,
// destroy cycles over loopback UDP. After every cycle the server's
// dispatcher holds only the listener and timewait records; the goroutine
// count must not exceed the one after cycle 100, and the heap in use
// (after GC) must not grow by more than 16 MiB from cycle 100 to the end.
func TestConnectCyclesUDP(t *testing.T) {
	noLeak(t)
	p := newPair(t, true)
	defer p.close()
	const n = 1000
	var baseG int
	var baseHeap uint64
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	start := time.Now()
	cycles(t, p, 7600, n, func(i int) {
		st := serverClean(t, p, i, 0)
		if i == 99 {
			baseG, baseHeap = runtime.NumGoroutine(), heap()
		}
		if (i+1)%100 == 0 {
			t.Logf("cycle %4d: %.1f s, %d goroutines, heap in use %.1f MiB, server dispatcher: %d conns, %d in timewait, %d IDs",
				i+1, time.Since(start).Seconds(), runtime.NumGoroutine(), float64(heap())/(1<<20), st.Conns, st.Timewait, st.IDs)
		}
	})
	g, h := runtime.NumGoroutine(), heap()
	t.Logf("after %d cycles and closing the listener: %d goroutines (cycle 100: %d), heap in use %.1f MiB (cycle 100: %.1f MiB)",
		n, g, baseG, float64(h)/(1<<20), float64(baseHeap)/(1<<20))
	if g > baseG {
		t.Errorf("goroutines grew: %d at cycle 100, %d after", baseG, g)
	}
	if h > baseHeap+16<<20 {
		t.Errorf("heap in use grew from %d to %d bytes", baseHeap, h)
	}
}

// TestConnectCyclesDrain: 300 cycles on the in-memory network under a fake
// clock (a few ms of it). Every destroyed server connection is still in
// timewait at the end; the records go 2.048 s after their connection
// entered timewait, and the client's dispatcher is gone after every
// cycle.
func TestConnectCyclesDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		// An idle ID keeps the server dispatcher alive after the listener.
		ch, _ := rdmacm.CreateEventChannel(nil)
		defer ch.Destroy()
		hold, _ := ch.CreateID(p.b, rdmacm.PSTCP)
		defer hold.Destroy()
		const n = 300
		start := time.Now()
		cycles(t, p, 7601, n, func(i int) {
			if st, ok := rdmacm.StateOf(p.a); ok {
				t.Fatalf("cycle %d: client dispatcher still holds %+v", i, st)
			}
			if st := serverClean(t, p, i, 1); st.Timewait != i+1 {
				t.Fatalf("cycle %d: %d timewait records", i, st.Timewait)
			}
		})
		last := time.Now()
		// Every record ends 2.048 s after its connection entered timewait,
		// which is between start and last.
		time.Sleep(time.Until(start.Add(2047 * time.Millisecond)))
		synctest.Wait()
		if st, _ := rdmacm.StateOf(p.b); st.Timewait != n {
			t.Fatalf("%d timewait records at start + 2.047 s, want %d", st.Timewait, n)
		}
		time.Sleep(time.Until(last.Add(2048 * time.Millisecond)))
		synctest.Wait()
		if st, _ := rdmacm.StateOf(p.b); st.Timewait != 0 || st.IDs != 1 {
			t.Fatalf("after timewait: %+v", st)
		}
	})
}
