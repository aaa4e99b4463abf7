package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExchangeStall: the server goes away during the TCP exchange that
// comes before any RDMA traffic, without closing its connection (here: it
// is stopped with SIGSTOP, so its kernel still completes the handshake and
// answers TCP keepalives, then its link goes down). The client must not
// wait for ever, as stock perftest and ibv_rc_pingpong do: TCP keepalive
// probes (5 s idle, 3 probes 2 s apart) fail the exchange, and the client
// exits 1 with a message naming the peer. The limit below only detects a
// hang.
func TestExchangeStall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: network namespaces")
	}
	const bound = 11 * time.Second // exchangeKeepAlive in cli/conn.go
	for _, args := range [][]string{
		{"write-bw", "--bind", failAddrA, failAddrB},
		{"pingpong", failAddrB},
	} {
		t.Run(args[0], func(t *testing.T) {
			l := newFailLink(t)
			srvArgs := []string{args[0], "--bind", failAddrB}
			srv := l.start(t, l.nsB, "", srvArgs...)
			l.waitListenTCP(t, l.nsB, 18515, srv)
			if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.cmd.Process.Signal(syscall.SIGCONT) })

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cl := l.command(ctx, t, l.nsA, "", args...)
			var out, errOut lockedBuffer
			cl.Stdout, cl.Stderr = &out, &errOut
			if err := cl.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cl.Wait() }()
			// The client connected and waits for the stopped server's
			// answer: let it wait a little, as a slow server's client would.
			select {
			case err := <-exited:
				t.Fatalf("the client ended before the fault (%v):\n%s", err, errOut.String())
			case <-time.After(2 * time.Second):
			}
			faultAt := time.Now()
			if err := ipCmd("-n", l.nsB, "link", "set", "thunderbolt0", "down"); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-exited:
			case <-time.After(2*bound + 10*time.Second):
				t.Fatalf("the client still waits %v after the server's link went down: a hang\nstderr:\n%s", 2*bound+10*time.Second, errOut.String())
			}
			took := time.Since(faultAt)
			stderr := strings.TrimSpace(errOut.String())
			if code := exitCode(err); code != 1 {
				t.Errorf("exit %d, want 1\nstderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, "peer "+failAddrB+" stopped answering") {
				t.Errorf("the message does not name the peer %s and the cause:\n%s", failAddrB, stderr)
			}
			t.Logf("%s: exit %d %v after the link went down (keepalive bound %v): %s", args[0], exitCode(err), took.Round(time.Millisecond), bound, stderr)
		})
	}
}
