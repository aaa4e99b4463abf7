package netif

import (
	"net"
	"net/netip"
	"slices"
	"testing"
)

func TestListFindsLoopback(t *testing.T) {
	ifs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	var lo *Interface
	for i := range ifs {
		t.Logf("%+v", ifs[i])
		if ifs[i].Kind == "" {
			t.Errorf("%s: empty kind", ifs[i].Name)
		}
		if ifs[i].Loopback && lo == nil {
			lo = &ifs[i]
		}
		if i > 0 && ifs[i-1].Index > ifs[i].Index {
			t.Errorf("not in index order: %s (%d) before %s (%d)", ifs[i-1].Name, ifs[i-1].Index, ifs[i].Name, ifs[i].Index)
		}
	}
	if lo == nil {
		t.Fatal("no loopback interface")
	}
	if lo.Kind != KindLoopback || lo.Thunderbolt {
		t.Errorf("loopback: %+v", *lo)
	}
	if !slices.ContainsFunc(lo.Addrs, func(p netip.Prefix) bool { return p.Addr().IsLoopback() }) {
		t.Errorf("loopback has no loopback address: %v", lo.Addrs)
	}
}

func TestPrefixes(t *testing.T) {
	addrs := []net.Addr{
		&net.IPNet{IP: net.ParseIP("10.0.0.1"), Mask: net.CIDRMask(24, 32)},        // 16-byte IP, 4-byte mask
		&net.IPNet{IP: net.ParseIP("10.0.0.2").To4(), Mask: net.CIDRMask(30, 32)},  // 4-byte IP
		&net.IPNet{IP: net.ParseIP("169.254.3.4"), Mask: net.CIDRMask(96+16, 128)}, // IPv4 with a 16-byte mask
		&net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
		&net.IPAddr{IP: net.ParseIP("2001:db8::5")},
		&net.UnixAddr{Name: "x"},
	}
	got := prefixes(addrs)
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.1/24"),
		netip.MustParsePrefix("10.0.0.2/30"),
		netip.MustParsePrefix("169.254.3.4/16"),
		netip.MustParsePrefix("fe80::1/64"),
		netip.MustParsePrefix("2001:db8::5/128"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}
