package transporttest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
	aToB  = Dir{addrA, addrB}
)

// packetN builds an RC SEND_ONLY packet whose PSN is i and whose payload
// of size bytes is patterned by i.
func packetN(i, size int) []byte {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.SendOnly, PKey: wire.PKeyDefault, DestQP: 0x11, PSN: wire.PSN(i)}}
	payload := make([]byte, size)
	for j := range payload {
		payload[j] = byte(i + j)
	}
	return wire.AppendPacket(nil, &h, payload)
}

func psnOf(b []byte) int { return int(wire.BTH(b).PSN()) }

// arrival is one packet a collector read.
type arrival struct {
	psn  int
	at   time.Duration // since the collector started
	from netip.AddrPort
	buf  []byte
}

// collector reads an endpoint on its own goroutine until it is closed.
type collector struct {
	mu    sync.Mutex
	got   []arrival
	err   error
	done  chan struct{}
	start time.Time
}

func collect(c transport.Conn) *collector {
	r := &collector{done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(r.done)
		msgs := make([]transport.Message, 16)
		for {
			n, err := c.ReadBatch(msgs)
			r.mu.Lock()
			if err != nil {
				r.err = err
				r.mu.Unlock()
				return
			}
			for _, m := range msgs[:n] {
				r.got = append(r.got, arrival{psnOf(m.Buf), time.Since(r.start), m.Addr, bytes.Clone(m.Buf)})
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *collector) arrivals() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *collector) psns() []int {
	var out []int
	for _, a := range r.arrivals() {
		out = append(out, a.psn)
	}
	return out
}

// sendN writes packets 0..n-1 from a to b, in batches of 10.
func sendN(t *testing.T, a transport.Conn, n, size int) {
	t.Helper()
	var batch []transport.Message
	for i := range n {
		batch = append(batch, transport.Message{Buf: packetN(i, size), Addr: addrB})
		if len(batch) == 10 || i == n-1 {
			if k, err := a.WriteBatch(batch); k != len(batch) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			batch = batch[:0]
		}
	}
}

// run sends n packets from A to B over a network with faults f (and seed),
// waits (in fake time) for everything to arrive, and returns what B read
// and the stats. It runs inside a synctest bubble.
func run(t *testing.T, seed uint64, f Faults, n int, setup func(*Network)) ([]int, NetStats, transport.Stats) {
	var psns []int
	var ns NetStats
	var st transport.Stats
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(seed)
		nw.SetFaults(f)
		if setup != nil {
			setup(nw)
		}
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		sendN(t, a, n, 100)
		time.Sleep(time.Second) // past every delay
		synctest.Wait()
		psns, ns, st = r.psns(), nw.Stats(), b.Stats()
		nw.Close()
		<-r.done
		if !errors.Is(r.err, net.ErrClosed) {
			t.Errorf("reader ended with %v, want net.ErrClosed", r.err)
		}
	})
	return psns, ns, st
}

func TestPerfectLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(1)
		defer nw.Close()
		a, b := nw.Attach(addrA), nw.Attach(netip.MustParseAddrPort("[::ffff:10.0.0.2]:0"))
		if b.LocalAddr() != addrB {
			t.Errorf("LocalAddr = %v, want %v", b.LocalAddr(), addrB)
		}
		r := collect(b)
		msgs := []transport.Message{{Buf: packetN(1, 4096), Addr: addrB}, {Buf: packetN(2, 3), Addr: addrB}}
		if _, err := a.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := r.arrivals()
		if len(got) != 2 {
			t.Fatalf("got %d packets, want 2", len(got))
		}
		for i, g := range got {
			if !bytes.Equal(g.buf, msgs[i].Buf) || g.from != addrA {
				t.Errorf("packet %d differs or comes from %v", i, g.from)
			}
			if _, ok := wire.VerifyICRC(g.buf, addrA, addrB); !ok {
				t.Errorf("packet %d: ICRC does not verify", i)
			}
		}
		sa, sb := a.Stats(), b.Stats()
		if sa.PacketsOut != 2 || sb.PacketsIn != 2 || sa.BytesOut != sb.BytesIn {
			t.Errorf("stats %+v %+v", sa, sb)
		}
	})
}

func TestLoss(t *testing.T) {
	f := Faults{Loss: 0.3}
	got, ns, _ := run(t, 7, f, 1000, nil)
	if len(got) < 600 || len(got) > 800 || ns.Lost != uint64(1000-len(got)) {
		t.Errorf("received %d of 1000 with 30%% loss; stats %+v", len(got), ns)
	}
	again, _, _ := run(t, 7, f, 1000, nil)
	if !slices.Equal(got, again) {
		t.Error("same seed, different packets lost")
	}
	other, _, _ := run(t, 8, f, 1000, nil)
	if slices.Equal(got, other) {
		t.Error("different seeds, same packets lost")
	}
}

// bursts returns the lengths of the runs of lost PSNs in 0..n-1.
func bursts(got []int, n int) []int {
	seen := make([]bool, n)
	for _, p := range got {
		seen[p] = true
	}
	var out []int
	run := 0
	for _, s := range append(seen, true) {
		if !s {
			run++
		} else if run > 0 {
			out = append(out, run)
			run = 0
		}
	}
	return out
}

func TestBurstLoss(t *testing.T) {
	f := Faults{Burst: GilbertElliott{P: 0.02, R: 0.25, LossBad: 1}}
	got, ns, _ := run(t, 3, f, 2000, nil)
	b := bursts(got, 2000)
	lost := 0
	for _, x := range b {
		lost += x
	}
	if lost == 0 || uint64(lost) != ns.Lost {
		t.Fatalf("lost %d, stats %+v", lost, ns)
	}
	mean := float64(lost) / float64(len(b))
	t.Logf("%d lost in %d bursts, mean burst %.1f (model: %.1f)", lost, len(b), mean, 1/f.Burst.R)
	if mean < 2 {
		t.Errorf("mean burst length %.1f, want about 4", mean)
	}
	again, _, _ := run(t, 3, f, 2000, nil)
	if !slices.Equal(got, again) {
		t.Error("same seed, different bursts")
	}
}

func TestDropNext(t *testing.T) {
	got, ns, _ := run(t, 1, Faults{}, 10, func(nw *Network) { nw.DropNext(aToB, 3) })
	if want := []int{3, 4, 5, 6, 7, 8, 9}; !slices.Equal(got, want) || ns.Lost != 3 {
		t.Errorf("got %v (stats %+v), want %v", got, ns, want)
	}
}

func TestFilter(t *testing.T) {
	got, ns, _ := run(t, 1, Faults{}, 10, func(nw *Network) {
		nw.SetFilter(func(d Dir, pkt []byte) Verdict {
			if d != aToB {
				t.Errorf("filter saw %v", d)
			}
			if psnOf(pkt)%2 == 0 {
				return Drop
			}
			return Pass
		})
	})
	if want := []int{1, 3, 5, 7, 9}; !slices.Equal(got, want) || ns.Filtered != 5 {
		t.Errorf("got %v (stats %+v), want %v", got, ns, want)
	}
}

func TestDirFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(1)
		defer nw.Close()
		nw.SetDirFaults(aToB, Faults{Loss: 1})
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		ra, rb := collect(a), collect(b)
		a.WriteBatch([]transport.Message{{Buf: packetN(1, 10), Addr: addrB}})
		b.WriteBatch([]transport.Message{{Buf: packetN(2, 10), Addr: addrA}})
		synctest.Wait()
		if got := rb.psns(); len(got) != 0 {
			t.Errorf("A->B (loss 1) delivered %v", got)
		}
		if got := ra.psns(); !slices.Equal(got, []int{2}) {
			t.Errorf("B->A delivered %v, want [2]", got)
		}
	})
}

func TestDuplicate(t *testing.T) {
	got, ns, _ := run(t, 5, Faults{Duplicate: 0.2}, 500, nil)
	if ns.Duplicated < 60 || ns.Duplicated > 140 || len(got) != 500+int(ns.Duplicated) {
		t.Errorf("received %d, stats %+v", len(got), ns)
	}
	count := map[int]int{}
	for _, p := range got {
		count[p]++
	}
	for i := range 500 {
		if count[i] < 1 || count[i] > 2 {
			t.Errorf("packet %d arrived %d times", i, count[i])
		}
	}
}

func TestCorrupt(t *testing.T) {
	got, ns, st := run(t, 9, Faults{Corrupt: 0.25}, 1000, nil)
	if ns.Corrupted < 150 || ns.Corrupted > 350 {
		t.Errorf("corrupted %d of 1000 at 25%%", ns.Corrupted)
	}
	if st.Drops[wire.ReasonICRC] != ns.Corrupted || len(got) != 1000-int(ns.Corrupted) || st.PacketsIn != uint64(len(got)) {
		t.Errorf("received %d; ICRC drops %d; network %+v", len(got), st.Drops[wire.ReasonICRC], ns)
	}
	if !slices.IsSorted(got) {
		t.Error("corruption reordered packets")
	}
}

// TestCorruptDelivered checks that what arrives is intact.
func TestCorruptDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(2)
		defer nw.Close()
		nw.SetFaults(Faults{Corrupt: 0.5})
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		sendN(t, a, 200, 300)
		synctest.Wait()
		for _, g := range r.arrivals() {
			want := packetN(g.psn, 300)
			wire.PutICRC(want, addrA, addrB, 0)
			if !bytes.Equal(g.buf, want) {
				t.Fatalf("packet %d arrived altered", g.psn)
			}
		}
	})
}

func TestReorder(t *testing.T) {
	f := Faults{Reorder: 0.1, ReorderAfter: 3}
	got, ns, _ := run(t, 11, f, 500, nil)
	if len(got) != 500 {
		t.Fatalf("received %d of 500 (stats %+v)", len(got), ns)
	}
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	for i, p := range sorted {
		if p != i {
			t.Fatalf("packet %d missing or duplicated", i)
		}
	}
	// A held packet arrives after the three that overtook it.
	late := 0
	for i, p := range got {
		if i > 0 && p < got[i-1] {
			late++
		}
	}
	if ns.Reordered < 25 || ns.Reordered > 80 || late == 0 {
		t.Errorf("held %d, %d arrivals out of order", ns.Reordered, late)
	}
	if got[0] == 0 && slices.IsSorted(got) {
		t.Error("nothing reordered")
	}
	again, _, _ := run(t, 11, f, 500, nil)
	if !slices.Equal(got, again) {
		t.Error("same seed, different order")
	}
}

func TestReorderAfterK(t *testing.T) {
	// Hold exactly one packet (Reorder 1 for it, then 0): it is released
	// right after the second packet that overtakes it.
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(1)
		defer nw.Close()
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		nw.SetFaults(Faults{Reorder: 1, ReorderAfter: 2})
		a.WriteBatch([]transport.Message{{Buf: packetN(0, 10), Addr: addrB}})
		nw.SetFaults(Faults{})
		sendN(t, a, 4, 10) // PSNs 0..3 again
		synctest.Wait()
		if got, want := r.psns(), []int{0, 1, 0, 2, 3}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestReorderDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(1)
		defer nw.Close()
		nw.SetFaults(Faults{Reorder: 1, ReorderAfter: 100, ReorderDelay: 10 * time.Millisecond})
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		a.WriteBatch([]transport.Message{{Buf: packetN(7, 10), Addr: addrB}})
		time.Sleep(9 * time.Millisecond)
		synctest.Wait()
		if got := r.psns(); len(got) != 0 {
			t.Fatalf("held packet arrived early: %v", got)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		got := r.arrivals()
		if len(got) != 1 || got[0].psn != 7 || got[0].at != 10*time.Millisecond {
			t.Errorf("got %+v, want packet 7 at 10ms", got)
		}
	})
}

func TestDelayJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(4)
		defer nw.Close()
		nw.SetFaults(Faults{Delay: 5 * time.Millisecond, Jitter: 2 * time.Millisecond})
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		sendN(t, a, 100, 10)
		time.Sleep(4 * time.Millisecond)
		synctest.Wait()
		if n := len(r.psns()); n != 0 {
			t.Fatalf("%d packets arrived before the 5ms delay", n)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		got := r.arrivals()
		if len(got) != 100 {
			t.Fatalf("received %d of 100", len(got))
		}
		spread := map[time.Duration]bool{}
		for _, g := range got {
			if g.at < 5*time.Millisecond || g.at >= 7*time.Millisecond {
				t.Errorf("packet %d arrived at %v, want [5ms, 7ms)", g.psn, g.at)
			}
			spread[g.at] = true
		}
		if len(spread) < 10 {
			t.Errorf("only %d distinct arrival times: no jitter?", len(spread))
		}
	})
}

// TestDelayKeepsOrder: a constant delay (no jitter) delivers the packets
// of a direction in the order they were sent, even those sent at the same
// instant, whose timers are due at the same instant. (A regression test:
// each packet used to have its own timer, and timers due together fire in
// no particular order, so a perfect delayed link reordered.)
func TestDelayKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(3)
		defer nw.Close()
		nw.SetFaults(Faults{Delay: 10 * time.Microsecond})
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		for range 5 {
			sendN(t, a, 64, 10)
			time.Sleep(3 * time.Microsecond)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		got := r.arrivals()
		if len(got) != 5*64 {
			t.Fatalf("received %d of %d", len(got), 5*64)
		}
		for i, g := range got {
			if g.psn != i%64 {
				t.Fatalf("arrival %d is packet %d, want %d: reordered", i, g.psn, i%64)
			}
			if want := time.Duration(i/64)*3*time.Microsecond + 10*time.Microsecond; g.at != want {
				t.Fatalf("packet %d arrived at %v, want %v", i, g.at, want)
			}
		}
	})
}

// TestCloseWithPacketsInFlight closes a network with delayed and held
// packets pending: the bubble ends with no goroutine or timer left.
func TestCloseWithPacketsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(1)
		nw.SetFaults(Faults{Delay: time.Hour, Reorder: 0.5, ReorderDelay: 2 * time.Hour})
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		sendN(t, a, 50, 10)
		synctest.Wait()
		nw.Close()
		<-r.done
		if !errors.Is(r.err, net.ErrClosed) {
			t.Errorf("reader: %v", r.err)
		}
		if _, err := a.WriteBatch([]transport.Message{{Buf: packetN(1, 1), Addr: addrB}}); !errors.Is(err, net.ErrClosed) {
			t.Errorf("WriteBatch after Close: %v", err)
		}
		if len(r.psns()) != 0 {
			t.Error("packets delivered after Close")
		}
	})
}

func TestEndpointClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(1)
		defer nw.Close()
		a, b := nw.Attach(addrA), nw.Attach(addrB)
		r := collect(b)
		synctest.Wait()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		<-r.done
		if !errors.Is(r.err, net.ErrClosed) {
			t.Errorf("reader: %v", r.err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		// B's address is free again; packets to a closed endpoint have
		// no route.
		a.WriteBatch([]transport.Message{{Buf: packetN(1, 1), Addr: addrB}})
		if ns := nw.Stats(); ns.NoRoute != 1 {
			t.Errorf("stats %+v, want 1 NoRoute", ns)
		}
		nw.Attach(addrB).Close()
	})
}

func TestWriteErrors(t *testing.T) {
	nw := NewNetwork(1)
	defer nw.Close()
	a := nw.Attach(addrA)
	good := transport.Message{Buf: packetN(1, 1), Addr: addrB}
	for _, m := range []transport.Message{
		{Buf: make([]byte, 8), Addr: addrB},
		{Buf: packetN(1, 1)},
		{Buf: packetN(1, 1), Addr: netip.MustParseAddrPort("[fd00::1]:4791")},
	} {
		if n, err := a.WriteBatch([]transport.Message{good, m}); n != 1 || err == nil {
			t.Errorf("WriteBatch = %d, %v; want 1 and an error", n, err)
		}
	}
}

func TestAttachPanics(t *testing.T) {
	nw := NewNetwork(1)
	nw.Attach(addrA)
	for _, addr := range []netip.AddrPort{addrA, {}, netip.MustParseAddrPort("0.0.0.0:1")} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Attach(%v) did not panic", addr)
				}
			}()
			nw.Attach(addr)
		}()
	}
}

// TestDeterministic runs every fault at once, twice: same seed, same
// arrivals, in the same order, at the same (fake) times.
func TestDeterministic(t *testing.T) {
	f := Faults{Loss: 0.05, Burst: GilbertElliott{P: 0.01, R: 0.5, LossBad: 0.8}, Duplicate: 0.05,
		Corrupt: 0.05, Reorder: 0.05, ReorderAfter: 2, ReorderDelay: time.Millisecond,
		Delay: 100 * time.Microsecond, Jitter: 50 * time.Microsecond}
	trace := func() []string {
		var out []string
		synctest.Test(t, func(t *testing.T) {
			nw := NewNetwork(42)
			defer nw.Close()
			nw.SetFaults(f)
			a, b := nw.Attach(addrA), nw.Attach(addrB)
			r := collect(b)
			for i := range 300 {
				a.WriteBatch([]transport.Message{{Buf: packetN(i, 64), Addr: addrB}})
				time.Sleep(10 * time.Microsecond)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			for _, g := range r.arrivals() {
				out = append(out, time.Duration(g.at).String()+"/"+string(binary.BigEndian.AppendUint32(nil, uint32(g.psn))))
			}
		})
		return out
	}
	one, two := trace(), trace()
	if len(one) < 250 || !slices.Equal(one, two) {
		t.Errorf("runs differ (%d vs %d arrivals)", len(one), len(two))
	}
}
