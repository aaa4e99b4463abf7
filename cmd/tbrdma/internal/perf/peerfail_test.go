package perf

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// TestWatchSilence: the context ends with errPeerSilent after one to two
// periods without progress, never while the counter moves, and stop ends
// the watch (synctest fails the test if its goroutine is left).
func TestWatchSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, seen, stop := watchSilence(context.Background(), time.Second)
		defer stop()
		start := time.Now()
		for range 10 { // 10 s of progress every 900 ms: alive
			time.Sleep(900 * time.Millisecond)
			if ctx.Err() != nil {
				t.Fatalf("cancelled after %v although the counter moved", time.Since(start))
			}
			seen.Add(1)
		}
		last := time.Now()
		<-ctx.Done()
		if el := time.Since(last); el < time.Second || el > 2*time.Second {
			t.Errorf("silence detected %v after the last progress, want 1 s to 2 s", el)
		}
		if !errors.Is(context.Cause(ctx), errPeerSilent) {
			t.Errorf("cause %v, want errPeerSilent", context.Cause(ctx))
		}
		var b strings.Builder
		if err := silentPeer(ctx, &b, "send-lat", nil, ctx.Err()); err != ErrReported {
			t.Errorf("silentPeer returned %v, want ErrReported", err)
		}
		if !strings.HasPrefix(b.String(), "tbrdma: send-lat: peer stopped answering: nothing from it for 5s") {
			t.Errorf("message %q", b.String())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		ctx, _, stop := watchSilence(parent, time.Second)
		cancel()
		<-ctx.Done()
		if context.Cause(ctx) == errPeerSilent {
			t.Error("a cancelled parent reported as silence")
		}
		if err := silentPeer(ctx, nil, "pingpong", nil, ctx.Err()); !errors.Is(err, context.Canceled) {
			t.Errorf("silentPeer returned %v, want the wait's own error", err)
		}
		stop()
	})
}

func TestPeerGone(t *testing.T) {
	if got := peerGone(nil, verbs.WCRetryExcErr); !strings.HasPrefix(got, ": peer stopped answering (no acknowledgement)") {
		t.Errorf("RETRY_EXC_ERR: %q", got)
	}
	if got := peerGone(nil, verbs.WCRNRRetryExcErr); !strings.Contains(got, "stopped posting receives") {
		t.Errorf("RNR_RETRY_EXC_ERR: %q", got)
	}
	if got := peerGone(nil, verbs.WCRemAccessErr); !strings.Contains(got, "buffer is smaller") || !strings.Contains(got, "same command and flags") {
		t.Errorf("remote access error: %q", got)
	}
	if got := peerGone(nil, verbs.WCLocLenErr); got != "" {
		t.Errorf("a local error blamed on the peer: %q", got)
	}
}
