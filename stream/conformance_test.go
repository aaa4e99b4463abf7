package stream_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/tbrdma/tbrdma/stream"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
)

// TestNetConn runs the net.Conn conformance suite of x/net/nettest.
func TestNetConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		c, s := pair(t, nil, nil)
		return c, s, func() {
			c.Close()
			s.Close()
		}, nil
	})
}

// TestHTTP serves HTTP on a Listener to a client whose transport dials
// with stream.Dial.
func TestHTTP(t *testing.T) {
	l := listen(t, &stream.ListenConfig{})
	body := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "%s %s %d\n%s", r.Method, r.URL.Path, len(in), body)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	d := &stream.Dialer{LocalAddr: loopAddr()}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 3 { // the later requests reuse the connection
		req := strings.Repeat("x", 100_000*i)
		resp, err := client.Post("http://"+l.Addr().String()+"/path", "text/plain", strings.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("POST /path %d\n%s", len(req), body); string(got) != want {
			t.Fatalf("request %d: response of %d bytes, want %d", i, len(got), len(want))
		}
	}
}

// memDevices attaches two devices to a new in-memory network: the
// dialer's, 198.18.9.1, and the listener's, 198.18.9.2.
func memDevices(t *testing.T) (cdev, sdev *verbs.Context, n *transporttest.Network) {
	t.Helper()
	n = transporttest.NewNetwork(1)
	t.Cleanup(func() { n.Close() })
	var devs [2]*verbs.Context
	for i, a := range []string{"198.18.9.1:4791", "198.18.9.2:4791"} {
		d, err := verbs.NewContext(&verbs.Options{Conn: n.Attach(netip.MustParseAddrPort(a))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	return devs[0], devs[1], n
}

// memPair connects a Dialer and a Listener over the in-memory network,
// each on a device of its own.
func memPair(t *testing.T) (c, s *stream.Conn, cdev, sdev *verbs.Context, n *transporttest.Network) {
	t.Helper()
	cdev, sdev, n = memDevices(t)
	l, err := (&stream.ListenConfig{Device: sdev}).Listen(context.Background(), "198.18.9.2:7400")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	acc := make(chan *stream.Conn, 1)
	go func() {
		s, err := l.AcceptConn()
		if err != nil {
			t.Error(err)
		}
		acc <- s
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err = (&stream.Dialer{Device: cdev}).Dial(ctx, "198.18.9.2:7400")
	if err != nil {
		t.Fatal(err)
	}
	s = <-acc
	if s == nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	// The connection works before the fault.
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	return c, s, cdev, sdev, n
}

// waitErr waits for a blocked call's error; the limit only keeps a hang
// from stalling the test binary.
func waitErr(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		t.Logf("%s: %v", what, err)
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: still blocked after 2 minutes", what)
		return nil
	}
}

func blockedRead(c *stream.Conn) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		errc <- err
	}()
	return errc
}

func blockedWrite(c *stream.Conn) <-chan error {
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			if _, err := c.Write(buf); err != nil {
				errc <- err
				return
			}
		}
	}()
	return errc
}

// TestPeerKilled: the server's device goes away without a disconnect;
// the client's waiting Read, and a Write, fail instead of hanging.
func TestPeerKilled(t *testing.T) {
	c, _, _, sdev, _ := memPair(t)
	rerr := blockedRead(c)
	sdev.Close()
	waitErr(t, "Read from a killed peer", rerr)
	waitErr(t, "Write to a killed peer", blockedWrite(c))
}

// TestLinkDown: every packet is dropped from some point on, in the
// middle of a transfer; the writer and both readers fail instead of
// hanging.
func TestLinkDown(t *testing.T) {
	c, s, _, _, n := memPair(t)
	werr := blockedWrite(c)
	serr := make(chan error, 1)
	go func() { // s reads all it gets until it fails
		_, err := io.Copy(io.Discard, s)
		if err == nil {
			err = io.ErrUnexpectedEOF // a clean end is wrong here too
		}
		serr <- err
	}()
	time.Sleep(100 * time.Millisecond)
	n.SetFaults(transporttest.Faults{Loss: 1})
	waitErr(t, "writer", werr)
	waitErr(t, "writer's Read", blockedRead(c))
	if err := waitErr(t, "reader", serr); err == io.ErrUnexpectedEOF {
		t.Fatal("the reader saw a clean end of the stream")
	}
}
