package stream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/stream"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// memDial dials lc's listener on sdev from cdev with d; err is the
// dial's.
func memDial(t *testing.T, d *stream.Dialer, lc *stream.ListenConfig, cdev, sdev *verbs.Context) (c, s *stream.Conn, err error) {
	t.Helper()
	d.Device, lc.Device = cdev, sdev
	l, err := lc.Listen(context.Background(), "198.18.9.2:7400")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	acc := make(chan *stream.Conn, 1)
	go func() {
		s, _ := l.AcceptConn() // nil after Close
		acc <- s
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if c, err = d.Dial(ctx, "198.18.9.2:7400"); err != nil {
		return nil, nil, err
	}
	if s = <-acc; s == nil {
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c, s, nil
}

// exchange writes a to s and b to c at once, each followed by
// CloseWrite, and checks that each end reads the other's bytes to
// io.EOF.
func exchange(t *testing.T, c, s *stream.Conn, a, b []byte) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	got := make([][]byte, 2)
	for i, e := range []struct {
		w, r *stream.Conn
		data []byte
	}{{c, s, a}, {s, c, b}} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, errs[2*i] = e.w.Write(e.data); errs[2*i] == nil {
				errs[2*i] = e.w.CloseWrite()
			}
		}()
		go func() {
			defer wg.Done()
			got[i], errs[2*i+1] = io.ReadAll(e.r)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("data differs: read %d and %d bytes, want %d and %d intact", len(got[0]), len(got[1]), len(a), len(b))
	}
}

// dropFirstWrite drops the first transmission of the first packet that
// starts a multi-packet RDMA WRITE, in each direction: the first data
// packet of either end when each writes one full chunk first.
func dropFirstWrite(n *transporttest.Network) {
	var mu sync.Mutex
	dropped := map[transporttest.Dir]bool{}
	n.SetFilter(func(d transporttest.Dir, b []byte) transporttest.Verdict {
		var p wire.Packet
		if p.Parse(b) != nil || !p.BTH.Opcode().Has(wire.IsWrite|wire.IsFirst) {
			return transporttest.Pass
		}
		mu.Lock()
		defer mu.Unlock()
		if dropped[d] {
			return transporttest.Pass
		}
		dropped[d] = true
		return transporttest.Drop
	})
}

// TestSelectiveRetransmitAgreement: a dialer and a listener of this
// version agree on "tbs2" and both QPs do selective retransmission from
// the first data packet on (the responder holds the packets after a lost
// first one); a "tbs1" dialer (an older tbrdma) is served without it; a
// "tbs1"-only listener (an older tbrdma) refuses a "tbs2" dialer.
func TestSelectiveRetransmitAgreement(t *testing.T) {
	for _, tc := range []struct {
		name        string
		oldDialer   bool
		oldListener bool
		sr, refused bool
	}{
		{name: "tbs2", sr: true},
		{name: "tbs1 dialer", oldDialer: true},
		{name: "tbs1 dialer and listener", oldDialer: true, oldListener: true},
		{name: "tbs1 listener", oldListener: true, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cdev, sdev, n := memDevices(t)
			d, lc := &stream.Dialer{}, &stream.ListenConfig{}
			if tc.oldDialer {
				stream.DialTBS1(d)
			}
			if tc.oldListener {
				stream.ListenTBS1(lc)
			}
			dropFirstWrite(n)
			c, s, err := memDial(t, d, lc, cdev, sdev)
			if tc.refused {
				var rej *rdmacm.RejectError
				if err == nil || !errors.As(err, &rej) || !strings.Contains(err.Error(), "not a stream dialer") {
					t.Fatalf("Dial: %v; want a rejection (not a stream dialer)", err)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, gotS := stream.SelectiveRetransmit(c), stream.SelectiveRetransmit(s); got != tc.sr || gotS != tc.sr {
				t.Fatalf("selective retransmission: dialer %v, listener %v; want %v on both", got, gotS, tc.sr)
			}
			// One full chunk (stream.DefaultSlotSize) each way, first thing:
			// its first packet is lost, the rest arrive past the gap.
			exchange(t, c, s, random(stream.DefaultSlotSize, 11), random(stream.DefaultSlotSize, 12))
			if f := n.Stats().Filtered; f != 2 {
				t.Fatalf("%d packets dropped, want the first data packet of each end", f)
			}
			for _, e := range []struct {
				name string
				dev  *verbs.Context
			}{{"dialer", cdev}, {"listener", sdev}} {
				k := e.dev.Counters()
				if held := k.Held > 0; held != tc.sr {
					t.Errorf("%s held %d packets past the gap; want some: %v", e.name, k.Held, tc.sr)
				}
				t.Logf("%s: held %d, retransmits %d, probes %d, sequence NAKs sent %d", e.name, k.Held, k.Retransmits, k.Probes, k.NAKsSent[verbs.NAKSeq])
			}
		})
	}
}

// TestLossyLink: over a link that loses, duplicates and reorders packets
// both directions of a stream arrive intact (and end in io.EOF, their
// FINs checked).
func TestLossyLink(t *testing.T) {
	cdev, sdev, n := memDevices(t)
	c, s, err := memDial(t, &stream.Dialer{Slots: 8, SlotSize: 64 << 10}, &stream.ListenConfig{Slots: 4, SlotSize: 100_000}, cdev, sdev)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.SelectiveRetransmit(c) || !stream.SelectiveRetransmit(s) {
		t.Fatal("no selective retransmission")
	}
	n.SetFaults(transporttest.Faults{Loss: 0.02, Duplicate: 0.01, Reorder: 0.01, ReorderAfter: 3, ReorderDelay: time.Millisecond})
	exchange(t, c, s, random(4<<20+3, 21), random(4<<20-5, 22))
	st := n.Stats()
	if st.Lost == 0 {
		t.Error("the link lost nothing")
	}
	t.Logf("link: %+v; dialer held %d, listener held %d", st, cdev.Counters().Held, sdev.Counters().Held)
}
