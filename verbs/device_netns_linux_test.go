package verbs_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tbrdma/tbrdma/verbs"
)

// inNetns runs f on a thread that is in the network namespace ns (sockets
// f creates stay in it), then returns the thread to where it was.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	setns := func(fd uintptr) error { return unix.Setns(int(fd), unix.CLONE_NEWNET) }
	if err := setns(target.Fd()); err != nil {
		t.Skipf("setns %s: %v", ns, err)
	}
	defer func() {
		if err := setns(self.Fd()); err != nil {
			panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err)) // the thread must not be reused
		}
	}()
	f()
}

// TestOpenBoundToInterface: a context of the device on thunderbolt0 does
// not process a packet for its address that arrives on another interface
// (eth1), while a context bound to eth1 on the same address and port gets
// it; over thunderbolt0 the first one does. Host H has thunderbolt0
// 198.18.11.1 and eth1 198.18.12.1; peer P sends to 198.18.11.1, first
// over the Thunderbolt link, then, with a host route, over the LAN.
func TestOpenBoundToInterface(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: creates network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) from iproute2")
	}
	id := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	nsH, nsP := "tbvb-"+id+"-h", "tbvb-"+id+"-p"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{nsH, nsP} {
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		ip("-n", ns, "link", "set", "lo", "up")
	}
	for _, l := range []struct{ name, h, p string }{{"thunderbolt0", "198.18.11.1", "198.18.11.2"}, {"eth1", "198.18.12.1", "198.18.12.2"}} {
		a, b := "tbv"+id+l.name[:1]+"h", "tbv"+id+l.name[:1]+"p"
		ip("link", "add", a, "type", "veth", "peer", "name", b)
		t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() })
		ip("link", "set", a, "netns", nsH)
		ip("link", "set", b, "netns", nsP)
		ip("-n", nsH, "link", "set", a, "name", l.name)
		ip("-n", nsP, "link", "set", b, "name", l.name)
		for _, s := range []struct{ ns, addr string }{{nsH, l.h}, {nsP, l.p}} {
			ip("-n", s.ns, "link", "set", l.name, "up")
			ip("-n", s.ns, "addr", "add", s.addr+"/24", "dev", l.name)
		}
	}

	tbAddr := netip.MustParseAddr("198.18.11.1")
	var tb, lan *verbs.Context
	inNetns(t, nsH, func() {
		dev, err := verbs.DeviceByName("thunderbolt0")
		if err != nil {
			t.Fatal(err)
		}
		if tb, err = dev.Open(&verbs.Options{Addr: tbAddr}); err != nil {
			t.Fatal(err)
		}
		// The same address and port, bound to eth1: sees what arrives there.
		if lan, err = verbs.NewContext(&verbs.Options{Addr: tbAddr, Interface: "eth1", ActiveMTU: verbs.MTU1024}); err != nil {
			t.Fatal(err)
		}
	})
	defer tb.Close()
	defer lan.Close()

	var sender net.Conn
	send := func(n int) {
		t.Helper()
		inNetns(t, nsP, func() {
			var err error
			if sender, err = net.Dial("udp", netip.AddrPortFrom(tbAddr, 4791).String()); err != nil {
				t.Fatal(err)
			}
		})
		defer sender.Close()
		for range n {
			if _, err := sender.Write([]byte{0xde, 0xad}); err != nil { // too short: counted, dropped
				t.Fatal(err)
			}
		}
	}
	seen := func(c *verbs.Context) uint64 {
		k := c.Counters()
		return k.PacketsIn + k.Drops[verbs.DropShort]
	}
	// waitSeen waits until c has seen want packets (they cross a veth:
	// they arrive, or are lost to the other context, at once).
	waitSeen := func(c *verbs.Context, want uint64, what string) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); seen(c) < want; {
			if time.Now().After(end) {
				t.Fatalf("%s: %d packets seen, want %d", what, seen(c), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	send(3)
	waitSeen(tb, 3, "over thunderbolt0, the thunderbolt0 context")
	if n := seen(lan); n != 0 {
		t.Errorf("the eth1 context saw %d packets sent over thunderbolt0", n)
	}

	ip("-n", nsP, "route", "add", tbAddr.String()+"/32", "dev", "eth1")
	send(5)
	waitSeen(lan, 5, "over eth1, the eth1 context")
	if n := seen(tb); n != 3 {
		t.Errorf("the thunderbolt0 context saw %d packets, want the 3 of thunderbolt0 only (%d arrived on eth1)", n, seen(lan))
	}

	// With AnyInterface the device's context takes its address's packets
	// from any link: the middle of a routed chain.
	tb.Close()
	lan.Close()
	var anyc *verbs.Context
	inNetns(t, nsH, func() {
		dev, err := verbs.DeviceByName("thunderbolt0")
		if err != nil {
			t.Fatal(err)
		}
		if anyc, err = dev.Open(&verbs.Options{Addr: tbAddr, AnyInterface: true}); err != nil {
			t.Fatal(err)
		}
	})
	defer anyc.Close()
	send(4) // still over eth1
	waitSeen(anyc, 4, "over eth1, the thunderbolt0 context opened with AnyInterface")
}
