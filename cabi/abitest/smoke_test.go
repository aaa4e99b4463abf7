//go:build tbrdma_abitest

package abitest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSmokeRCPingpong is the first check of the library: ibv_rc_pingpong
// over it on both ends.
func TestSmokeRCPingpong(t *testing.T) {
	need(t, "ibv_rc_pingpong")
	l := NewLink(t)
	srv, cli := Pair(t, 30*time.Second,
		func(ctx context.Context) *exec.Cmd {
			return Command(ctx, t, l.NsA, "ibv_rc_pingpong", "-g", "1", "-n", "100")
		},
		func(ctx context.Context) *exec.Cmd {
			return Command(ctx, t, l.NsB, "ibv_rc_pingpong", "-g", "1", "-n", "100", l.AddrA)
		}, "")
	for _, r := range []Result{srv, cli} {
		if r.Err != nil || !strings.Contains(r.Out, "100 iters in") {
			t.Fatalf("ibv_rc_pingpong: %v\n%s", r.Err, r.Out)
		}
	}
}
