package discovery

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Two-host tests: two network namespaces joined by a veth pair whose ends
// are both named thunderbolt0 (as Linux thunderbolt-net names them), MTU
// 65520, 198.18.5.1/30 and 198.18.5.2/30 plus IPv6 link-local. tbrdma
// runs in a helper process (this test binary re-executed inside a
// namespace with `ip netns exec`, see TestNetnsHelper) that reports what
// it does as JSON lines on stdout. They need root and iproute2, and skip
// otherwise.

const (
	netnsAddrA = "198.18.5.1"
	netnsAddrB = "198.18.5.2"
)

// testNet is one pair of namespaces.
type testNet struct {
	a, b string // namespace names
}

// needRoot skips the test unless it runs as root with the named programs.
func needRoot(t *testing.T, progs ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespace test (-short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespace test: needs root (ip netns)")
	}
	for _, p := range append([]string{"ip"}, progs...) {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("network namespace test: %s not installed (Debian: apt-get install iproute2 avahi-daemon avahi-utils dbus-daemon)", p)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newTestNet creates the namespaces and the link; t.Cleanup deletes them.
func newTestNet(t *testing.T) *testNet {
	t.Helper()
	id := uniq()[:6]
	n := &testNet{a: "tbrdma-disc-" + id + "-a", b: "tbrdma-disc-" + id + "-b"}
	run(t, "ip", "netns", "add", n.a)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.a).Run() })
	run(t, "ip", "netns", "add", n.b)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.b).Run() })
	va, vb := "tbd"+id+"a", "tbd"+id+"b"
	run(t, "ip", "link", "add", va, "type", "veth", "peer", "name", vb)
	run(t, "ip", "link", "set", va, "netns", n.a)
	run(t, "ip", "link", "set", vb, "netns", n.b)
	for _, x := range []struct{ ns, dev, addr string }{{n.a, va, netnsAddrA}, {n.b, vb, netnsAddrB}} {
		run(t, "ip", "-n", x.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", x.ns, "link", "set", x.dev, "name", "thunderbolt0")
		// No duplicate address detection: the link-local address is
		// usable at once.
		run(t, "ip", "netns", "exec", x.ns, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/thunderbolt0/accept_dad")
		run(t, "ip", "-n", x.ns, "link", "set", "thunderbolt0", "mtu", "65520", "up")
		run(t, "ip", "-n", x.ns, "addr", "add", x.addr+"/30", "dev", "thunderbolt0")
	}
	fmt.Fprintf(os.Stderr, "netns: %s (%s) <-> %s (%s) over thunderbolt0\n", n.a, netnsAddrA, n.b, netnsAddrB)
	return n
}

// addLAN adds a second veth pair between the namespaces, named lan0 on both
// sides (an ordinary, non-Thunderbolt interface), 198.18.5.9/30 and
// 198.18.5.10/30.
func (n *testNet) addLAN(t *testing.T) {
	t.Helper()
	id := uniq()[:6]
	va, vb := "tbl"+id+"a", "tbl"+id+"b"
	run(t, "ip", "link", "add", va, "type", "veth", "peer", "name", vb)
	run(t, "ip", "link", "set", va, "netns", n.a)
	run(t, "ip", "link", "set", vb, "netns", n.b)
	for _, x := range []struct{ ns, dev, addr string }{{n.a, va, "198.18.5.9"}, {n.b, vb, "198.18.5.10"}} {
		run(t, "ip", "-n", x.ns, "link", "set", x.dev, "name", "lan0")
		run(t, "ip", "netns", "exec", x.ns, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/lan0/accept_dad")
		run(t, "ip", "-n", x.ns, "link", "set", "lan0", "up")
		run(t, "ip", "-n", x.ns, "addr", "add", x.addr+"/30", "dev", "lan0")
	}
}

// helperMsg is one line a helper process reports.
type helperMsg struct {
	Ev    string    `json:"ev"` // starting, advertised, closing, closed, event, peers, resolved, error
	Time  time.Time `json:"time"`
	Name  string    `json:"name,omitempty"`
	Host  string    `json:"host,omitempty"`
	Type  string    `json:"type,omitempty"` // Event type for ev "event"
	Peer  *Peer     `json:"peer,omitempty"`
	Peers []Peer    `json:"peers,omitempty"`
	Err   string    `json:"err,omitempty"`
	Took  string    `json:"took,omitempty"` // how long a Resolve took
}

const helperPrefix = "HELPER "

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	msgs  chan helperMsg
	done  chan struct{}
}

// startHelper runs TestNetnsHelper in namespace ns in the given mode
// (advertise, watch, browse, resolve) with extra environment variables.
func startHelper(t *testing.T, ns, mode string, env ...string) *helper {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestNetnsHelper$")
	cmd.Env = append(os.Environ(), append([]string{"TBRDMA_NETNS_HELPER=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, msgs: make(chan helperMsg, 64), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer close(h.msgs)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			s, ok := strings.CutPrefix(line, helperPrefix)
			if !ok {
				if line != "PASS" {
					fmt.Fprintf(os.Stderr, "%s %s: %s\n", ns, mode, line)
				}
				continue
			}
			var m helperMsg
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				fmt.Fprintf(os.Stderr, "%s %s: bad line %q: %v\n", ns, mode, s, err)
				continue
			}
			h.msgs <- m
		}
	}()
	t.Cleanup(func() { h.stop() })
	return h
}

// send writes one command line to the helper.
func (h *helper) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(h.stdin, cmd); err != nil {
		t.Fatalf("helper command %q: %v", cmd, err)
	}
}

// stop closes the helper's stdin (it ends, sending goodbyes) and waits.
func (h *helper) stop() {
	h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
	}
	h.cmd.Wait()
}

// wait returns the next message of kind ev for which ok (if non-nil) holds,
// failing the test after timeout (a bound for a hung helper, not a
// measurement) or on an "error" message.
func (h *helper) wait(t *testing.T, ev string, timeout time.Duration, ok func(helperMsg) bool) helperMsg {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m, open := <-h.msgs:
			if !open {
				t.Fatalf("helper ended before %q", ev)
			}
			if m.Ev == "error" {
				t.Fatalf("helper: %s", m.Err)
			}
			if m.Ev == ev && (ok == nil || ok(m)) {
				return m
			}
		case <-deadline:
			t.Fatalf("helper: no %q within %v", ev, timeout)
		}
	}
}

// TestNetnsHelper is not a test: the two-host tests run it inside a
// namespace (TBRDMA_NETNS_HELPER=mode). Modes:
//   - advertise: advertise the instances in TBRDMA_NETNS_NAMES (comma
//     separated, ports 4791, 4792 …) on the Thunderbolt interfaces
//     found by default; "update" on stdin changes the MTU to 1024; stdin
//     closed: Close (goodbyes).
//   - watch: Watch until stdin closes, one "event" line per event.
//   - browse: one Browse of TBRDMA_NETNS_TIMEOUT (default 2 s), on
//     TBRDMA_NETNS_IFACE if set.
//   - resolve: Resolve each name in TBRDMA_NETNS_NAMES.
func TestNetnsHelper(t *testing.T) {
	mode := os.Getenv("TBRDMA_NETNS_HELPER")
	if mode == "" {
		t.Skip("helper process of the network namespace tests")
	}
	var mu sync.Mutex
	say := func(m helperMsg) {
		m.Time = time.Now()
		b, _ := json.Marshal(m)
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%s%s\n", helperPrefix, b)
	}
	fail := func(err error) { say(helperMsg{Ev: "error", Err: err.Error()}) }
	var o *Options
	if testing.Verbose() || os.Getenv("TBRDMA_NETNS_DEBUG") != "" {
		o = testOptions(t, "")
		o.Interfaces, o.HostName = nil, ""
	}
	var names []string
	if s := os.Getenv("TBRDMA_NETNS_NAMES"); s != "" {
		names = strings.Split(s, ",")
	}
	ctx := context.Background()
	stdin := bufio.NewScanner(os.Stdin)
	switch mode {
	case "advertise":
		var advs []*Advertiser
		for i, n := range names {
			s := testService(n)
			s.Port += uint16(i)
			say(helperMsg{Ev: "starting", Name: n})
			a, err := Advertise(ctx, s, o)
			if err != nil {
				fail(err)
				return
			}
			advs = append(advs, a)
			say(helperMsg{Ev: "advertised", Name: a.Name(), Host: a.Host()})
		}
		for stdin.Scan() {
			if stdin.Text() == "update" {
				for i, a := range advs {
					s := testService(names[i])
					s.Port += uint16(i)
					s.MTU = 1024
					if err := a.Update(s); err != nil {
						fail(err)
					}
				}
				say(helperMsg{Ev: "updated"})
			}
		}
		say(helperMsg{Ev: "closing"})
		for _, a := range advs {
			a.Close()
		}
		say(helperMsg{Ev: "closed"})
	case "watch":
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		evs, err := Watch(ctx, o)
		if err != nil {
			fail(err)
			return
		}
		say(helperMsg{Ev: "watching"})
		go func() {
			for stdin.Scan() {
			}
			cancel()
		}()
		for ev := range evs {
			say(helperMsg{Ev: "event", Type: ev.Type.String(), Peer: &ev.Peer})
		}
	case "browse":
		bo := &Options{Timeout: 2 * time.Second}
		if o != nil {
			bo.Logger = o.Logger
		}
		if s := os.Getenv("TBRDMA_NETNS_IFACE"); s != "" {
			bo.Interfaces = []string{s}
		}
		if d, err := time.ParseDuration(os.Getenv("TBRDMA_NETNS_TIMEOUT")); err == nil {
			bo.Timeout = d
		}
		peers, err := Browse(ctx, bo)
		if err != nil {
			fail(err)
			return
		}
		say(helperMsg{Ev: "peers", Peers: peers})
	case "resolve":
		for _, n := range names {
			start := time.Now()
			p, err := Resolve(ctx, n, o)
			if err != nil {
				fail(err)
				return
			}
			say(helperMsg{Ev: "resolved", Name: n, Peer: &p, Took: time.Since(start).String()})
		}
	default:
		fail(fmt.Errorf("unknown helper mode %q", mode))
	}
}

// TestHotPlug: the Thunderbolt interface going down and coming back, on
// either side, and an address change. The advertiser (namespace a) and a
// Watch (namespace b) both use the default interface detection; the
// Watch must report the peer leaving when the link dies, appearing again
// when it comes back, and changing to the new address.
func TestHotPlug(t *testing.T) {
	needRoot(t)
	n := newTestNet(t)
	watch := startHelper(t, n.b, "watch")
	watch.wait(t, "watching", appearWait, nil)
	name := "hotplug-" + uniq()[:6]
	adv := startHelper(t, n.a, "advertise", "TBRDMA_NETNS_NAMES="+name)
	adv.wait(t, "advertised", appearWait, nil)
	hasAddr := func(a string) func(helperMsg) bool {
		return func(m helperMsg) bool {
			return m.Peer.Name == name && slices.ContainsFunc(m.Peer.Addrs, func(x netip.Addr) bool { return x.String() == a })
		}
	}
	event := func(typ string, cond func(helperMsg) bool) func(helperMsg) bool {
		return func(m helperMsg) bool { return m.Type == typ && m.Peer.Name == name && (cond == nil || cond(m)) }
	}
	watch.wait(t, "event", appearWait, event("appeared", hasAddr(netnsAddrA)))

	for _, side := range []struct{ what, ns string }{{"advertiser's", n.a}, {"watcher's", n.b}} {
		fmt.Fprintf(os.Stderr, "hotplug: %s thunderbolt0 down\n", side.what)
		down := time.Now()
		run(t, "ip", "-n", side.ns, "link", "set", "thunderbolt0", "down")
		m := watch.wait(t, "event", appearWait, event("left", nil))
		t.Logf("%s link down: Watch reported %q left after %v", side.what, name, m.Time.Sub(down).Round(time.Millisecond))
		fmt.Fprintf(os.Stderr, "hotplug: %s thunderbolt0 up\n", side.what)
		up := time.Now()
		run(t, "ip", "-n", side.ns, "link", "set", "thunderbolt0", "up")
		m = watch.wait(t, "event", appearWait, event("appeared", hasAddr(netnsAddrA)))
		t.Logf("%s link up: Watch reported %q again after %v", side.what, name, m.Time.Sub(up).Round(time.Millisecond))
		fmt.Fprintf(os.Stderr, "FIGURE hotplug (%s side) back after %v\n", side.what, m.Time.Sub(up).Round(time.Millisecond))
	}

	// Address change on the advertiser: the new address is announced, the
	// old one said goodbye to.
	const newAddr = "198.18.5.5"
	changed := time.Now()
	run(t, "ip", "-n", n.a, "addr", "add", newAddr+"/30", "dev", "thunderbolt0")
	run(t, "ip", "-n", n.a, "addr", "del", netnsAddrA+"/30", "dev", "thunderbolt0")
	m := watch.wait(t, "event", appearWait, func(m helperMsg) bool {
		return m.Type == "changed" && hasAddr(newAddr)(m) && !hasAddr(netnsAddrA)(m)
	})
	t.Logf("address change: Watch reported %q at %v after %v", name, m.Peer.Addrs, m.Time.Sub(changed).Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "FIGURE address change seen after %v\n", m.Time.Sub(changed).Round(time.Millisecond))

	adv.stdin.Close()
	watch.wait(t, "event", goodbyeBound, event("left", nil))
}

// TestOnlyThunderbolt: a responder on a host with a Thunderbolt link and
// an ordinary one (lan0) answers only on the Thunderbolt link: a Browse
// from the other host over lan0 finds nothing, over thunderbolt0 it finds
// the peer.
func TestOnlyThunderbolt(t *testing.T) {
	needRoot(t)
	n := newTestNet(t)
	n.addLAN(t)
	name := "tbonly-" + uniq()[:6]
	adv := startHelper(t, n.a, "advertise", "TBRDMA_NETNS_NAMES="+name)
	adv.wait(t, "advertised", appearWait, nil)
	lan := startHelper(t, n.b, "browse", "TBRDMA_NETNS_IFACE=lan0")
	tb := startHelper(t, n.b, "browse", "TBRDMA_NETNS_IFACE=thunderbolt0")
	if peers := lan.wait(t, "peers", appearWait, nil).Peers; len(peers) != 0 {
		t.Errorf("Browse over lan0 found %v; the responder must answer on Thunderbolt interfaces only", peers)
	}
	peers := tb.wait(t, "peers", appearWait, nil).Peers
	if p, ok := find(peers, name); !ok || p.Interface != "thunderbolt0" || p.AddrPort().Addr().String() != netnsAddrA {
		t.Errorf("Browse over thunderbolt0: %v, want %q at %s", peers, name, netnsAddrA)
	}
}
