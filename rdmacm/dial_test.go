package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
)

// exchange sends msg from a to b over their connected QPs and checks it
// arrives.
func exchange(t testing.TB, a, b *rdmacm.Conn, msg string) {
	t.Helper()
	buf := make([]byte, 256)
	rmr, err := b.PD().RegMR(buf, verbs.AccessLocalWrite)
	must(t, err)
	defer rmr.Deregister()
	_, err = b.QP().PostRecv(verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{rmr.SGE(0, 256)}})
	must(t, err)
	sbuf := []byte(msg)
	smr, err := a.PD().RegMR(sbuf, 0)
	must(t, err)
	defer smr.Deregister()
	_, err = a.QP().PostSend(verbs.SendWR{WRID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{smr.SGE(0, len(msg))}})
	must(t, err)
	pollOne(t, a.SendCQ())
	if wc := pollOne(t, b.RecvCQ()); wc.ByteLen != uint32(len(msg)) || string(buf[:len(msg)]) != msg {
		t.Fatalf("received %q (%+v)", buf[:wc.ByteLen], wc)
	}
}

func pollOne(t testing.TB, cq *verbs.CQ) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	for i := 0; ; i++ {
		n, err := cq.Poll(wc[:])
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

// TestDialListen: Dial and Accept over loopback UDP, private data both
// ways, a SEND each way, the client closes, the server's Conn ends with
// ErrPeerClosed.
func TestDialListen(t *testing.T) {
	noLeak(t)
	p := newPair(t, true)
	defer p.close()
	l, err := rdmacm.Listen(p.b, netip.AddrPortFrom(netip.IPv4Unspecified(), 7300), &rdmacm.ListenOptions{
		Param: func(req *rdmacm.Event) (*rdmacm.ConnParam, error) {
			return &rdmacm.ConnParam{PrivateData: append([]byte("welcome, "), req.PrivateData()[:6]...), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}, nil
		}})
	must(t, err)
	defer l.Close()
	if l.Addr().Port() != 7300 {
		t.Fatalf("listener on %v", l.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		c   *rdmacm.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := l.Accept(ctx)
		accepted <- result{c, err}
	}()
	c, err := rdmacm.Dial(ctx, p.a, netip.AddrPortFrom(p.b.LocalAddr().Addr(), 7300).String(),
		&rdmacm.DialOptions{Param: &rdmacm.ConnParam{PrivateData: []byte("client"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}})
	must(t, err)
	r := <-accepted
	must(t, r.err)
	s := r.c
	if !bytes.HasPrefix(c.PrivateData(), []byte("welcome, client\x00")) || len(c.PrivateData()) != 196 {
		t.Errorf("client got %q", c.PrivateData())
	}
	if !bytes.HasPrefix(s.PrivateData(), []byte("client\x00")) || len(s.PrivateData()) != 56 {
		t.Errorf("server got %q", s.PrivateData())
	}
	if s.RemoteAddr() != c.LocalAddr() || c.RemoteAddr().Port() != 7300 || s.LocalAddr().Port() != 7300 {
		t.Errorf("addresses: client %v→%v, server %v→%v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	if c.QP().State() != verbs.QPStateRTS || s.QP().State() != verbs.QPStateRTS || c.Err() != nil {
		t.Fatalf("QPs %v/%v, err %v", c.QP().State(), s.QP().State(), c.Err())
	}
	exchange(t, c, s, "from the client")
	exchange(t, s, c, "from the server")

	must(t, c.Close())
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("server Conn did not see the disconnect")
	}
	if !errors.Is(s.Err(), rdmacm.ErrPeerClosed) || !errors.Is(c.Err(), rdmacm.ErrClosed) {
		t.Errorf("errors: server %v, client %v", s.Err(), c.Err())
	}
	if s.QP().State() != verbs.QPStateErr {
		t.Errorf("server QP %v after the peer's disconnect", s.QP().State())
	}
	must(t, s.Close())
	must(t, c.Close()) // idempotent
}

// TestDialRefused: a listener whose Param refuses → *RejectError 28 with
// its private data; no listener → 8.
func TestDialRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		l, err := rdmacm.Listen(p.b, netip.MustParseAddrPort("0.0.0.0:7301"), &rdmacm.ListenOptions{
			Param: func(*rdmacm.Event) (*rdmacm.ConnParam, error) {
				return nil, &rdmacm.RejectError{PrivateData: []byte("full")}
			}})
		must(t, err)
		defer l.Close()
		ctx := context.Background()
		_, err = rdmacm.Dial(ctx, p.a, "198.18.7.2:7301", nil)
		var rej *rdmacm.RejectError
		if !errors.As(err, &rej) || rej.Reason != rdmacm.RejectConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("full\x00")) {
			t.Fatalf("Dial to a refusing listener: %v", err)
		}
		_, err = rdmacm.Dial(ctx, p.a, "198.18.7.2:7302", nil)
		if !errors.As(err, &rej) || rej.Reason != rdmacm.RejectInvalidServiceID {
			t.Fatalf("Dial to no listener: %v", err)
		}
		if _, err := rdmacm.Dial(ctx, p.a, "nohost:1", nil); !errors.Is(err, rdmacm.ErrInvalidArgument) {
			t.Fatalf("Dial to a name without a resolver: %v", err)
		}
		// Accept's context and Close.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := l.Accept(actx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Accept with nothing to accept: %v", err)
		}
		done := make(chan error)
		go func() {
			_, err := l.Accept(ctx)
			done <- err
		}()
		synctest.Wait()
		must(t, l.Close())
		if err := <-done; !errors.Is(err, rdmacm.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	})
}

// TestDialCancel: a peer that never answers; Dial's context ends after
// 1 s: Dial returns the context's error at exactly 1 s and, as
// rdma_destroy_id, sends a REJ (reason 4, timeout) after its REQ.
func TestDialCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		var mu sync.Mutex
		var seen []cmwire.AttrID
		p.net.SetFilter(func(_ transporttest.Dir, pkt []byte) transporttest.Verdict {
			mu.Lock()
			defer mu.Unlock()
			if a := madAttr(pkt); a != 0 {
				seen = append(seen, a)
				if a == cmwire.AttrREJ && cmwire.REJ(pkt[20+24:]).Reason() != cmwire.RejTimeout {
					t.Errorf("REJ reason %v", cmwire.REJ(pkt[20+24:]).Reason())
				}
			}
			return transporttest.Drop
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		c, err := rdmacm.Dial(ctx, p.a, "198.18.7.2:7303", nil)
		if c != nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial: %v, %v", c, err)
		}
		if el := time.Since(start); el != time.Second {
			t.Errorf("Dial returned after %v", el)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 || seen[0] != cmwire.AttrREQ || seen[1] != cmwire.AttrREJ {
			t.Errorf("CM messages %v, want REQ REJ", seen)
		}
		if st, ok := rdmacm.StateOf(p.a); ok {
			t.Errorf("dispatcher still running after a cancelled Dial: %+v", st)
		}
	})
}

// TestDefaultConnParam: Dial with nil parameters sends DefaultConnParam
// (READ resources, retries), and the listener sees them; Close releases
// the CQ and PD the Conn made.
func TestDefaultConnParam(t *testing.T) {
	dp := rdmacm.DefaultConnParam()
	if dp.ResponderResources != rdmacm.MaxResources || dp.InitiatorDepth != rdmacm.MaxResources || dp.RetryCount != 7 || dp.RNRRetryCount != 7 || dp.PrivateData != nil {
		t.Fatalf("DefaultConnParam = %+v", dp)
	}
	p := newPair(t, true)
	defer p.close()
	seen := make(chan rdmacm.ConnParam, 2)
	l, err := rdmacm.Listen(p.b, netip.MustParseAddrPort("0.0.0.0:7302"), &rdmacm.ListenOptions{
		Param: func(req *rdmacm.Event) (*rdmacm.ConnParam, error) {
			seen <- req.Param
			return nil, nil
		}})
	must(t, err)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		for {
			s, err := l.Accept(ctx)
			if err != nil {
				return
			}
			<-s.Done()
			s.Close()
		}
	}()
	for _, param := range []*rdmacm.ConnParam{nil, &dp} {
		c, err := rdmacm.Dial(ctx, p.a, netip.AddrPortFrom(p.b.LocalAddr().Addr(), 7302).String(), &rdmacm.DialOptions{Param: param})
		must(t, err)
		got := <-seen
		if got.InitiatorDepth != verbs.MaxRdAtomic || got.ResponderResources != verbs.MaxRdAtomic || got.RetryCount != 7 || got.RNRRetryCount != 7 {
			t.Errorf("Dial(%v): the listener saw %+v", param, got)
		}
		cq := c.SendCQ()
		must(t, c.Close())
		if _, err := cq.Poll(make([]verbs.WC, 1)); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("the Conn's own CQ after Close: Poll = %v, want ErrClosed", err)
		}
	}
}
