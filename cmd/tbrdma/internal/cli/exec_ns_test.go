package cli

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/verbs"
)

func TestParseNSMode(t *testing.T) {
	for in, want := range map[string]nsMode{"": nsAuto, "auto": nsAuto, " ON ": nsOn, "1": nsOn, "off": nsOff, "no": nsOff} {
		if got, err := parseNSMode(in); err != nil || got != want {
			t.Errorf("parseNSMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := parseNSMode("sometimes"); err == nil {
		t.Error(`parseNSMode("sometimes"): no error`)
	}
}

func TestCPUMask(t *testing.T) {
	for n, want := range map[int]string{0: "", 1: "1", 2: "3", 8: "ff", 32: "ffffffff", 33: "00000001,ffffffff", 72: "000000ff,ffffffff,ffffffff"} {
		if got := cpuMask(n); got != want {
			t.Errorf("cpuMask(%d) = %q, want %q", n, got, want)
		}
	}
}

func gidOf(a netip.Addr) verbs.GID {
	var g verbs.GID
	b := a.As16()
	copy(g[:], b[:])
	return g
}

// TestSysfsView checks the tree against the library's GID layout: the
// k-th address at 2k ("IB/RoCE v1") and 2k+1 ("RoCE v2"), each with its
// netdev; one uverbsN per device in list order.
func TestSysfsView(t *testing.T) {
	v4, ll := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fe80::1:2")
	devs := []*verbs.Device{
		{Name: "tb_thunderbolt0", Netdev: "thunderbolt0", NodeGUID: 0x0266_04ff_fe12_3456,
			GIDs:      []verbs.GIDEntry{{GID: gidOf(netip.AddrFrom16(v4.As16())), Addr: v4}, {GID: gidOf(ll), Addr: ll}},
			PortState: verbs.PortActive, PhysState: verbs.PhysStateLinkUp},
		{Name: "tb_eth0", Netdev: "eth0", GIDs: []verbs.GIDEntry{{GID: gidOf(netip.AddrFrom16(v4.As16()))}},
			PortState: verbs.PortDown, PhysState: verbs.PhysStateDisabled},
	}
	hw := func(netdev, file string) (string, bool) {
		if netdev == "eth0" && file == "numa_node" {
			return "1", true
		}
		return "", false
	}
	files := map[string]string{}
	for _, f := range sysfsView(devs, hw, "f") {
		if _, dup := files[f.name]; dup {
			t.Errorf("%s twice", f.name)
		}
		files[f.name] = f.data
	}
	p := "infiniband/tb_thunderbolt0/ports/1/"
	want := map[string]string{
		p + "gids/0":                           "0000:0000:0000:0000:0000:ffff:c612:0001",
		p + "gids/1":                           "0000:0000:0000:0000:0000:ffff:c612:0001",
		p + "gids/2":                           "fe80:0000:0000:0000:0000:0000:0001:0002",
		p + "gids/3":                           "fe80:0000:0000:0000:0000:0000:0001:0002",
		p + "gid_attrs/types/0":                "IB/RoCE v1",
		p + "gid_attrs/types/1":                "RoCE v2",
		p + "gid_attrs/types/2":                "IB/RoCE v1",
		p + "gid_attrs/types/3":                "RoCE v2",
		p + "gid_attrs/ndevs/0":                "thunderbolt0",
		p + "gid_attrs/ndevs/3":                "thunderbolt0",
		p + "state":                            "4: ACTIVE",
		p + "phys_state":                       "5: LinkUp",
		p + "link_layer":                       "Ethernet",
		"infiniband/tb_thunderbolt0/node_guid": "0266:04ff:fe12:3456",
		"infiniband/tb_thunderbolt0/device/numa_node":  "-1",
		"infiniband/tb_thunderbolt0/device/local_cpus": "f",
		"infiniband/tb_eth0/device/numa_node":          "1",
		"infiniband/tb_eth0/ports/1/state":             "1: DOWN",
		"infiniband/tb_eth0/ports/1/gid_attrs/types/1": "RoCE v2",
		"infiniband_verbs/uverbs0/ibdev":               "tb_thunderbolt0",
		"infiniband_verbs/uverbs1/ibdev":               "tb_eth0",
	}
	for name, data := range want {
		if got, ok := files[name]; !ok || got != data+"\n" {
			t.Errorf("%s = %q (present %v), want %q", name, got, ok, data+"\n")
		}
	}
	for name := range files {
		if strings.Contains(name, "tb_eth0/ports/1/gids/") && !strings.HasSuffix(name, "/0") && !strings.HasSuffix(name, "/1") {
			t.Errorf("%s: beyond tb_eth0's table of 2", name)
		}
	}
}
