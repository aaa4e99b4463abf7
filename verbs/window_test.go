package verbs

import (
	"errors"
	"testing"
)

// TestUnackedLimit checks the requester's window: 128 PSNs (rxe's) on the
// standard paths, and at most maxUnackedBytes of payload in flight with
// large segments, so that a peer's socket receive buffer is not overrun.
func TestUnackedLimit(t *testing.T) {
	for _, tc := range []struct {
		pmtu int
		want int32
	}{
		{256, maxUnackedPSNs},
		{1024, maxUnackedPSNs},
		{4096, maxUnackedPSNs},
		{16384, maxUnackedPSNs}, // 2 MiB in flight: the PSN bound applies
		{57344, maxUnackedBytes / 57344},
		{61440, maxUnackedBytes / 61440},
		{1 << 30, 16}, // never below 16 packets
	} {
		qp := &QP{pmtu: tc.pmtu}
		got := qp.unackedLimit()
		if got != tc.want {
			t.Errorf("path MTU %d: window %d PSNs, want %d", tc.pmtu, got, tc.want)
		}
		if tc.pmtu <= maxUnackedBytes/16 && int(got)*tc.pmtu > maxUnackedBytes {
			t.Errorf("path MTU %d: %d bytes in flight exceed %d", tc.pmtu, int(got)*tc.pmtu, maxUnackedBytes)
		}
	}
}

// SetSendWindow widens (or narrows) the PSN bound of an RC QP; the byte
// bound for large segments still applies, and out-of-range values and
// other QP types are refused.
func TestSetSendWindow(t *testing.T) {
	qp := &QP{pmtu: 4096, typ: QPTypeRC}
	if err := qp.SetSendWindow(512); err != nil {
		t.Fatal(err)
	}
	if got := qp.unackedLimit(); got != 512 {
		t.Errorf("window 512 at 4096 B: %d PSNs", got)
	}
	qp.pmtu = 61440
	if got, want := qp.unackedLimit(), int32(maxUnackedBytes/61440); got != want {
		t.Errorf("window 512 at 61440 B: %d PSNs, want the byte bound %d", got, want)
	}
	qp.pmtu = 4096
	if err := qp.SetSendWindow(0); err != nil || qp.unackedLimit() != maxUnackedPSNs {
		t.Errorf("SetSendWindow(0): %v, window %d, want the default %d", err, qp.unackedLimit(), maxUnackedPSNs)
	}
	for _, n := range []int{-1, 1, 15, MaxSendWindow + 1} {
		if err := qp.SetSendWindow(n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("SetSendWindow(%d): %v, want ErrInvalidArgument", n, err)
		}
	}
	uc := &QP{pmtu: 4096, typ: QPTypeUC}
	if err := uc.SetSendWindow(512); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("SetSendWindow on UC: %v, want ErrInvalidArgument", err)
	}
}

// After a loss the window halves, once per round in flight, and widens
// again as ACKs move the requester on, back to the full window; the packet
// that fills a cut window asks for an ACK (sendSegment), so a window below
// maxPktsPerAck never waits for one nobody asked for.
func TestLossWindow(t *testing.T) {
	qp := &QP{pmtu: 4096, typ: QPTypeRC}
	if err := qp.SetSendWindow(512); err != nil {
		t.Fatal(err)
	}
	qp.req.compPSN, qp.req.psn = 1000, 1400
	qp.lossCut()
	if got := qp.unackedLimit(); got != 256 {
		t.Fatalf("after a loss: window %d, want 256", got)
	}
	qp.lossCut() // the same round: no second cut
	if got := qp.unackedLimit(); got != 256 {
		t.Fatalf("a second loss in the round cut again: window %d", got)
	}
	qp.req.compPSN = 1200 // progress inside the round: no growth yet
	qp.lossGrow()
	if got := qp.unackedLimit(); got != 256 {
		t.Fatalf("grew before the round was acknowledged: window %d", got)
	}
	qp.req.compPSN, qp.req.psn = 1400, 1600 // the round is acknowledged
	qp.lossGrow()
	if got := qp.unackedLimit(); got != 257 {
		t.Fatalf("after the round: window %d, want 257 (+1)", got)
	}
	qp.req.compPSN = 1401 // a new loss in a new round cuts again
	qp.lossCut()
	if got := qp.unackedLimit(); got != 128 {
		t.Fatalf("second loss: window %d, want 128", got)
	}
	for i := 0; i < 10; i++ {
		qp.lossCut() // never below minLossWindow, whatever the losses
		qp.req.compPSN = qp.req.psn
	}
	if got := qp.unackedLimit(); got != minLossWindow {
		t.Fatalf("after many losses: window %d, want %d", got, minLossWindow)
	}
	steps := 0
	for qp.req.cwnd != 0 {
		qp.lossGrow()
		steps++
		if steps > 1000 {
			t.Fatal("the window never came back to full")
		}
	}
	if got := qp.unackedLimit(); got != 512 {
		t.Fatalf("back to full: window %d, want 512", got)
	}
	t.Logf("from %d to 512 packets in %d acknowledgements", minLossWindow, steps)
}
