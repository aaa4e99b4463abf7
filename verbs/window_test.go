package verbs

import "testing"

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
