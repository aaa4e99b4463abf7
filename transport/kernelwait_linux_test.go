package transport

import (
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// A kernel-waiting reader on one P, woken by each datagram, wakes the
// goroutine that sends the next one; that goroutine must run before the
// reader sleeps again. If it did not, the datagram it sends would come
// only after the reader's slice had expired: one expired slice per lost
// turn (about one round in 61 with a single runtime.Gosched, whose
// fairness rule hands the P straight back to the yielding goroutine).
// So a ping-pong here sleeps in the kernel every round and lets no slice
// expire, except when the kernel itself holds a datagram back (on a loaded
// machine loopback delivery can wait for ksoftirqd): a few in thousands,
// where the lost turns cost one in 61.
func TestKernelWaitPingPong(t *testing.T) {
	a := open(t, addrA, nil)
	b := open(t, addrB, nil)
	if err := b.(*udpConn).SetKernelWait(time.Minute); err != nil {
		t.Fatalf("SetKernelWait: %v", err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	const rounds = 3000
	got := make(chan uint32, 1)
	errc := make(chan error, 1)
	go func() { // the reader: every datagram wakes the sender
		in := make([]Message, b.BatchSize())
		for n := 0; n < rounds; {
			k, err := b.ReadBatch(in)
			if err != nil {
				errc <- err
				return
			}
			for i := range k {
				var p wire.Packet
				if err := p.Parse(in[i].Buf); err != nil {
					errc <- err
					return
				}
				got <- uint32(p.BTH.PSN())
				n++
			}
		}
		errc <- nil
	}()
	out := []Message{{Addr: addrB}}
	for i := range rounds {
		out[0].Buf = testPacket(wire.SendOnly, uint32(i), 64)
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		select {
		case psn := <-got:
			if psn != uint32(i) {
				t.Fatalf("round %d: received PSN %d", i, psn)
			}
		case err := <-errc:
			t.Fatalf("round %d: reader stopped: %v", i, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	s := b.Stats()
	if s.KernelWaits < rounds/2 {
		t.Errorf("%d kernel waits in %d rounds: the reader did not sleep in the kernel", s.KernelWaits, rounds)
	}
	if s.KernelWaitSlices > rounds/300 {
		t.Errorf("%d kernel-wait slices expired in %d rounds, want (nearly) 0: the woken sender did not run before the reader slept again", s.KernelWaitSlices, rounds)
	}
	t.Logf("%d rounds: %d kernel waits (%d expired), %d read calls", rounds, s.KernelWaits, s.KernelWaitSlices, s.ReadCalls)
}

// A kernel-waiting reader with nothing to read keeps its P but lets the
// other goroutines run (between slices), goes back to the runtime's poller
// once its window has passed, and is ended by Close.
func TestKernelWaitIdle(t *testing.T) {
	a := open(t, addrA, nil)
	b := open(t, addrB, nil)
	const window = 30 * time.Millisecond
	if err := b.(*udpConn).SetKernelWait(window); err != nil {
		t.Fatalf("SetKernelWait: %v", err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	out := []Message{{Buf: testPacket(wire.SendOnly, 1, 64), Addr: addrB}}
	if _, err := a.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	in := make([]Message, b.BatchSize())
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := b.ReadBatch(in); err != nil {
				errc <- err
				return
			}
		}
	}()
	// A timer and this goroutine still run while the reader waits.
	time.Sleep(5 * window)
	waits := b.Stats().KernelWaits
	if waits == 0 {
		t.Fatal("the reader never slept in the kernel after a datagram")
	}
	// The window has passed: the reader sleeps in the poller now, so
	// the count stays.
	time.Sleep(5 * window)
	if w := b.Stats().KernelWaits; w != waits {
		t.Errorf("kernel waits went on after the window: %d, then %d", waits, w)
	}
	// A datagram opens the window again, and Close ends the wait.
	if _, err := a.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	for b.Stats().PacketsIn < 2 {
		time.Sleep(time.Millisecond)
	}
	b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("Close did not end a kernel-waiting ReadBatch")
	}
}
