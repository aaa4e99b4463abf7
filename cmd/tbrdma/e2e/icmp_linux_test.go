package e2e

import (
	"strings"
	"testing"
	"time"
)

// The ICMP test's link: a /29 of 198.18.44.0/24, which no other test uses.
const (
	icmpAddrA = "198.18.44.1"
	icmpAddrB = "198.18.44.2"
)

// TestICMPPortUnreachableAtOnce: a client whose peer is up but has nothing
// on UDP 4791 (namespace B runs no tbrdma and no rdma_rxe, so its kernel
// answers every datagram with ICMP port unreachable) fails on that answer
// with the peer, the cause and the next step, not after its timeout: each
// command is given -W 30 and must end, with the ICMP message, before the
// 30 s it would otherwise wait (perftest -R's rdma_cm connection is
// bounded by 10 s).
func TestICMPPortUnreachableAtOnce(t *testing.T) {
	l := newVethLink(t, "icm", icmpAddrA, icmpAddrB, "198.18.44.3")
	icmp := icmpAddrB + " answered ICMP port unreachable for UDP 4791: no RoCE device listens there; start "
	for _, c := range []struct {
		args  []string
		limit time.Duration // what the command waits without the ICMP error
		want  string
	}{
		{[]string{"ping", "-c", "1", "-W", "30", l.addrB}, 30 * time.Second, icmp + "`tbrdma serve`"},
		{[]string{"cat", "-W", "30", l.addrB}, 30 * time.Second, "cat: " + icmp + "`tbrdma cat` without a peer"},
		{[]string{"udaddy", "-W", "30", "-s", l.addrB}, 30 * time.Second, icmp + "`tbrdma udaddy -b " + l.addrB + "`"},
		{[]string{"read-lat", "-R", "-n", "5", l.addrB}, 10 * time.Second, icmp + "the server (perftest -R, or tbrdma with -R)"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			tbrdma(t) // built before the clock starts
			start := time.Now()
			r := l.run(t, l.nsA, 2*time.Minute, c.args...)
			took := time.Since(start)
			t.Logf("stderr: %s", r.stderr)
			if r.code != 1 || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("want exit 1 and %q on stderr\n%v", c.want, r)
			}
			if took >= c.limit {
				t.Errorf("ended after %v, not before the %v it waits without the ICMP error", took, c.limit)
			}
		})
	}
}

// TestServeRefusesRClients: a perftest client with -R (rdma_cm) whose peer
// runs tbrdma serve is refused at once, on both ends: serve rejects the
// connection request on the -R port and says so on stderr, and the client
// says that serve does not host -R tests and what to run instead (rather
// than retrying a REJ for want of a listener and suggesting -p).
func TestServeRefusesRClients(t *testing.T) {
	l := newVethLink(t, "icr", icmpAddrA, icmpAddrB, "198.18.44.3")
	serve := l.start(t, l.nsB, "", "serve", "--no-advertise")
	serve.waitLine(t, "port 18515 (TCP", 10*time.Second)
	r := l.run(t, l.nsA, 2*time.Minute, "read-lat", "-R", "-n", "5", l.addrB)
	want := l.addrB + " runs tbrdma serve, which does not host -R tests: run a one-test server there (tbrdma read-lat -R, or perftest's with -R), or drop -R"
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Fatalf("want exit 1 and %q on stderr\n%v", want, r)
	}
	serve.waitLine(t, "refused the rdma_cm client "+l.addrA+": it runs a perftest with -R, which serve does not host", 10*time.Second)
	// serve goes on serving: a ping still gets its answers.
	if r := l.run(t, l.nsA, 2*time.Minute, "ping", "-c", "1", l.addrB); r.code != 0 {
		t.Errorf("ping after the refusal\n%v", r)
	}
}
