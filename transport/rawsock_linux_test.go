//go:build linux

package transport

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// TestNoNetpollDeadline: an InlineReader's deadline in the past ends the
// receive loop's blocked ReadBatch at once (how inline receive takes the
// socket over), and a zero deadline lets it block again and get the next
// datagram; the inline reader meanwhile gets what arrives.
func TestNoNetpollDeadline(t *testing.T) {
	a := open(t, addrA, &Options{NoNetpoll: true})
	b := open(t, addrB, &Options{NoNetpoll: true})
	in, ok := b.(*udpConn).InlineReader()
	if !ok {
		t.Fatal("no InlineReader")
	}
	errc := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(make([]Message, 4))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if err := in.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("ReadBatch after a past deadline: %v, want os.ErrDeadlineExceeded", err)
		}
		t.Logf("ReadBatch ended %v after the deadline was set", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("ReadBatch still blocked 5 s after a deadline in the past")
	}

	// The program's thread reads inline.
	if n, err := a.WriteBatch([]Message{{Buf: testPacket(wire.SendOnly, 1, 1), Addr: addrB}}); n != 1 || err != nil {
		t.Fatalf("WriteBatch: %d, %v", n, err)
	}
	msgs := make([]Message, 4)
	got := 0
	for end := time.Now().Add(5 * time.Second); got == 0 && time.Now().Before(end); {
		n, err := in.TryReadBatch(msgs)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if got != 1 {
		t.Fatalf("inline reads got %d datagrams, want 1", got)
	}

	// Back to the loop.
	if err := in.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		n, err := b.ReadBatch(make([]Message, 4))
		if err == nil && n != 1 {
			err = errors.New("not one datagram")
		}
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if n, err := a.WriteBatch([]Message{{Buf: testPacket(wire.SendOnly, 1, 2), Addr: addrB}}); n != 1 || err != nil {
		t.Fatalf("WriteBatch: %d, %v", n, err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("ReadBatch with the deadline cleared: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadBatch did not get the datagram sent after the deadline was cleared")
	}
}
