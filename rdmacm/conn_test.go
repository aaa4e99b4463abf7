package rdmacm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
)

// pair is two verbs contexts, over loopback UDP or the in-memory network.
type pair struct {
	a, b *verbs.Context
	net  *transporttest.Network
}

func newPair(t testing.TB, real bool) *pair {
	t.Helper()
	p := &pair{}
	var conns [2]transport.Conn
	if !real {
		p.net = transporttest.NewNetwork(1)
		conns[0] = p.net.Attach(netip.MustParseAddrPort("198.18.7.1:4791"))
		conns[1] = p.net.Attach(netip.MustParseAddrPort("198.18.7.2:4791"))
	}
	for i, c := range []**verbs.Context{&p.a, &p.b} {
		if conns[i] == nil {
			*c = loopbackContext(t)
			continue
		}
		ctx, err := verbs.NewContext(&verbs.Options{Conn: conns[i]})
		if err != nil {
			t.Fatal(err)
		}
		*c = ctx
	}
	return p
}

// loopbackContext opens a context on a random 127.79-127.98 address:
// verbstest.LoopbackAddr counts from the same start in every test binary,
// so packages tested in parallel collide on it.
func loopbackContext(t testing.TB) *verbs.Context {
	t.Helper()
	var err error
	for range 20 {
		a := netip.AddrFrom4([4]byte{127, byte(79 + rand.IntN(20)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
		var ctx *verbs.Context
		if ctx, err = verbs.NewContext(&verbs.Options{Addr: a}); err == nil {
			return ctx
		}
	}
	t.Fatal(err)
	return nil
}

func (p *pair) close() {
	p.a.Close()
	p.b.Close()
	if p.net != nil {
		p.net.Close()
	}
}

func waitEvent(t testing.TB, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		t.Fatalf("got event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
	}
	return ev
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// end is a connected ID with its verbs resources.
type end struct {
	id  *rdmacm.ID
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	buf []byte
}

func newEnd(t testing.TB, id *rdmacm.ID) *end {
	t.Helper()
	vctx := id.VerbsContext()
	pd, _ := vctx.AllocPD()
	cq, err := vctx.CreateCQ(64, nil)
	must(t, err)
	_, err = id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	must(t, err)
	e := &end{id: id, pd: pd, cq: cq, mr: mr, buf: buf}
	_, err = id.QP().PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 64)}})
	must(t, err)
	return e
}

func (e *end) wait(t testing.TB) verbs.WC {
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

// connect runs a client and a server through the whole life of one
// connection and checks private data, a SEND and an RDMA WRITE.
func connect(t *testing.T, p *pair, port uint16, timewait bool) {
	sch, _ := rdmacm.CreateEventChannel(nil)
	defer sch.Destroy()
	cch, _ := rdmacm.CreateEventChannel(nil)
	defer cch.Destroy()

	lid, err := sch.CreateID(p.b, rdmacm.PSTCP)
	must(t, err)
	defer lid.Destroy()
	must(t, lid.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
	must(t, lid.Listen(4))

	cid, err := cch.CreateID(p.a, rdmacm.PSTCP)
	must(t, err)
	defer cid.Destroy()
	must(t, cid.ResolveAddr(fmt.Sprintf("%v:%d", p.b.LocalAddr().Addr(), port), time.Second))
	waitEvent(t, cch, rdmacm.EventAddrResolved)
	must(t, cid.ResolveRoute(time.Second))
	waitEvent(t, cch, rdmacm.EventRouteResolved)
	client := newEnd(t, cid)
	must(t, cid.Connect(&rdmacm.ConnParam{PrivateData: []byte("hello from client"),
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}))

	req := waitEvent(t, sch, rdmacm.EventConnectRequest)
	if req.Listen != lid || !bytes.HasPrefix(req.PrivateData(), []byte("hello from client\x00")) || len(req.PrivateData()) != 56 {
		t.Fatalf("CONNECT_REQUEST private data %q", req.PrivateData())
	}
	if req.Param.ResponderResources != 1 || req.Param.InitiatorDepth != 1 || req.Param.RNRRetryCount != 7 {
		t.Fatalf("CONNECT_REQUEST param %+v", req.Param)
	}
	if got := req.ID.RemoteAddr(); got != cid.LocalAddr() {
		t.Fatalf("server sees the client at %v, client bound %v", got, cid.LocalAddr())
	}
	server := newEnd(t, req.ID)
	defer req.ID.Destroy()
	must(t, req.ID.Accept(&rdmacm.ConnParam{PrivateData: []byte("hello from server"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))

	est := waitEvent(t, cch, rdmacm.EventEstablished)
	if !bytes.HasPrefix(est.PrivateData(), []byte("hello from server\x00")) || len(est.PrivateData()) != 196 {
		t.Fatalf("ESTABLISHED private data %q", est.PrivateData())
	}
	waitEvent(t, sch, rdmacm.EventEstablished)

	// The client advertises its buffer in a SEND; the server WRITEs into
	// it and SENDs back.
	var info [16]byte
	binary.BigEndian.PutUint64(info[0:], client.mr.Addr()+1024)
	binary.BigEndian.PutUint32(info[8:], uint32(client.mr.RKey()))
	copy(client.buf[100:], info[:])
	_, err = cid.QP().PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{client.mr.SGE(100, 16)}})
	must(t, err)
	client.wait(t)
	if wc := server.wait(t); wc.Opcode != verbs.WCRecv || wc.ByteLen != 16 {
		t.Fatalf("server completion %+v", wc)
	}
	addr, rkey := binary.BigEndian.Uint64(server.buf[0:]), verbs.RKey(binary.BigEndian.Uint32(server.buf[8:]))
	copy(server.buf[200:], "written by the server")
	_, err = req.ID.QP().PostSend(
		verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{server.mr.SGE(200, 21)}, RemoteAddr: addr, RKey: rkey},
		verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{server.mr.SGE(200, 4)}})
	must(t, err)
	server.wait(t)
	client.wait(t)
	if got := string(client.buf[1024 : 1024+21]); got != "written by the server" {
		t.Fatalf("client buffer %q", got)
	}

	// The client disconnects; the server answers.
	must(t, cid.Disconnect())
	waitEvent(t, sch, rdmacm.EventDisconnected)
	must(t, req.ID.Disconnect())
	waitEvent(t, cch, rdmacm.EventDisconnected)
	if timewait {
		waitEvent(t, sch, rdmacm.EventTimewaitExit)
		waitEvent(t, cch, rdmacm.EventTimewaitExit)
	}
}

// noLeak fails when goroutines started during the test outlive it.
func noLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		for range 200 {
			if runtime.NumGoroutine() <= before {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		buf := make([]byte, 1<<16)
		t.Errorf("goroutine leak: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	})
}

func TestConnectUDP(t *testing.T) {
	noLeak(t)
	p := newPair(t, true)
	defer p.close()
	connect(t, p, 7174, false)
}

// TestConnectMemory runs the same over the in-memory network on a fake
// clock, through the timewait exits; synctest fails on leaked goroutines.
func TestConnectMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		start := time.Now()
		connect(t, p, 7174, true)
		if el := time.Since(start); el < 2048*time.Millisecond || el > 2100*time.Millisecond {
			t.Errorf("timewait exit after %v, want 2.048 s", el)
		}
	})
}

// TestNoListener: a REQ to a port nobody listens on is answered at once
// with REJ 8 (invalid service ID).
func TestNoListener(t *testing.T) {
	noLeak(t)
	for _, real := range []bool{true, false} {
		t.Run(fmt.Sprintf("udp=%v", real), func(t *testing.T) {
			p := newPair(t, real)
			defer p.close()
			// A context with a dispatcher but no listener.
			other, _ := rdmacm.CreateEventChannel(nil)
			oid, _ := other.CreateID(p.b, rdmacm.PSTCP)
			defer oid.Destroy()

			ch, _ := rdmacm.CreateEventChannel(nil)
			id, _ := ch.CreateID(p.a, rdmacm.PSTCP)
			defer id.Destroy()
			must(t, id.ResolveAddr(netip.AddrPortFrom(p.b.LocalAddr().Addr(), 9999).String(), time.Second))
			waitEvent(t, ch, rdmacm.EventAddrResolved)
			must(t, id.ResolveRoute(time.Second))
			waitEvent(t, ch, rdmacm.EventRouteResolved)
			newEnd(t, id)
			start := time.Now()
			must(t, id.Connect(nil))
			ev := waitEvent(t, ch, rdmacm.EventRejected)
			var rej *rdmacm.RejectError
			if ev.Status != 8 || !errors.As(ev.Err, &rej) || rej.Reason != rdmacm.RejectInvalidServiceID {
				t.Fatalf("REJECTED status %d err %v", ev.Status, ev.Err)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("rejection took %v", el)
			}
		})
	}
}

// TestUnreachable: a peer that never answers ends in UNREACHABLE after 16
// REQs 6.144 s apart (2 × conv(PLT 18) + conv(CM response timeout 20)).
func TestUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		p.net.SetFilter(func(transporttest.Dir, []byte) transporttest.Verdict { return transporttest.Drop })
		ch, _ := rdmacm.CreateEventChannel(nil)
		id, _ := ch.CreateID(p.a, rdmacm.PSTCP)
		defer id.Destroy()
		must(t, id.ResolveAddr("198.18.7.2:7174", time.Second))
		waitEvent(t, ch, rdmacm.EventAddrResolved)
		must(t, id.ResolveRoute(time.Second))
		waitEvent(t, ch, rdmacm.EventRouteResolved)
		newEnd(t, id)
		start := time.Now()
		must(t, id.Connect(nil))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		ev, err := ch.GetEvent(ctx)
		must(t, err)
		el := time.Since(start)
		if ev.Type != rdmacm.EventUnreachable || ev.Status != -110 {
			t.Fatalf("event %v status %d", ev.Type, ev.Status)
		}
		if want := 16 * 6144 * time.Millisecond; el != want {
			t.Errorf("UNREACHABLE after %v, want %v", el, want)
		}
		if got := p.net.Stats().Filtered; got != 16 {
			t.Errorf("%d REQs sent, want 16", got)
		}
	})
}

// TestNoListenerRetry: with SetNoListenerRetry a REQ refused for want of a
// listener goes again until one listens (a client started together with
// its server), and without one REJECTED comes once the window has passed.
func TestNoListenerRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		other, _ := rdmacm.CreateEventChannel(nil)
		oid, _ := other.CreateID(p.b, rdmacm.PSTCP)
		defer oid.Destroy()

		dial := func(port uint16) (*rdmacm.EventChannel, *rdmacm.ID) {
			ch, _ := rdmacm.CreateEventChannel(nil)
			id, _ := ch.CreateID(p.a, rdmacm.PSTCP)
			id.SetNoListenerRetry(time.Second)
			must(t, id.ResolveAddr(netip.AddrPortFrom(p.b.LocalAddr().Addr(), port).String(), time.Second))
			waitEvent(t, ch, rdmacm.EventAddrResolved)
			must(t, id.ResolveRoute(time.Second))
			waitEvent(t, ch, rdmacm.EventRouteResolved)
			newEnd(t, id)
			must(t, id.Connect(nil))
			return ch, id
		}

		// The listener comes 300 ms after the first REQ.
		ch, id := dial(7401)
		defer id.Destroy()
		time.Sleep(300 * time.Millisecond)
		lch, _ := rdmacm.CreateEventChannel(nil)
		lid, _ := lch.CreateID(p.b, rdmacm.PSTCP)
		defer lid.Destroy()
		must(t, lid.Bind(netip.AddrPortFrom(p.b.LocalAddr().Addr(), 7401)))
		must(t, lid.Listen(0))
		req := waitEvent(t, lch, rdmacm.EventConnectRequest)
		newEnd(t, req.ID)
		must(t, req.ID.Accept(nil))
		defer req.ID.Destroy()
		waitEvent(t, ch, rdmacm.EventEstablished)

		// Nobody ever listens: REJECTED after the second, not at once.
		start := time.Now()
		ch2, id2 := dial(7402)
		defer id2.Destroy()
		ev := waitEvent(t, ch2, rdmacm.EventRejected)
		if el := time.Since(start); ev.Status != 8 || el < 900*time.Millisecond || el > 1100*time.Millisecond {
			t.Fatalf("REJECTED status %d after %v, want 8 after ~1 s", ev.Status, el)
		}
	})
}
