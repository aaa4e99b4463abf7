package stream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/stream"
)

// loopAddr returns a random 127.110-127.129 address: test binaries of
// other packages count loopback addresses from fixed starts, and run in
// parallel with this one.
func loopAddr() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(110 + rand.IntN(20)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
}

// listen listens on a fresh loopback address with lc.
func listen(t testing.TB, lc *stream.ListenConfig) *stream.Listener {
	t.Helper()
	var err error
	for range 20 {
		var l *stream.Listener
		if l, err = lc.Listen(context.Background(), netip.AddrPortFrom(loopAddr(), 7400).String()); err == nil {
			t.Cleanup(func() { l.Close() })
			return l
		}
	}
	t.Fatal(err)
	return nil
}

// pair returns a dialed and an accepted end.
func pair(t testing.TB, d *stream.Dialer, lc *stream.ListenConfig) (client, server *stream.Conn) {
	t.Helper()
	if lc == nil {
		lc = &stream.ListenConfig{}
	}
	if d == nil {
		d = &stream.Dialer{}
	}
	l := listen(t, lc)
	if d.Device == nil && !d.LocalAddr.IsValid() {
		d.LocalAddr = loopAddr()
	}
	type res struct {
		c   *stream.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := l.AcceptConn()
		acc <- res{c, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		c.Close()
		r.c.Close()
	})
	return c, r.c
}

func random(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
	return b
}

func TestRoundTrip(t *testing.T) {
	c, s := pair(t, nil, nil)
	if c.LocalAddr().Network() != "rdma" || c.RemoteAddr().String() != s.LocalAddr().String() {
		t.Errorf("addresses: client %v→%v, server %v→%v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	for _, dir := range []struct {
		name string
		w, r *stream.Conn
	}{{"client→server", c, s}, {"server→client", s, c}} {
		msg := []byte("hello, " + dir.name)
		if n, err := dir.w.Write(msg); n != len(msg) || err != nil {
			t.Fatalf("%s: Write = %d, %v", dir.name, n, err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(dir.r, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%s: read %q, %v", dir.name, got, err)
		}
	}
}

// TestLarge moves 40 MB each way at once, through Write/Read on one
// side and io.Copy (ReadFrom, WriteTo) on the other, over small rings.
func TestLarge(t *testing.T) {
	c, s := pair(t, &stream.Dialer{Slots: 4, SlotSize: 64 << 10}, &stream.ListenConfig{Slots: 3, SlotSize: 100_000})
	a, b := random(40<<20+7, 1), random(40<<20-13, 2)
	errc := make(chan error, 2)
	go func() { // client: Write a, then CloseWrite
		for p := a; len(p) > 0; {
			n, err := c.Write(p[:min(len(p), 1+rand.IntN(300_000))])
			if err != nil {
				errc <- err
				return
			}
			p = p[n:]
		}
		errc <- c.CloseWrite()
	}()
	go func() { // server: io.Copy b (ReadFrom), then CloseWrite
		_, err := io.Copy(s, bytes.NewReader(b))
		if err == nil {
			err = s.CloseWrite()
		}
		errc <- err
	}()
	var fromClient, fromServer bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(&fromClient, s) // WriteTo
		done <- err
	}()
	if _, err := io.Copy(&fromServer, struct{ io.Reader }{c}); err != nil { // plain Reads
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(fromClient.Bytes(), a) || !bytes.Equal(fromServer.Bytes(), b) {
		t.Fatalf("data differs: got %d and %d bytes, want %d and %d", fromClient.Len(), fromServer.Len(), len(a), len(b))
	}
}

// TestHalfClose: after CloseWrite the peer reads to io.EOF, and can go
// on writing to us.
func TestHalfClose(t *testing.T) {
	c, s := pair(t, nil, nil)
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("Write after CloseWrite succeeded")
	}
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "request" {
		t.Fatalf("server read %q, %v", got, err)
	}
	if n, err := s.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF = %d, %v", n, err)
	}
	if _, err := s.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	got, err = io.ReadAll(c)
	if err != nil || string(got) != "response" {
		t.Fatalf("client read %q, %v", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}

func TestDeadlines(t *testing.T) {
	c, s := pair(t, nil, nil)
	// A past deadline fails at once, data or not.
	if _, err := c.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(-time.Second))
	if n, err := s.Read(make([]byte, 10)); n != 0 || !isTimeout(err) {
		t.Fatalf("Read with a past deadline = %d, %v; want a timeout", n, err)
	}
	s.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(s, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	// A deadline set while Read waits unblocks it.
	errc := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 10))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if err := <-errc; !isTimeout(err) {
		t.Fatalf("blocked Read: %v; want a timeout", err)
	}
	// A blocked Write (the peer does not read) times out too.
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 1<<20)
	var err error
	for err == nil {
		_, err = c.Write(buf)
	}
	if !isTimeout(err) {
		t.Fatalf("blocked Write: %v; want a timeout", err)
	}
}

// TestCloseUnblocks: Close makes a blocked Read and a blocked Write
// return errors matching net.ErrClosed.
func TestCloseUnblocks(t *testing.T) {
	c, s := pair(t, nil, nil)
	rerr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10)) // the server never writes
		rerr <- err
	}()
	werr := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for { // the server never reads: the ring fills and Write blocks
			if _, err := c.Write(buf); err != nil {
				werr <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-rerr:
		t.Fatalf("Read returned before Close: %v", err)
	case err := <-werr:
		t.Fatalf("Write returned before Close: %v", err)
	default:
	}
	c.Close()
	if err := <-rerr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked Read after Close: %v; want net.ErrClosed", err)
	}
	if err := <-werr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked Write after Close: %v; want net.ErrClosed", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v; want net.ErrClosed", err)
	}
	_ = s
}

// TestPeerClose: the peer's Close without pending data ends our Read
// with io.EOF (its FIN), and a later Write fails.
func TestPeerClose(t *testing.T) {
	c, s := pair(t, nil, nil)
	c.Write([]byte("last words"))
	c.Close()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v", got, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Write([]byte("x"))
		if errors.Is(err, stream.ErrPeerClosed) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Write to a closed peer: %v; want ErrPeerClosed", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAbort: a connection ended by Abort sends no FIN: the peer reads what
// was written, then an error matching ErrPeerClosed instead of io.EOF; an
// Abort from another goroutine unblocks a Write waiting for credit.
func TestAbort(t *testing.T) {
	c, s := pair(t, &stream.Dialer{}, &stream.ListenConfig{Slots: 1, SlotSize: 4096})
	data := random(4096, 7)
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() { // the peer's ring is full: this Write waits for credit
		_, err := c.Write(data)
		blocked <- err
	}()
	time.Sleep(50 * time.Millisecond)
	c.Abort()
	if err := <-blocked; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write blocked during Abort: %v, want net.ErrClosed", err)
	}
	got, err := io.ReadAll(s)
	if !errors.Is(err, stream.ErrPeerClosed) {
		t.Errorf("Read after the peer's Abort: %v, want ErrPeerClosed", err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("read %d bytes, want the %d written before Abort", len(got), len(data))
	}
}

// TestDialNoListener: a port nobody listens on is refused at once.
func TestDialNoListener(t *testing.T) {
	l := listen(t, &stream.ListenConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := l.Addr().(stream.Addr).AddrPort
	_, err := (&stream.Dialer{LocalAddr: loopAddr()}).Dial(ctx, netip.AddrPortFrom(a.Addr(), a.Port()+1).String())
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Dial to a port nobody listens on: %v (context %v)", err, ctx.Err())
	}
}

// TestFinMismatch: a FIN whose CRC-32C or length differs from what
// arrived is an error to the reader, not io.EOF.
func TestFinMismatch(t *testing.T) {
	for _, lengthToo := range []bool{false, true} {
		c, s := pair(t, nil, nil)
		c.Write([]byte("some data"))
		stream.CorruptFin(c, lengthToo)
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(s)
		if err == nil || !strings.Contains(err.Error(), "integrity check failed") {
			t.Fatalf("read %q, %v; want an integrity error", got, err)
		}
		if _, err2 := s.Read(make([]byte, 1)); err2 == nil || err2 == io.EOF {
			t.Fatalf("Read after the failed check: %v; want the error again", err2)
		}
		t.Log(err)
	}
}

// TestPSK: with the same pre-shared key on both ends the ring fits the
// REQ and the stream works; with another key the dial is refused.
func TestPSK(t *testing.T) {
	key := []byte("0123456789abcdef-stream-test-key")
	c, s := pair(t, &stream.Dialer{PSK: key}, &stream.ListenConfig{PSK: key})
	c.Write([]byte("authenticated"))
	c.CloseWrite()
	if got, err := io.ReadAll(s); err != nil || string(got) != "authenticated" {
		t.Fatalf("read %q, %v", got, err)
	}

	l := listen(t, &stream.ListenConfig{PSK: key})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := (&stream.Dialer{LocalAddr: loopAddr(), PSK: []byte("another key, 16 bytes or more")}).Dial(ctx, l.Addr().String())
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Dial with the wrong key: %v (context %v); want a refusal", err, ctx.Err())
	}
	t.Log(err)
}

// TestDefaultSegments: two ends that open their own devices on loopback
// agree on large segments by default; NoSegments on either end keeps the
// path MTU, and data moves either way.
func TestDefaultSegments(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     *stream.Dialer
		lc    *stream.ListenConfig
		large bool
	}{
		{"default", nil, nil, true},
		{"dialer NoSegments", &stream.Dialer{SegmentSize: stream.NoSegments}, nil, false},
		{"listener NoSegments", nil, &stream.ListenConfig{SegmentSize: stream.NoSegments}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, sv := pair(t, c.d, c.lc)
			if got := stream.SegmentSize(cl); (got > 0) != c.large {
				t.Errorf("client segment size %d, want large segments %v", got, c.large)
			}
			want := random(300<<10, 9)
			go func() {
				cl.Write(want)
				cl.CloseWrite()
			}()
			got, err := io.ReadAll(sv)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, %v; want %d bytes intact", len(got), err, len(want))
			}
		})
	}
}
