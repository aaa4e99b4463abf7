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

// A loss (NAK or timeout) makes a QP that SetSendWindow widened fall back to
// the default window for good; the byte bound still applies.
func TestLossFallsBackToDefaultWindow(t *testing.T) {
	qp := &QP{pmtu: 4096, typ: QPTypeRC}
	if err := qp.SetSendWindow(512); err != nil {
		t.Fatal(err)
	}
	qp.lossSeen()
	if got := qp.unackedLimit(); got != maxUnackedPSNs {
		t.Fatalf("after a loss: window %d, want %d", got, maxUnackedPSNs)
	}
	if err := qp.SetSendWindow(1024); err != nil || qp.unackedLimit() != maxUnackedPSNs {
		t.Fatalf("a lossy QP widened again: %v, window %d", err, qp.unackedLimit())
	}
	plain := &QP{pmtu: 4096, typ: QPTypeRC}
	plain.lossSeen()
	if got := plain.unackedLimit(); got != maxUnackedPSNs {
		t.Fatalf("default QP after a loss: window %d, want %d", got, maxUnackedPSNs)
	}
}
