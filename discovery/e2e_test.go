package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// testIface returns the interface the end-to-end tests run on: $TBRDMA_TEST_IFACE
// (the integration run sets thunderbolt0 inside a namespace) or lo. The
// test is skipped when the interface cannot carry multicast.
func testIface(t *testing.T) string {
	t.Helper()
	name := os.Getenv("TBRDMA_TEST_IFACE")
	if name == "" {
		name = "lo"
		if _, err := net.InterfaceByName(name); err != nil {
			name = "lo0"
		}
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Skipf("no interface %s: %v", name, err)
	}
	c, err := listenMDNS(ifi, false)
	if err != nil {
		t.Skipf("no mDNS socket on %s: %v", name, err)
	}
	c.uc.Close()
	return name
}

func testOptions(t *testing.T, iface string) *Options {
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return &Options{Interfaces: []string{iface}, Logger: log, HostName: "test-" + uniq() + "-tbrdma"}
}

func uniq() string { return fmt.Sprintf("%08x", rand.Uint32()) }

func testService(name string) Service {
	return Service{
		Name:    name,
		Port:    4791,
		GID:     netip.MustParseAddr("::ffff:198.18.0.2"),
		GUID:    "0002c9fffe000001",
		MTU:     4096,
		Device:  "tbrdma0",
		Caps:    []string{"rc", "ud", "atomic"},
		Version: "0.1.0",
		OOBPort: 18515,
	}
}

func find(ps []Peer, name string) (Peer, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("uses multicast sockets")
	}
	iface := testIface(t)
	ctx := t.Context()
	o := testOptions(t, iface)

	// Watch first, so it sees the appearance and the goodbye.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	events, err := Watch(wctx, &Options{Interfaces: o.Interfaces, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}

	name := "e2e " + uniq() + " with.dot"
	adv, err := Advertise(ctx, testService(name), o)
	if err != nil {
		t.Fatal(err)
	}
	defer adv.Close()
	if adv.Name() != name {
		t.Fatalf("advertised as %q, want %q", adv.Name(), name)
	}

	start := time.Now()
	peers, err := Browse(ctx, &Options{Interfaces: o.Interfaces, Logger: o.Logger, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := find(peers, name)
	if !ok {
		t.Fatalf("Browse did not find %q in %v", name, peers)
	}
	t.Logf("browse: %v in %v", p, time.Since(start))
	checkPeer(t, p, iface, o.HostName)

	start = time.Now()
	r, err := Resolve(ctx, name+".local", &Options{Interfaces: o.Interfaces, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("resolve took %v", d)
	}
	checkPeer(t, r, iface, o.HostName)
	if _, err := Resolve(ctx, o.HostName, &Options{Interfaces: o.Interfaces, Logger: o.Logger}); err != nil {
		t.Errorf("resolve by host name: %v", err)
	}

	appeared := false
	deadline := time.After(5 * time.Second)
	for !appeared {
		select {
		case ev := <-events:
			appeared = ev.Type == Appeared && ev.Peer.Name == name
		case <-deadline:
			t.Fatal("Watch did not report the peer")
		}
	}
	// Changed: a TXT update.
	s := testService(name)
	s.MTU = 1024
	if err := adv.Update(s); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, Changed, name, func(p Peer) bool { return p.MTU() == 1024 })

	closed := time.Now()
	adv.Close()
	waitEvent(t, events, Left, name, nil)
	t.Logf("left %v after Close", time.Since(closed))
	if d := time.Since(closed); d > 3*time.Second {
		t.Errorf("goodbye took %v", d)
	}
}

func waitEvent(t *testing.T, events <-chan Event, typ EventType, name string, ok func(Peer) bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatal("watch ended")
			}
			if ev.Type == typ && ev.Peer.Name == name && (ok == nil || ok(ev.Peer)) {
				return
			}
		case <-deadline:
			t.Fatalf("no %v event for %q", typ, name)
		}
	}
}

func checkPeer(t *testing.T, p Peer, iface, host string) {
	t.Helper()
	if p.Port != 4791 || p.Interface != iface || p.Host != host+".local" {
		t.Errorf("peer %+v: want port 4791, interface %s, host %s.local", p, iface, host)
	}
	if p.GID != netip.MustParseAddr("::ffff:198.18.0.2") {
		t.Errorf("GID %v", p.GID)
	}
	if p.MTU() != 4096 || p.OOBPort() != 18515 || p.TXT["dev"] != "tbrdma0" || p.TXT["txtvers"] != "1" {
		t.Errorf("TXT %v", p.TXT)
	}
	if len(p.Addrs) == 0 {
		t.Errorf("no addresses")
	}
	for _, a := range p.Addrs {
		if a.Is6() && a.IsLinkLocalUnicast() && a.Zone() != iface {
			t.Errorf("link-local %v without zone %s", a, iface)
		}
	}
}

// TestTwoInstancesOneHost: two advertisers of one host (one host name) are
// both found by one Browse.
func TestTwoInstancesOneHost(t *testing.T) {
	if testing.Short() {
		t.Skip("uses multicast sockets")
	}
	iface := testIface(t)
	ctx := t.Context()
	o := testOptions(t, iface)
	a1, b1 := "one-"+uniq(), "two-"+uniq()
	x, err := Advertise(ctx, testService(a1), o)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	s := testService(b1)
	s.Port = 4792
	y, err := Advertise(ctx, s, o)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	peers, err := Browse(ctx, &Options{Interfaces: o.Interfaces, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	p1, ok1 := find(peers, a1)
	p2, ok2 := find(peers, b1)
	if !ok1 || !ok2 {
		t.Fatalf("want both %q and %q in %v", a1, b1, peers)
	}
	if p1.Host != p2.Host || p1.Port != 4791 || p2.Port != 4792 {
		t.Errorf("got %+v and %+v", p1, p2)
	}
}

// TestConflictRename: a second advertiser of the same instance name on
// the same link is renamed "name (2)".
func TestConflictRename(t *testing.T) {
	if testing.Short() {
		t.Skip("uses multicast sockets")
	}
	iface := testIface(t)
	ctx := t.Context()
	o := testOptions(t, iface)
	name := "dup-" + uniq()
	x, err := Advertise(ctx, testService(name), o)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	s := testService(name)
	s.Port = 9999
	y, err := Advertise(ctx, s, o)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if y.Name() != name+" (2)" {
		t.Errorf("second advertiser named %q, want %q", y.Name(), name+" (2)")
	}
}

// TestHelperAdvertise is not a test: with TBRDMA_HELPER_ADVERTISE=name it
// advertises that instance (default interfaces: the Thunderbolt ones) for
// TBRDMA_HELPER_SECONDS (default 10) and then closes, sending goodbyes.
// testdata/netns.sh runs it in one namespace of a veth pair.
func TestHelperAdvertise(t *testing.T) {
	name := os.Getenv("TBRDMA_HELPER_ADVERTISE")
	if name == "" {
		t.Skip("helper process for testdata/netns.sh")
	}
	secs := 10
	fmt.Sscan(os.Getenv("TBRDMA_HELPER_SECONDS"), &secs)
	o := &Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	var advs []*Advertiser
	for i, n := range strings.Split(name, ",") {
		s := testService(n)
		s.Port += uint16(i)
		a, err := Advertise(t.Context(), s, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("advertising %q as host %s", a.Name(), a.Host())
		advs = append(advs, a)
	}
	time.Sleep(time.Duration(secs) * time.Second)
	for _, a := range advs {
		a.Close()
	}
}

// TestRemotePeer runs with TBRDMA_REMOTE_PEER=name[,name2] in the other
// namespace: the peers (advertised by TestHelperAdvertise) must be found
// by Browse and Resolve within a second on the default (Thunderbolt)
// interface, and leave a Watch after the helper's goodbye when
// TBRDMA_REMOTE_WAIT_LEAVE is set.
func TestRemotePeer(t *testing.T) {
	names := os.Getenv("TBRDMA_REMOTE_PEER")
	if names == "" {
		t.Skip("run by testdata/netns.sh")
	}
	ctx := t.Context()
	events, err := Watch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	peers, err := Browse(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range strings.Split(names, ",") {
		p, ok := find(peers, n)
		if !ok {
			t.Fatalf("Browse did not find %q in %v", n, peers)
		}
		t.Logf("browse (%v): %+v", time.Since(start), p)
		start := time.Now()
		r, err := Resolve(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("resolve took %v", d)
		}
		t.Logf("resolve (%v): %v addrs %v gid %v", time.Since(start), r, r.Addrs, r.GID)
	}
	if os.Getenv("TBRDMA_REMOTE_WAIT_LEAVE") != "" {
		first, _, _ := strings.Cut(names, ",")
		deadline := time.After(30 * time.Second)
		for {
			select {
			case ev := <-events:
				t.Logf("event %v %v", ev.Type, ev.Peer)
				if ev.Type == Left && ev.Peer.Name == first {
					return
				}
			case <-deadline:
				t.Fatal("no Left event")
			}
		}
	}
}

// TestWatchStaticWithMDNS: with an interface to browse on, Watch reports
// the static peers first, then what mDNS finds.
func TestWatchStaticWithMDNS(t *testing.T) {
	if testing.Short() {
		t.Skip("uses multicast sockets")
	}
	iface := testIface(t)
	o := testOptions(t, iface)
	name := "static-mdns-" + uniq()
	adv, err := Advertise(t.Context(), testService(name), o)
	if err != nil {
		t.Fatal(err)
	}
	defer adv.Close()
	fixed, err := StaticPeers("lab-static=198.18.0.7")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events, err := Watch(ctx, &Options{Interfaces: o.Interfaces, Logger: o.Logger, Static: fixed})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Type != Appeared || ev.Peer.Name != "lab-static" || !ev.Peer.Static {
			t.Fatalf("first event %v %+v, want the static peer appearing", ev.Type, ev.Peer)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	waitEvent(t, events, Appeared, name, nil)
}
