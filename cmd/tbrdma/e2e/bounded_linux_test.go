package e2e

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The bounded-failure link's addresses: a /29 of 198.18.42.0/24, which no
// other test uses. silentAddr is on the link and has a neighbour entry
// with a MAC nobody has, so packets to it leave and are never answered (a
// host that is down); the other tests' "absent" addresses fail ARP instead.
const (
	boundAddrA = "198.18.42.1"
	boundAddrB = "198.18.42.2"
	silentAddr = "198.18.42.5"
	silentMAC  = "02:00:c6:12:2a:05"
)

// newBoundLink is a veth link (newVethLink) whose namespace A has a
// permanent neighbour entry for silentAddr, a host that never answers.
func newBoundLink(t *testing.T) *link {
	t.Helper()
	l := newVethLink(t, "bnd", boundAddrA, boundAddrB, "198.18.42.3")
	if err := ipCmd("-n", l.nsA, "neigh", "add", silentAddr, "lladdr", silentMAC, "dev", "thunderbolt0", "nud", "permanent"); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestUnreachablePeerBounded: a client whose peer never answers (TCP, and
// rdma_cm with -R) or refuses (nothing listening) returns an error that
// names the peer and the cause; it never hangs. The test's only bound is
// its own generous one (run fails the test when a command outlives it).
func TestUnreachablePeerBounded(t *testing.T) {
	l := newBoundLink(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"write-bw", "-n", "5", silentAddr}, []string{silentAddr + ":18515", "no answer within"}},
		{[]string{"pingpong", "-n", "5", silentAddr}, []string{silentAddr + ":18515", "no answer within"}},
		{[]string{"read-lat", "-R", "-n", "5", silentAddr}, []string{"no rdma_cm connection to " + silentAddr, "within"}},
		{[]string{"write-bw", "-n", "5", l.addrB}, []string{l.addrB + ":18515", "nothing listens on TCP port 18515"}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := l.run(t, l.nsA, 2*time.Minute, c.args...)
			if r.code == 0 {
				t.Fatalf("succeeded against a peer that is not there\n%v", r)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q\n%v", w, r)
				}
			}
		})
	}
}

// TestServerChecksDeviceFirst: a one-test server given its device (-d)
// fails at once when the device's port is down, and a -d name it does not
// know is refused with the device list, before any client comes.
func TestServerChecksDeviceFirst(t *testing.T) {
	l := newBoundLink(t)
	r := l.run(t, l.nsA, 2*time.Minute, "write-bw", "-d", "nosuch0")
	if r.code != 2 || !strings.Contains(r.stderr, "unknown device -d nosuch0") || !strings.Contains(r.stderr, "tb_thunderbolt0") {
		t.Errorf("-d nosuch0: want a usage error listing tb_thunderbolt0\n%v", r)
	}
	if err := ipCmd("-n", l.nsB, "link", "set", "thunderbolt0", "down"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"write-bw", "-d", "tb_thunderbolt0"}, {"pingpong", "-d", "thunderbolt0"}} {
		r := l.run(t, l.nsB, 2*time.Minute, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "tb_thunderbolt0: port 1 is") || !strings.Contains(r.stderr, "ip link set thunderbolt0 up") {
			t.Errorf("%v on a down link: want the port state and the next step\n%v", args, r)
		}
	}
}

// TestPortHolderNamed: a server whose port another tbrdma holds names that
// process (its PID and subcommand) and the next step: TCP port -p, and UDP
// port 4791 of the RoCE address.
func TestPortHolderNamed(t *testing.T) {
	l := newBoundLink(t)
	srv := l.start(t, l.nsA, "", "write-bw", "--bind", l.addrA, "-p", "18600")
	waitTCPListener(t, l.nsA, srv, 18600)
	pid := srv.cmd.Process.Pid // ip netns exec execs tbrdma in its place
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"read-lat", "-p", "18600", "--any-interface"}, []string{fmt.Sprintf("another tbrdma write-bw (pid %d) holds TCP port 18600", pid), "-p 0"}},
		{[]string{"read-lat", "-p", "18601", "--bind", l.addrA}, []string{fmt.Sprintf("another tbrdma write-bw (pid %d) holds UDP port 4791", pid), "--bind"}},
	} {
		r := l.run(t, l.nsA, 2*time.Minute, c.args...)
		for _, w := range c.want {
			if r.code == 0 || !strings.Contains(r.stderr, w) {
				t.Errorf("%v: stderr lacks %q\n%v", c.args, w, r)
			}
		}
	}
}

// waitTCPListener waits (at most a minute) until a socket in ns listens on
// TCP port (ss(8) from iproute2).
func waitTCPListener(t *testing.T, ns string, p *proc, port int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if err != nil {
			t.Skipf("ss(8) in %s: %v (needs iproute2)", ns, err)
		}
		if len(bytes.TrimSpace(out)) > 0 {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("the server ended before it listened:\n%s", p.stdout.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listened on TCP port %d within a minute:\n%s", port, p.stdout.String())
		}
	}
}
