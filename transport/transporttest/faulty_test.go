package transporttest

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// faultyPair opens two real UDP endpoints on loopback.
func faultyPair(t *testing.T) (a, b transport.Conn) {
	t.Helper()
	var err error
	if a, err = transport.Open(netip.MustParseAddrPort("127.77.9.1:4791"), nil); err != nil {
		t.Skipf("open a UDP endpoint on loopback: %v", err)
	}
	if b, err = transport.Open(netip.MustParseAddrPort("127.77.9.2:4791"), nil); err != nil {
		a.Close()
		t.Skipf("open a UDP endpoint on loopback: %v", err)
	}
	return a, b
}

// readPSNs reads until want packets arrived (or 5 s of silence) and
// returns their PSNs; it fails the test on a payload that is not intact.
func readPSNs(t *testing.T, c transport.Conn, want int) []int {
	t.Helper()
	var got []int
	msgs := make([]transport.Message, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < want {
			n, err := c.ReadBatch(msgs)
			if err != nil {
				return
			}
			for _, m := range msgs[:n] {
				psn := psnOf(m.Buf)
				if want := packetN(psn, 200); len(m.Buf) != len(want) || !bytes.Equal(m.Buf[:len(want)-wire.ICRCSize], want[:len(want)-wire.ICRCSize]) {
					t.Errorf("packet %d arrived changed", psn)
				}
				got = append(got, psn)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.Close()
		<-done
	}
	return got
}

// TestFaultyEgress: a FaultyConn over a real UDP endpoint loses,
// duplicates and reorders what it sends as its seed decides: the receiver
// gets exactly what the fault stages delivered, intact, and the same seed
// gives the same sequence again.
func TestFaultyEgress(t *testing.T) {
	run := func(seed uint64) ([]int, NetStats) {
		a, b := faultyPair(t)
		defer b.Close()
		fa := Faulty(a, seed, Faults{Loss: 0.2, Duplicate: 0.1, Reorder: 0.1, ReorderAfter: 3})
		defer fa.Close()
		const total = 600
		for i := 0; i < total; i += 20 {
			batch := make([]transport.Message, 20)
			for j := range batch {
				batch[j] = transport.Message{Buf: packetN(i+j, 200), Addr: b.LocalAddr()}
			}
			if n, err := fa.WriteBatch(batch); n != len(batch) || err != nil {
				t.Fatalf("WriteBatch: %d, %v", n, err)
			}
			time.Sleep(time.Millisecond) // never overflow the receive buffer
		}
		st := fa.FaultStats()
		return readPSNs(t, b, int(st.Delivered)), st
	}
	got, st := run(42)
	t.Logf("sent 600: lost %d, duplicated %d, reordered %d, delivered %d", st.Lost, st.Duplicated, st.Reordered, st.Delivered)
	if st.Sent != 600 || st.Lost == 0 || st.Duplicated == 0 || st.Reordered == 0 {
		t.Fatalf("fault stats %+v: want 600 sent and some of each fault", st)
	}
	if len(got) != int(st.Delivered) {
		t.Fatalf("received %d packets, the faults delivered %d", len(got), st.Delivered)
	}
	if slices.IsSorted(got) {
		t.Error("nothing arrived out of order")
	}
	again, _ := run(42)
	if !slices.Equal(got, again) {
		t.Error("the same seed gave another sequence")
	}
	other, _ := run(43)
	if slices.Equal(got, other) {
		t.Error("another seed gave the same sequence")
	}
}

// TestFaultyCorruptOnReceipt: packets picked for corruption are dropped
// and counted as ICRC drops; the rest arrive intact.
func TestFaultyCorruptOnReceipt(t *testing.T) {
	a, b := faultyPair(t)
	defer a.Close()
	fb := Faulty(b, 7, Faults{Corrupt: 0.3})
	defer fb.Close()
	const total = 400
	for i := range total {
		if _, err := a.WriteBatch([]transport.Message{{Buf: packetN(i, 200), Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond)
		}
	}
	// Read until every packet is accounted for: received or dropped.
	var got []int
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := fb.Stats()
		if len(got)+int(st.Drops[wire.ReasonICRC]) >= total || time.Now().After(deadline) {
			break
		}
		got = append(got, readPSNs(t, fb, 1)...)
	}
	drops := fb.Stats().Drops[wire.ReasonICRC]
	t.Logf("400 sent: %d received intact, %d corrupted and dropped by the ICRC check", len(got), drops)
	if len(got)+int(drops) != total || drops == 0 || len(got) == 0 {
		t.Fatalf("received %d, ICRC drops %d: want both non-zero, summing to %d", len(got), drops, total)
	}
	if c := fb.FaultStats().Corrupted; c != drops {
		t.Errorf("corrupted %d, ICRC drops %d: every corrupted packet must fail the ICRC check", c, drops)
	}
}
