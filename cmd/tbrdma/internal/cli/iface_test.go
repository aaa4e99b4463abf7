package cli

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/transport/netif"
)

// fakeInterfaces: loopback, a Thunderbolt link, a macOS Thunderbolt
// Bridge, a LAN and a down Thunderbolt link.
func fakeInterfaces() ([]netif.Interface, error) {
	p := netip.MustParsePrefix
	return []netif.Interface{
		{Name: "lo", Up: true, Loopback: true, Kind: netif.KindLoopback, Addrs: []netip.Prefix{p("127.0.0.1/8")}},
		{Name: "thunderbolt0", Up: true, Thunderbolt: true, Kind: netif.KindThunderbolt, Addrs: []netip.Prefix{p("198.18.0.1/24"), p("fe80::1/64")}},
		{Name: "bridge0", Up: true, Thunderbolt: true, Kind: netif.KindThunderboltBridge, Addrs: []netip.Prefix{p("198.18.2.1/24")}},
		{Name: "eth1", Up: true, Kind: netif.KindEthernet, Addrs: []netip.Prefix{p("198.19.0.1/24")}},
		{Name: "thunderbolt1", Up: false, Thunderbolt: true, Kind: netif.KindThunderbolt, Addrs: []netip.Prefix{p("198.18.3.1/24")}},
	}, nil
}

func withInterfaces(t *testing.T, list func() ([]netif.Interface, error)) {
	old := listInterfaces
	listInterfaces = list
	t.Cleanup(func() { listInterfaces = old })
}

func TestServingAddrs(t *testing.T) {
	withInterfaces(t, fakeInterfaces)
	a := netip.MustParseAddr
	got, err := servingAddrs(false)
	if err != nil || !slices.Equal(got, []netip.Addr{a("198.18.0.1"), a("198.18.2.1")}) {
		t.Errorf("Thunderbolt only: %v, %v; want 198.18.0.1 and 198.18.2.1", got, err)
	}
	got, err = servingAddrs(true)
	if err != nil || !slices.Equal(got, []netip.Addr{a("198.18.0.1"), a("198.18.2.1"), a("198.19.0.1")}) {
		t.Errorf("--any-interface: %v, %v; want the LAN address too", got, err)
	}

	// No Thunderbolt link up: the error says what to do.
	withInterfaces(t, func() ([]netif.Interface, error) {
		ifs, _ := fakeInterfaces()
		return slices.DeleteFunc(ifs, func(i netif.Interface) bool { return i.Up && i.Thunderbolt }), nil
	})
	_, err = servingAddrs(false)
	for _, w := range []string{"no Thunderbolt interface is up", "eth1 198.19.0.1", "docs/tutorial.md", "--bind", "--any-interface"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	if got, err := servingAddrs(true); err != nil || len(got) != 1 {
		t.Errorf("--any-interface without Thunderbolt: %v, %v", got, err)
	}
}

func TestCheckArrival(t *testing.T) {
	withInterfaces(t, fakeInterfaces)
	a := netip.MustParseAddr
	peer := a("198.19.0.2")
	for _, ok := range []string{"127.0.0.1", "198.18.0.1", "198.18.2.1"} {
		if err := checkArrival("pingpong", a(ok), peer); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	err := checkArrival("pingpong", a("198.19.0.1"), peer)
	for _, w := range []string{"refused the connection from 198.19.0.2", "eth1 (ethernet, not a Thunderbolt interface)", "--bind 198.19.0.1", "--any-interface"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	if err := checkArrival("serve", a("203.0.113.9"), peer); err == nil {
		t.Error("an address no interface has was accepted")
	}
}
