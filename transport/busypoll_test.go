package transport

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// With busy polling on, a ping-pong of packets goes through (the reader
// spins in its system-call loop, yielding, instead of sleeping), the
// steady state still allocates nothing, and Close still ends a ReadBatch
// that is spinning.
func TestBusyPoll(t *testing.T) {
	a := open(t, addrA, nil)
	b := open(t, addrB, nil)
	for _, c := range []Conn{a, b} {
		c.(*udpConn).SetBusyPoll(time.Second)
	}
	// Run on one P, as a process pinned to one core does: the spinning
	// reader must leave the writer room to run.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	out := []Message{{Buf: testPacket(wire.SendOnly, 1, 64), Addr: addrB}}
	in := make([]Message, b.BatchSize())
	for i := range 100 {
		out[0].Buf = testPacket(wire.SendOnly, uint32(i), 64)
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		got := readN(t, b, 1)
		if !bytes.Equal(got[0].Buf[:len(got[0].Buf)-wire.ICRCSize], out[0].Buf[:len(out[0].Buf)-wire.ICRCSize]) {
			t.Fatalf("packet %d differs", i)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ReadBatch(in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per busy-polled packet, want 0", allocs)
	}
	// b's reader is now inside its busy window (the last packet just
	// arrived): Close must still end it.
	errc := make(chan error, 1)
	go func() { _, err := b.ReadBatch(in); errc <- err }()
	runtime.Gosched()
	b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("Close did not end a busy-polling ReadBatch")
	}
}
