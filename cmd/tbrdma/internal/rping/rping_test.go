package rping

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

func TestFill(t *testing.T) {
	b := make([]byte, 64)
	Fill(b, 0)
	if got := string(cstr(b)); got != "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr" || b[63] != 0 {
		t.Fatalf("%q", got)
	}
	Fill(b, 57)
	if !strings.HasPrefix(string(b), "rdma-ping-57: z") {
		t.Fatalf("%q", b)
	}
}

// TestServeTwoClients runs two clients at once against one server, then
// stops the server while one is still connected.
func TestServeTwoClients(t *testing.T) {
	sdev, c1dev, c2dev := verbstest.Device(t), verbstest.Device(t), verbstest.Device(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var log []string
	ready := make(chan netip.AddrPort, 1)
	var verbose bytes.Buffer
	serr := make(chan error, 1)
	go func() {
		serr <- Serve(ctx, sdev, netip.AddrPortFrom(sdev.LocalAddr().Addr(), 0), ServerOptions{
			Ready:    func(a netip.AddrPort) { ready <- a },
			Accepted: func(p netip.AddrPort) { mu.Lock(); log = append(log, "accepted"); mu.Unlock() },
			Closed: func(p netip.AddrPort, n int, err error) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					log = append(log, "closed")
				case errors.Is(err, ErrShutdown):
					log = append(log, "shutdown")
				default:
					log = append(log, err.Error())
				}
			},
			Verbose: &syncWriter{w: &verbose, mu: &mu},
		})
	}()
	addr := <-ready
	if addr.Port() == 0 {
		t.Fatal("no port")
	}
	dial := func(dev *verbs.Context) *Client {
		cl, err := Dial(ctx, dev, addr, 100, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	c1, c2 := dial(c1dev), dial(c2dev)
	for seq := range 5 {
		for _, cl := range []*Client{c1, c2} {
			rtt, err := cl.Ping(ctx, seq, 5*time.Second, time.Now)
			if err != nil || rtt <= 0 {
				t.Fatalf("ping %d: %v, %v", seq, rtt, err)
			}
		}
	}
	c1.Close()
	// The server answers c2 after c1 is gone; then it shuts down.
	if _, err := c2.Ping(ctx, 5, 5*time.Second, time.Now); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-serr; err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Ping(context.Background(), 6, 5*time.Second, time.Now); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("ping after shutdown: %v, want ErrDisconnected", err)
	}
	c2.Close()
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(log, ","); got != "accepted,accepted,closed,shutdown" {
		t.Errorf("server log %q", got)
	}
	if n := strings.Count(verbose.String(), "server ping data: rdma-ping-"); n != 11 {
		t.Errorf("%d verbose lines:\n%s", n, verbose.String())
	}
}

type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// TestDialRejected checks the REJ of a port nobody listens on.
func TestDialRejected(t *testing.T) {
	sdev, cdev := verbstest.Device(t), verbstest.Device(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan netip.AddrPort, 1)
	go Serve(ctx, sdev, netip.AddrPortFrom(sdev.LocalAddr().Addr(), 0), ServerOptions{Ready: func(a netip.AddrPort) { ready <- a }})
	addr := <-ready
	_, err := Dial(ctx, cdev, netip.AddrPortFrom(addr.Addr(), addr.Port()+1), 64, 5*time.Second)
	var ce *ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("err %v, want a ConnectError", err)
	}
	if r, ok := ce.RejectReason(); !ok || r != rdmacm.RejectInvalidServiceID {
		t.Fatalf("reject reason %v %v (%v)", r, ok, err)
	}
}
