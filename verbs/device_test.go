package verbs

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/transport/netif"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
)

func TestMTUForLink(t *testing.T) {
	for link, want := range map[int]MTU{
		1500: MTU1024, 4200: MTU4096, 4150: MTU2048, 9000: MTU4096, 65520: MTU4096,
		4176: MTU4096, 4175: MTU2048, 1280: MTU1024, 1103: MTU512, 576: MTU256, 0: MTU256, 65536: MTU4096,
	} {
		if got := MTUForLink(link); got != want {
			t.Errorf("MTUForLink(%d) = %v, want %v", link, got, want)
		}
	}
}

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func TestNodeGUID(t *testing.T) {
	tests := []struct {
		mac  string
		want string
	}{
		// RFC 4291 appendix A: 34-56-78-9A-BC-DE -> 3656:78ff:fe9a:bcde.
		{"34:56:78:9a:bc:de", "3656:78ff:fe9a:bcde"},
		// The ibv_devinfo example of tools-and-discovery.md §5.2.
		{"00:66:04:12:34:56", "0266:04ff:fe12:3456"},
		// A locally administered MAC (thunderbolt-net's kind) loses the bit.
		{"02:fc:00:00:00:01", "00fc:00ff:fe00:0001"},
		// An 8-byte hardware address is an EUI-64 already.
		{"00:11:22:33:44:55:66:77", "0011:2233:4455:6677"},
	}
	for _, tt := range tests {
		if got := nodeGUID(mac(tt.mac), "host", "eth0").String(); got != tt.want {
			t.Errorf("nodeGUID(%s) = %s, want %s", tt.mac, got, tt.want)
		}
	}

	// The GUID is the interface identifier of the kernel's EUI-64
	// link-local address for the same MAC (fe80::fc:ff:fe00:1 for
	// 02:fc:00:00:00:01), as rxe derives both with addrconf_addr_eui48.
	ll := netip.MustParseAddr("fe80::fc:ff:fe00:1").As16()
	var iid GUID
	for _, b := range ll[8:] {
		iid = iid<<8 | GUID(b)
	}
	if g := nodeGUID(mac("02:fc:00:00:00:01"), "", ""); g != iid {
		t.Errorf("GUID %v, link-local interface id %v", g, iid)
	}

	// Without a MAC: stable, distinct per host and netdev, unicast and
	// locally administered.
	a := nodeGUID(nil, "alpha", "lo")
	if b := nodeGUID(nil, "alpha", "lo"); a != b {
		t.Errorf("hash not stable: %v, %v", a, b)
	}
	if b := nodeGUID(nil, "beta", "lo"); a == b {
		t.Errorf("same GUID %v on two hosts", a)
	}
	if b := nodeGUID(nil, "alpha", "wg0"); a == b {
		t.Errorf("same GUID %v on two netdevs", a)
	}
	if z := nodeGUID(mac("00:00:00:00:00:00"), "alpha", "lo"); z != a {
		t.Errorf("all-zero MAC: %v, want the hash %v", z, a)
	}
	for _, g := range []GUID{a, nodeGUID(nil, "", "")} {
		if top := byte(g >> 56); top&0x01 != 0 || top&0x02 == 0 {
			t.Errorf("hashed GUID %v: first byte %#02x, want unicast and locally administered", g, top)
		}
	}
}

func TestGUIDString(t *testing.T) {
	if got := GUID(0x026604fffe123456).String(); got != "0266:04ff:fe12:3456" {
		t.Errorf("got %s", got)
	}
	if got := GUID(0).String(); got != "0000:0000:0000:0000" {
		t.Errorf("got %s", got)
	}
	if got := string(GUID(0xffffffffffffffff).AppendTo([]byte("guid "))); got != "guid ffff:ffff:ffff:ffff" {
		t.Errorf("got %s", got)
	}
}

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// fakeInterfaces is a Linux host with loopback, a NIC, two Thunderbolt
// links (one renamed), Wi-Fi that is down and a dummy without addresses.
func fakeInterfaces() []netif.Interface {
	return []netif.Interface{
		{Name: "lo", Index: 1, MTU: 65536, Addrs: pfx("127.0.0.1/8", "::1/128"), Up: true, Loopback: true, Kind: netif.KindLoopback},
		{Name: "eth0", Index: 2, MTU: 1500, HardwareAddr: mac("52:54:00:12:34:56"), Up: true, Kind: netif.KindEthernet, Speed: 10e9,
			Addrs: pfx("fe80::5054:ff:fe12:3456/64", "192.0.2.10/24", "2001:db8::10/64", "192.0.2.11/24")},
		{Name: "wlan0", Index: 3, MTU: 1500, HardwareAddr: mac("a4:fc:14:0b:33:9f"), Addrs: pfx("10.1.1.5/24"), Kind: netif.KindWireless},
		{Name: "thunderbolt0", Index: 7, MTU: 65520, HardwareAddr: mac("12:34:56:78:9a:bc"), Up: true, Thunderbolt: true,
			Kind: netif.KindThunderbolt, Speed: 40e9, Addrs: pfx("169.254.10.1/16", "fe80::1034:56ff:fe78:9abc/64")},
		{Name: "en05", Index: 5, MTU: 4150, HardwareAddr: mac("22:34:56:78:9a:bc"), Up: true, Thunderbolt: true,
			Kind: netif.KindThunderbolt, Addrs: pfx("fe80::2034:56ff:fe78:9abc/64")},
		{Name: "dummy0", Index: 4, MTU: 1500, Up: true, Kind: netif.KindVirtual},
	}
}

func names(devs []*Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

func TestBuildDevicesSelectionAndOrder(t *testing.T) {
	tests := []struct {
		name string
		opts *DeviceListOptions
		want []string
	}{
		{"default", nil, []string{"tb_en05", "tb_thunderbolt0", "tb_eth0"}},
		{"loopback", &DeviceListOptions{IncludeLoopback: true}, []string{"tb_en05", "tb_thunderbolt0", "tb_eth0", "tb_lo"}},
		{"all", &DeviceListOptions{All: true}, []string{"tb_en05", "tb_thunderbolt0", "tb_eth0", "tb_wlan0", "tb_dummy0", "tb_lo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := names(buildDevices(fakeInterfaces(), tt.opts, "host"))
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if got := buildDevices(nil, nil, "host"); len(got) != 0 {
		t.Errorf("no interfaces: %v", names(got))
	}
}

func deviceNamed(t *testing.T, devs []*Device, name string) *Device {
	t.Helper()
	for _, d := range devs {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no device %s in %v", name, names(devs))
	return nil
}

func TestBuildDevicesAttributes(t *testing.T) {
	devs := buildDevices(fakeInterfaces(), &DeviceListOptions{All: true}, "host")

	eth := deviceNamed(t, devs, "tb_eth0")
	if eth.Netdev != "eth0" || eth.Thunderbolt || eth.LinkMTU != 1500 || eth.ActiveMTU != MTU1024 || eth.MaxMTU != MTU4096 {
		t.Errorf("eth0: %+v", eth)
	}
	if eth.PortState != PortActive || eth.PhysState != PhysStateLinkUp {
		t.Errorf("eth0: state %v/%v, want ACTIVE/LINK_UP", eth.PortState, eth.PhysState)
	}
	if eth.NodeGUID.String() != "5054:00ff:fe12:3456" {
		t.Errorf("eth0: node GUID %v", eth.NodeGUID)
	}
	wantGIDs := []GIDEntry{
		{0, wire.GIDFromAddr(netip.MustParseAddr("192.0.2.10")), GIDTypeRoCEv2, netip.MustParseAddr("192.0.2.10")},
		{1, wire.GIDFromAddr(netip.MustParseAddr("192.0.2.11")), GIDTypeRoCEv2, netip.MustParseAddr("192.0.2.11")},
		{2, wire.GIDFromAddr(netip.MustParseAddr("2001:db8::10")), GIDTypeRoCEv2, netip.MustParseAddr("2001:db8::10")},
		{3, wire.GIDFromAddr(netip.MustParseAddr("fe80::5054:ff:fe12:3456")), GIDTypeRoCEv2, netip.MustParseAddr("fe80::5054:ff:fe12:3456%eth0")},
	}
	if !slices.Equal(eth.GIDs, wantGIDs) {
		t.Errorf("eth0 GIDs:\n got %v\nwant %v", eth.GIDs, wantGIDs)
	}
	if g := eth.GIDs[0].GID.String(); g != "::ffff:192.0.2.10" {
		t.Errorf("IPv4 GID %s, want ::ffff:192.0.2.10", g)
	}
	if s := eth.GIDs[0].Type.String(); s != "RoCE v2" {
		t.Errorf("GID type %q", s)
	}

	tb := deviceNamed(t, devs, "tb_thunderbolt0")
	if !tb.Thunderbolt || tb.ActiveMTU != MTU4096 || tb.Interface.Kind != netif.KindThunderbolt {
		t.Errorf("thunderbolt0: %+v", tb)
	}
	if en := deviceNamed(t, devs, "tb_en05"); en.ActiveMTU != MTU2048 || len(en.GIDs) != 1 || en.GIDs[0].Addr.Zone() != "en05" {
		t.Errorf("en05: MTU %v GIDs %v", en.ActiveMTU, en.GIDs)
	}

	wlan := deviceNamed(t, devs, "tb_wlan0")
	if wlan.PortState != PortDown || wlan.PhysState != PhysStateDisabled {
		t.Errorf("wlan0: state %v/%v, want DOWN/DISABLED", wlan.PortState, wlan.PhysState)
	}
	if d := deviceNamed(t, devs, "tb_dummy0"); len(d.GIDs) != 0 || d.NodeGUID == 0 {
		t.Errorf("dummy0: GIDs %v GUID %v", d.GIDs, d.NodeGUID)
	}
	lo := deviceNamed(t, devs, "tb_lo")
	if lo.NodeGUID != nodeGUID(nil, "host", "lo") || lo.ActiveMTU != MTU4096 {
		t.Errorf("lo: GUID %v MTU %v", lo.NodeGUID, lo.ActiveMTU)
	}
}

func TestQueryDevice(t *testing.T) {
	d := deviceNamed(t, buildDevices(fakeInterfaces(), nil, "host"), "tb_eth0")
	a := d.QueryDevice()
	if a.NodeGUID != d.NodeGUID || a.SysImageGUID != d.NodeGUID {
		t.Errorf("GUIDs %v %v, want %v", a.NodeGUID, a.SysImageGUID, d.NodeGUID)
	}
	if !strings.HasPrefix(a.FWVer, "tbrdma ") || len(a.FWVer) <= len("tbrdma ") {
		t.Errorf("fw_ver %q", a.FWVer)
	}
	checks := []struct {
		name      string
		got, want int
	}{
		{"max_qp", a.MaxQP, MaxQP}, {"max_qp_wr", a.MaxQPWR, MaxQPWR}, {"max_sge", a.MaxSGE, MaxSGE},
		{"max_cqe", a.MaxCQE, MaxCQE}, {"max_mr", a.MaxMR, MaxMR}, {"max_qp_rd_atom", a.MaxQPRdAtom, MaxRdAtomic},
		{"max_qp_init_rd_atom", a.MaxQPInitRdAtom, MaxRdAtomic}, {"max_srq_wr", a.MaxSRQWR, MaxSRQWR},
		{"max_srq_sge", a.MaxSRQSGE, MaxSGE}, {"max_pkeys", a.MaxPKeys, 1}, {"phys_port_cnt", int(a.PhysPortCnt), 1},
		{"max_inline_data", a.MaxInlineData, MaxInlineData}, {"max_msg_sz", int(a.MaxMsgSz), MaxMessageSize},
		{"vendor_id", int(a.VendorID), 0xFFFFFF},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max_cq", a.MaxCQ}, {"max_pd", a.MaxPD}, {"max_srq", a.MaxSRQ}, {"max_ah", a.MaxAH}, {"max_res_rd_atom", a.MaxResRdAtom}} {
		if c.v <= 0 {
			t.Errorf("%s = %d, want > 0", c.name, c.v)
		}
	}
	if a.AtomicCap != AtomicHCA || a.AtomicCap.String() != "ATOMIC_HCA" {
		t.Errorf("atomic_cap %v", a.AtomicCap)
	}
	if a.MaxMRSize == 0 || a.PageSizeCap == 0 || a.PageSizeCap&0xFFF != 0 {
		t.Errorf("max_mr_size %#x page_size_cap %#x", a.MaxMRSize, a.PageSizeCap)
	}
	if got, want := a.DeviceCapFlags.String(), "BAD_PKEY_CNTR|BAD_QKEY_CNTR|CURR_QP_STATE_MOD|SYS_IMAGE_GUID|RC_RNR_NAK_GEN"; got != want {
		t.Errorf("device_cap_flags %s, want %s", got, want)
	}
}

func TestQueryPort(t *testing.T) {
	devs := buildDevices(fakeInterfaces(), &DeviceListOptions{All: true}, "host")
	d := deviceNamed(t, devs, "tb_thunderbolt0")
	p, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	want := PortAttr{
		State: PortActive, MaxMTU: MTU4096, ActiveMTU: MTU4096, GIDTblLen: 2, PortCapFlags: PortCapCMSup,
		MaxMsgSz: MaxMessageSize, PKeyTblLen: 1, MaxVLNum: 1, ActiveWidth: Width4X, ActiveSpeed: SpeedFDR10,
		PhysState: PhysStateLinkUp, LinkLayer: LinkLayerEthernet, LinkMTU: 65520, LinkSpeed: 40e9,
	}
	if p != want {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
	if p.LinkLayer.String() != "Ethernet" || p.State.String() != "ACTIVE" || p.PortCapFlags.String() != "CM_SUP" {
		t.Errorf("strings: %v %v %v", p.LinkLayer, p.State, p.PortCapFlags)
	}

	// Unknown speed stays unknown.
	p, _ = deviceNamed(t, devs, "tb_en05").QueryPort(1)
	if p.ActiveSpeed != 0 || p.ActiveWidth != 0 || p.ActiveSpeed.String() != "unknown" {
		t.Errorf("en05: speed %v width %v", p.ActiveSpeed, p.ActiveWidth)
	}
	p, _ = deviceNamed(t, devs, "tb_wlan0").QueryPort(1)
	if p.State != PortDown || p.State.String() != "DOWN" || p.PhysState.String() != "DISABLED" {
		t.Errorf("wlan0: %v %v", p.State, p.PhysState)
	}

	for _, port := range []uint8{0, 2} {
		if _, err := d.QueryPort(port); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("QueryPort(%d): %v, want ErrInvalidArgument", port, err)
		}
	}
}

func TestIBSpeed(t *testing.T) {
	tests := []struct {
		bps   uint64
		speed PortSpeed
		width PortWidth
	}{
		{0, 0, 0},
		{100e6, SpeedSDR, Width1X},
		{1e9, SpeedSDR, Width1X},
		{2.5e9, SpeedFDR10, Width1X},
		{10e9, SpeedFDR10, Width1X},
		{20e9, SpeedDDR, Width4X},
		{25e9, SpeedEDR, Width1X},
		{40e9, SpeedFDR10, Width4X},
		{80e9, SpeedEDR, Width4X},
		{100e9, SpeedEDR, Width4X},
	}
	for _, tt := range tests {
		s, w := ibSpeed(tt.bps)
		if s != tt.speed || w != tt.width {
			t.Errorf("ibSpeed(%d) = %v %v, want %v %v", tt.bps, s, w, tt.speed, tt.width)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{PortActiveDefer.String(), "ACTIVE_DEFER"}, {PortState(9).String(), "portstate(9)"},
		{PhysStateLinkUp.String(), "LINK_UP"}, {PortPhysState(0).String(), "physstate(0)"},
		{Width4X.String(), "4X"}, {Width2X.String(), "2X"}, {SpeedEDR.String(), "25.0 Gbps"},
		{GIDTypeRoCEv1.String(), "RoCE v1"}, {GIDType(7).String(), "gidtype(7)"},
		{LinkLayer(9).String(), "Unknown"}, {DeviceCapFlags(0).String(), "0"},
		{(DeviceSRQResize | 1<<30).String(), "SRQ_RESIZE|0x40000000"},
		{(PortCapCMSup | PortCapIPBasedGIDs).String(), "CM_SUP|IP_BASED_GIDS"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestDeviceOpen opens contexts on a fake loopback device at an address no
// other test binds.
func TestDeviceOpen(t *testing.T) {
	const ip = "127.0.71.1"
	ifs := []netif.Interface{{Name: "lo", Index: 1, MTU: 9000, Up: true, Loopback: true, Kind: netif.KindLoopback,
		Addrs: pfx("::1/128", ip+"/8")}}
	d := buildDevices(ifs, &DeviceListOptions{IncludeLoopback: true}, "host")[0]

	ctx, err := d.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Device() != d {
		t.Errorf("Device() = %p, want %p", ctx.Device(), d)
	}
	if got := ctx.LocalAddr(); got != netip.MustParseAddrPort(ip+":4791") {
		t.Errorf("bound %v", got)
	}
	if ctx.ActiveMTU() != MTU4096 || ctx.GID() != d.GIDs[0].GID {
		t.Errorf("MTU %v GID %v", ctx.ActiveMTU(), ctx.GID())
	}
	ctx.Close()

	// An explicit address, in its IPv4-mapped form, and an MTU override.
	ctx, err = d.Open(&Options{Addr: netip.MustParseAddr("::ffff:" + ip), ActiveMTU: MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.ActiveMTU() != MTU1024 || ctx.LocalAddr().Addr() != netip.MustParseAddr(ip) {
		t.Errorf("MTU %v addr %v", ctx.ActiveMTU(), ctx.LocalAddr())
	}
	ctx.Close()

	if _, err := d.Open(&Options{Addr: netip.MustParseAddr("127.0.71.2")}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("foreign address: %v, want ErrInvalidArgument", err)
	}
	bare := buildDevices([]netif.Interface{{Name: "dummy0", Index: 3}}, &DeviceListOptions{All: true}, "host")[0]
	if _, err := bare.Open(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("device without addresses: %v, want ErrInvalidArgument", err)
	}

	// With a Conn the device only lends its identity and MTU.
	netw := transporttest.NewNetwork(1)
	ctx, err = bare.Open(&Options{Conn: netw.Attach(netip.MustParseAddrPort("10.9.9.9:4791"))})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Device() != bare || ctx.ActiveMTU() != MTUForLink(0) {
		t.Errorf("Conn context: device %v MTU %v", ctx.Device(), ctx.ActiveMTU())
	}
	ctx.Close()

	plain, err := NewContext(&Options{Conn: netw.Attach(netip.MustParseAddrPort("10.9.9.8:4791"))})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Device() != nil {
		t.Errorf("NewContext context has device %v", plain.Device())
	}
	plain.Close()
}

// TestDevicesLive lists the host's devices: there is always a loopback one.
func TestDevicesLive(t *testing.T) {
	devs, err := Devices(&DeviceListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var lo *Device
	for _, d := range devs {
		t.Logf("%s netdev=%s tb=%v kind=%s guid=%v mtu=%d/%v state=%v gids=%v",
			d.Name, d.Netdev, d.Thunderbolt, d.Interface.Kind, d.NodeGUID, d.LinkMTU, d.ActiveMTU, d.PortState, d.GIDs)
		if d.Name != DeviceNamePrefix+d.Netdev {
			t.Errorf("%s: name does not follow the netdev %s", d.Name, d.Netdev)
		}
		if d.Interface.Loopback && lo == nil {
			lo = d
		}
	}
	if lo == nil {
		t.Fatal("no loopback device")
	}
	if !slices.ContainsFunc(lo.GIDs, func(e GIDEntry) bool { return e.Addr.IsLoopback() }) {
		t.Errorf("%s: no loopback GID in %v", lo.Name, lo.GIDs)
	}
	if lo != devs[len(devs)-1] && !devs[len(devs)-1].Interface.Loopback {
		t.Errorf("loopback device %s is not listed last", lo.Name)
	}
	byName, err := DeviceByName(lo.Netdev)
	if err != nil || byName.Name != lo.Name {
		t.Errorf("DeviceByName(%s) = %v, %v", lo.Netdev, byName, err)
	}
	if _, err := DeviceByName("tb_no_such_netdev"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceByName(missing): %v, want ErrNoDevice", err)
	}
}
