package cli

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPerftestProgress runs write-bw with the client's stderr a terminal
// and a clock that advances 50 ms a read: the client draws its progress
// line on stderr and erases it before the result row, stdout holds
// nothing but the results, and the server (stderr no terminal) draws none.
func TestPerftestProgress(t *testing.T) {
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, _, serr := testFactory()
	cf, cout, cerr := testFactory()
	cf.IO.SetStderrTTY(true)
	var ticks atomic.Int64
	t0 := time.Now()
	cf.Now = func() time.Time { return t0.Add(time.Duration(ticks.Add(1)) * 50 * time.Millisecond) }
	so := parsePerftest(t, sf, writeBWTest, "--bind", sa.String(), "-p", "0", "-n", "400", "-s", "4096", "-t", "8")
	pair(t, func(l func(net.Addr)) error {
		so.Listening = l
		return runPerftest(context.Background(), so)
	}, func(port int) error {
		co := parsePerftest(t, cf, writeBWTest, "--bind", ca.String(), "-p", itoa(port), "-n", "400", "-s", "4096", "-t", "8", sa.String())
		return runPerftest(context.Background(), co)
	})
	e := cerr.String()
	if !strings.Contains(e, "\r\x1b[Kwrite-bw 4096 bytes: [") || !strings.Contains(e, "/s  0:") {
		t.Errorf("client stderr has no progress line: %q", e)
	}
	if !strings.HasSuffix(e, "\r\x1b[K") {
		t.Errorf("client stderr does not end by erasing the progress line: %q", e)
	}
	if strings.ContainsAny(cout.String(), "\r\x1b") || !bwRow(4096, 400, false).MatchString(cout.String()) {
		t.Errorf("client stdout:\n%q", cout)
	}
	if strings.Contains(serr.String(), "\r") {
		t.Errorf("server stderr (no terminal) has a progress line: %q", serr)
	}
}
