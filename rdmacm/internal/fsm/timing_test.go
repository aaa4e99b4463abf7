package fsm

import (
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
)

// TestPassiveTimingCaps: a REQ's own timeouts set the passive side's REP
// interval and timewait, capped so that a hostile REQ (timeouts 31, about
// 2.4 hours each) cannot keep a half-open connection for long; a stock
// rdma_cm REQ (20, ACK timeout 19) is unchanged.
func TestPassiveTimingCaps(t *testing.T) {
	for _, tc := range []struct {
		resp, ack        cmwire.Timeout
		interval, twWait time.Duration
	}{
		{20, 19, 4096 * time.Millisecond, 2048 * time.Millisecond},
		{31, 31, 8192 * time.Millisecond, 16384 * time.Millisecond},
	} {
		f := cmwire.REQFields{LocalCMResponseTimeout: tc.resp, MaxCMRetries: 15, Primary: cmwire.PathFields{LocalACKTimeout: tc.ack}}
		msg := cmwire.Message(cmwire.AppendMAD(nil, 1, f))
		got := PassiveTiming(msg.REQ())
		if got.Interval != tc.interval || got.TimeWait != tc.twWait || got.MaxRetries != 15 {
			t.Errorf("timeouts %d/%d: %+v, want interval %v, timewait %v, 15 retries", tc.resp, tc.ack, got, tc.interval, tc.twWait)
		}
	}
}
