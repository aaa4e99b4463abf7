package verbs

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/tbrdma/tbrdma/transport/netif"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// DeviceNamePrefix starts every device name: the device on netdev eth0 is
// "tb_eth0". (rdma_rxe numbers its devices, rxe0, rxe1 …, in the order they
// were added; a name made from the netdev stays the same across runs and
// reboots as long as the interface keeps its name, and cannot collide with
// rxe's or macOS's rdma_enX devices.)
const DeviceNamePrefix = "tb_"

// ErrNoDevice is returned by [DeviceByName] when no device has the name.
var ErrNoDevice = errors.New("verbs: no such device")

// DeviceListOptions select the devices [Devices] returns.
type DeviceListOptions struct {
	// All lists a device for every interface: loopback, down and
	// address-less ones too (their ports are DOWN or have no GIDs).
	All bool
	// IncludeLoopback adds loopback interfaces that are up: both ends of a
	// test or demo on one machine.
	IncludeLoopback bool
}

// Device is a soft RDMA device (struct ibv_device plus what ibv_devinfo
// shows): one per network interface, with one port. It is a snapshot of the
// interface taken by [Devices]; list again to see changes. Open it to get a
// [Context].
type Device struct {
	Name        string // DeviceNamePrefix + Netdev
	Netdev      string // the network interface
	Thunderbolt bool   // the interface is a Thunderbolt network link
	NodeGUID    GUID
	// GIDs is the port's GID table, RoCE v2 entries only: IPv4 addresses
	// IPv4-mapped first, then IPv6 addresses, then IPv6 link-local ones,
	// each group in the order the system lists them. Index 0 is thus the
	// address Open binds by default.
	GIDs      []GIDEntry
	LinkMTU   int // the interface's MTU in bytes
	ActiveMTU MTU // MTUForLink(LinkMTU), as rdma_rxe computes it
	MaxMTU    MTU // always MTU4096
	PortState PortState
	PhysState PortPhysState
	// Interface is the interface as netif listed it: kind, driver or
	// hardware port, addresses with prefix lengths, speed, peer.
	Interface netif.Interface
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index int
	GID   GID
	Type  GIDType
	// Addr is the interface address the GID stands for; an IPv6
	// link-local address carries the netdev as its zone.
	Addr netip.Addr
}

// Devices lists one soft device per usable network interface (up, with at
// least one address, not loopback), Thunderbolt interfaces first; opts may
// widen the list. Within each group (Thunderbolt, other, loopback) devices
// are in interface index order.
func Devices(opts *DeviceListOptions) ([]*Device, error) {
	ifs, err := netif.List()
	if err != nil {
		return nil, fmt.Errorf("verbs: list devices: %w", err)
	}
	host, _ := os.Hostname()
	return buildDevices(ifs, opts, host), nil
}

// DeviceByName returns the device called name, or the one on the netdev
// called name, whatever its state. The error wraps [ErrNoDevice] when there
// is none.
func DeviceByName(name string) (*Device, error) {
	devs, err := Devices(&DeviceListOptions{All: true})
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		if d.Name == name || d.Netdev == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoDevice, name)
}

// buildDevices makes the device list from an interface list; host is the
// host name, mixed into the GUID of interfaces without a MAC address.
func buildDevices(ifs []netif.Interface, opts *DeviceListOptions, host string) []*Device {
	if opts == nil {
		opts = &DeviceListOptions{}
	}
	var devs []*Device
	for _, ifc := range ifs {
		if !opts.All && (!ifc.IsUsable() || ifc.Loopback && !opts.IncludeLoopback) {
			continue
		}
		devs = append(devs, newDevice(ifc, host))
	}
	rank := func(d *Device) int {
		switch {
		case d.Thunderbolt:
			return 0
		case d.Interface.Loopback:
			return 2
		}
		return 1
	}
	slices.SortStableFunc(devs, func(a, b *Device) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.Interface.Index, b.Interface.Index), strings.Compare(a.Name, b.Name))
	})
	return devs
}

func newDevice(ifc netif.Interface, host string) *Device {
	d := &Device{
		Name:        DeviceNamePrefix + ifc.Name,
		Netdev:      ifc.Name,
		Thunderbolt: ifc.Thunderbolt,
		NodeGUID:    nodeGUID(ifc.HardwareAddr, host, ifc.Name),
		GIDs:        gidTable(ifc),
		LinkMTU:     ifc.MTU,
		ActiveMTU:   MTUForLink(ifc.MTU),
		MaxMTU:      MTU4096,
		PortState:   PortDown,
		PhysState:   PhysStateDisabled,
		Interface:   ifc,
	}
	// As rdma_rxe: ACTIVE and LinkUp while the netdev is running with
	// carrier, DOWN and Disabled otherwise.
	if ifc.Up {
		d.PortState, d.PhysState = PortActive, PhysStateLinkUp
	}
	return d
}

// gidTable builds the RoCE v2 GID table of an interface: IPv4, then IPv6,
// then IPv6 link-local addresses.
func gidTable(ifc netif.Interface) []GIDEntry {
	var v4, v6, ll []netip.Addr
	for _, p := range ifc.Addrs {
		a := p.Addr().Unmap()
		switch {
		case a.Is4():
			v4 = append(v4, a)
		case a.IsLinkLocalUnicast():
			ll = append(ll, a.WithZone(ifc.Name))
		default:
			v6 = append(v6, a)
		}
	}
	var gids []GIDEntry
	for _, a := range slices.Concat(v4, v6, ll) {
		g := wire.GIDFromAddr(a)
		if slices.ContainsFunc(gids, func(e GIDEntry) bool { return e.GID == g }) {
			continue
		}
		gids = append(gids, GIDEntry{Index: len(gids), GID: g, Type: GIDTypeRoCEv2, Addr: a})
	}
	return gids
}

// nodeGUID derives a node GUID as rdma_rxe does (addrconf_addr_eui48): the
// MAC with ff:fe inserted in the middle and the universal/local bit (0x02
// of the first byte) flipped. An 8-byte hardware address is used as it
// is. Without a MAC (loopback, tunnels) the GUID is a hash of the host and
// interface names, stable across runs, marked locally administered.
func nodeGUID(mac net.HardwareAddr, host, netdev string) GUID {
	switch {
	case len(mac) == 6 && !isZero(mac):
		return GUID(binary.BigEndian.Uint64([]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}))
	case len(mac) == 8 && !isZero(mac):
		return GUID(binary.BigEndian.Uint64(mac))
	}
	h := fnv.New64a()
	h.Write([]byte(host))
	h.Write([]byte{0})
	h.Write([]byte(netdev))
	g := h.Sum64()
	g = g&^(0x01<<56) | 0x02<<56 // unicast, locally administered
	return GUID(g)
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Open opens a context on the device: a UDP endpoint on port 4791 of the
// device's first GID address (an IPv4 one when it has any), or of
// opts.Addr, which must then be one of the device's addresses. The
// context's active MTU is the device's unless opts.ActiveMTU is set. Other
// options are as for [NewContext]; with opts.Conn set, that Conn is used
// and the device supplies the MTU and identity only. The endpoint is bound
// to the device's interface (SO_BINDTODEVICE on Linux, IP_BOUND_IF on
// macOS): packets for its address that arrive on any other interface are
// not processed; opts.AnyInterface leaves it unbound.
func (d *Device) Open(opts *Options) (*Context, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Addr.IsValid() {
		a, ok := d.lookupAddr(o.Addr)
		if !ok {
			return nil, fmt.Errorf("verbs: open %s: %v is not an address of %s: %w", d.Name, o.Addr, d.Netdev, ErrInvalidArgument)
		}
		o.Addr = a
	} else if o.Conn == nil {
		if len(d.GIDs) == 0 {
			return nil, fmt.Errorf("verbs: open %s: %s has no IP address: %w", d.Name, d.Netdev, ErrInvalidArgument)
		}
		o.Addr = d.GIDs[0].Addr
	}
	if o.ActiveMTU == 0 {
		o.ActiveMTU = d.ActiveMTU
	}
	if o.Interface == "" && !d.Interface.Loopback && !o.AnyInterface {
		// Only packets that arrive on the device's own link reach it.
		o.Interface = d.Netdev
	}
	c, err := NewContext(&o)
	if err != nil {
		return nil, fmt.Errorf("verbs: open %s: %w", d.Name, err)
	}
	c.dev = d
	return c, nil
}

// lookupAddr finds a in the GID table, ignoring zones and IPv4 mapping, and
// returns the table's form of it.
func (d *Device) lookupAddr(a netip.Addr) (netip.Addr, bool) {
	a = a.Unmap().WithZone("")
	for _, e := range d.GIDs {
		if e.Addr.WithZone("") == a {
			return e.Addr, true
		}
	}
	return netip.Addr{}, false
}

// Device returns the device the context was opened on, or nil for a
// context made by [NewContext].
func (c *Context) Device() *Device { return c.dev }

// Done returns a channel that is closed when the context is closed, for
// those that watch a context they do not own (tbrdma's counter publisher).
func (c *Context) Done() <-chan struct{} { return c.done }

// --- attributes ---------------------------------------------------------------

// Identity and advisory limits of a soft device. The limits tbrdma does not
// enforce (CQs, PDs, SRQs, AHs) are reported so that callers sizing their
// resources have a bound.
const (
	vendorID        = 0xFFFFFF // as rdma_rxe: no IEEE OUI
	maxCQ           = 16384
	maxPD           = 0x7FFC
	maxSRQ          = MaxQP
	maxAH           = 0x3FFF
	localCAAckDelay = 15
)

// DeviceAttr are a device's attributes and limits (struct ibv_device_attr;
// fields tbrdma has no use for, such as EE contexts, memory windows and
// multicast, are left out and are 0 in ibverbs terms).
type DeviceAttr struct {
	FWVer           string // "tbrdma <module version>"
	NodeGUID        GUID
	SysImageGUID    GUID // the node GUID, as rdma_rxe
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	DeviceCapFlags  DeviceCapFlags
	MaxSGE          int
	MaxSGERd        int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int // outstanding READ/atomic a QP may serve as responder
	MaxQPInitRdAtom int // outstanding READ/atomic a QP may issue
	MaxResRdAtom    int
	AtomicCap       AtomicCap
	MaxSRQ          int
	MaxSRQWR        int
	MaxSRQSGE       int
	MaxAH           int
	MaxPKeys        int
	LocalCAAckDelay uint8
	PhysPortCnt     uint8

	// Not in ibv_device_attr (ibverbs reports them per QP or per port).
	MaxInlineData int    // bytes of inline data a send WR may carry
	MaxMsgSz      uint64 // largest message, as PortAttr.MaxMsgSz
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (d *Device) QueryDevice() DeviceAttr {
	return DeviceAttr{
		FWVer:           FirmwareVersion(),
		NodeGUID:        d.NodeGUID,
		SysImageGUID:    d.NodeGUID,
		MaxMRSize:       1<<63 - 1,
		PageSizeCap:     uint64(^uint32(0)) &^ uint64(os.Getpagesize()-1),
		VendorID:        vendorID,
		MaxQP:           MaxQP,
		MaxQPWR:         MaxQPWR,
		DeviceCapFlags:  deviceCapFlags,
		MaxSGE:          MaxSGE,
		MaxSGERd:        MaxSGE,
		MaxCQ:           maxCQ,
		MaxCQE:          MaxCQE,
		MaxMR:           MaxMR,
		MaxPD:           maxPD,
		MaxQPRdAtom:     MaxRdAtomic,
		MaxQPInitRdAtom: MaxRdAtomic,
		MaxResRdAtom:    MaxQP * MaxRdAtomic,
		AtomicCap:       AtomicHCA,
		MaxSRQ:          maxSRQ,
		MaxSRQWR:        MaxSRQWR,
		MaxSRQSGE:       MaxSGE,
		MaxAH:           maxAH,
		MaxPKeys:        1,
		LocalCAAckDelay: localCAAckDelay,
		PhysPortCnt:     1,
		MaxInlineData:   MaxInlineData,
		MaxMsgSz:        MaxMessageSize,
	}
}

// PortAttr are a port's attributes (struct ibv_port_attr, the fields that
// mean something on RoCE).
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTblLen    int
	PortCapFlags PortCapFlags
	MaxMsgSz     uint64
	PKeyTblLen   int
	LID          uint16 // always 0: RoCE has no LIDs
	SMLID        uint16
	LMC          uint8
	MaxVLNum     uint8
	ActiveWidth  PortWidth // 0 when the link speed is unknown
	ActiveSpeed  PortSpeed // 0 when the link speed is unknown
	PhysState    PortPhysState
	LinkLayer    LinkLayer

	// Not in ibv_port_attr.
	LinkMTU   int    // the netdev's MTU in bytes
	LinkSpeed uint64 // bits per second; 0 when unknown
}

// QueryPort returns the attributes of port 1, the device's only port
// (ibv_query_port).
func (d *Device) QueryPort(port uint8) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, fmt.Errorf("verbs: query port %d of %s: the device has port 1 only: %w", port, d.Name, ErrInvalidArgument)
	}
	speed, width := ibSpeed(d.Interface.Speed)
	return PortAttr{
		State:        d.PortState,
		MaxMTU:       d.MaxMTU,
		ActiveMTU:    d.ActiveMTU,
		GIDTblLen:    len(d.GIDs),
		PortCapFlags: PortCapCMSup,
		MaxMsgSz:     MaxMessageSize,
		PKeyTblLen:   1,
		MaxVLNum:     1,
		ActiveWidth:  width,
		ActiveSpeed:  speed,
		PhysState:    d.PhysState,
		LinkLayer:    LinkLayerEthernet,
		LinkMTU:      d.LinkMTU,
		LinkSpeed:    d.Interface.Speed,
	}, nil
}

// ibSpeed maps an Ethernet link speed to an IB speed and width the way the
// kernel does for RoCE ports (ib_get_eth_speed). Unknown (0) stays unknown;
// the kernel would assume 1 Gb/s.
func ibSpeed(bps uint64) (PortSpeed, PortWidth) {
	switch mbps := bps / 1e6; {
	case bps == 0:
		return 0, 0
	case mbps <= 1000:
		return SpeedSDR, Width1X
	case mbps <= 10000:
		return SpeedFDR10, Width1X
	case mbps <= 20000:
		return SpeedDDR, Width4X
	case mbps <= 25000:
		return SpeedEDR, Width1X
	case mbps <= 40000:
		return SpeedFDR10, Width4X
	}
	return SpeedEDR, Width4X
}

const modulePath = "github.com/tbrdma/tbrdma"

// FirmwareVersion returns the fw_ver every device reports: "tbrdma" and
// the module version the binary was built with ("devel" when unknown).
func FirmwareVersion() string { return firmwareVersion() }

var firmwareVersion = sync.OnceValue(func() string {
	v := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == modulePath {
			v = bi.Main.Version
		}
		for _, m := range bi.Deps {
			if m.Path == modulePath {
				v = m.Version
			}
		}
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	return "tbrdma " + v
})

// --- value types ----------------------------------------------------------------

// GUID is a node or port GUID (EUI-64), in host order.
type GUID uint64

// String formats g as ibv_devinfo does: four groups of four hex digits,
// "0266:04ff:fe12:3456". (ibv_devices prints the 16 digits without
// colons: fmt.Sprintf("%016x", uint64(g)).)
func (g GUID) String() string { return string(g.AppendTo(nil)) }

// AppendTo appends the String form of g to b.
func (g GUID) AppendTo(b []byte) []byte {
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		b = append(b, hex[g>>(4*i)&0xF])
		if i%4 == 0 && i > 0 {
			b = append(b, ':')
		}
	}
	return b
}

// GIDType is the type of a GID table entry (enum ibv_gid_type).
type GIDType uint8

const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("gidtype(%d)", uint8(t))
}

// PortState is a port's logical state (enum ibv_port_state).
type PortState uint8

const (
	PortNOP         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

var portStateNames = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

// String returns the state's name as sysfs shows it ("ACTIVE");
// ibv_devinfo prefixes it with "PORT_".
func (s PortState) String() string {
	if int(s) < len(portStateNames) {
		return portStateNames[s]
	}
	return fmt.Sprintf("portstate(%d)", uint8(s))
}

// PortPhysState is a port's physical state (ibv_port_attr.phys_state).
type PortPhysState uint8

const (
	PhysStateSleep              PortPhysState = 1
	PhysStatePolling            PortPhysState = 2
	PhysStateDisabled           PortPhysState = 3
	PhysStatePortConfigTraining PortPhysState = 4
	PhysStateLinkUp             PortPhysState = 5
	PhysStateLinkErrorRecovery  PortPhysState = 6
	PhysStatePhyTest            PortPhysState = 7
)

var physStateNames = [...]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION_TRAINING",
	5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY_TEST"}

func (s PortPhysState) String() string {
	if int(s) < len(physStateNames) && physStateNames[s] != "" {
		return physStateNames[s]
	}
	return fmt.Sprintf("physstate(%d)", uint8(s))
}

// PortWidth is a port's active link width (ibv_port_attr.active_width).
type PortWidth uint8

const (
	Width1X  PortWidth = 1
	Width4X  PortWidth = 2
	Width8X  PortWidth = 4
	Width12X PortWidth = 8
	Width2X  PortWidth = 16
)

func (w PortWidth) String() string {
	switch w {
	case Width1X:
		return "1X"
	case Width2X:
		return "2X"
	case Width4X:
		return "4X"
	case Width8X:
		return "8X"
	case Width12X:
		return "12X"
	case 0:
		return "unknown"
	}
	return fmt.Sprintf("width(%d)", uint8(w))
}

// PortSpeed is a port's active per-lane speed (ibv_port_attr.active_speed).
type PortSpeed uint8

const (
	SpeedSDR   PortSpeed = 1   // 2.5 Gb/s
	SpeedDDR   PortSpeed = 2   // 5 Gb/s
	SpeedQDR   PortSpeed = 4   // 10 Gb/s
	SpeedFDR10 PortSpeed = 8   // 10 Gb/s
	SpeedFDR   PortSpeed = 16  // 14 Gb/s
	SpeedEDR   PortSpeed = 32  // 25 Gb/s
	SpeedHDR   PortSpeed = 64  // 50 Gb/s
	SpeedNDR   PortSpeed = 128 // 100 Gb/s
)

// String returns the per-lane rate as ibv_devinfo prints it ("25.0 Gbps").
func (s PortSpeed) String() string {
	switch s {
	case SpeedSDR:
		return "2.5 Gbps"
	case SpeedDDR:
		return "5.0 Gbps"
	case SpeedQDR, SpeedFDR10:
		return "10.0 Gbps"
	case SpeedFDR:
		return "14.0 Gbps"
	case SpeedEDR:
		return "25.0 Gbps"
	case SpeedHDR:
		return "50.0 Gbps"
	case SpeedNDR:
		return "100.0 Gbps"
	case 0:
		return "unknown"
	}
	return fmt.Sprintf("speed(%d)", uint8(s))
}

// LinkLayer is a port's link layer (IBV_LINK_LAYER_*).
type LinkLayer uint8

const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerUnspecified:
		return "Unspecified"
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// AtomicCap says how atomics are atomic (enum ibv_atomic_cap).
type AtomicCap uint8

const (
	AtomicNone AtomicCap = 0
	AtomicHCA  AtomicCap = 1 // atomic among the QPs of one device
	AtomicGlob AtomicCap = 2 // atomic also against the CPU and other devices
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return fmt.Sprintf("atomiccap(%d)", uint8(a))
}

// DeviceCapFlags are device capabilities (enum ibv_device_cap_flags).
type DeviceCapFlags uint32

const (
	DeviceBadPKeyCntr     DeviceCapFlags = 1 << 1
	DeviceBadQKeyCntr     DeviceCapFlags = 1 << 2
	DeviceCurrQPStateMod  DeviceCapFlags = 1 << 7
	DevicePortActiveEvent DeviceCapFlags = 1 << 10
	DeviceSysImageGUID    DeviceCapFlags = 1 << 11
	DeviceRCRNRNAKGen     DeviceCapFlags = 1 << 12
	DeviceSRQResize       DeviceCapFlags = 1 << 13
)

// deviceCapFlags are what a soft device supports: bad P_Key and Q_Key
// counters (Counters.Drops[DropPKey], [DropQKey]), the current-state check in
// modify QP, the system image GUID and RNR NAKs on RC.
const deviceCapFlags = DeviceBadPKeyCntr | DeviceBadQKeyCntr | DeviceCurrQPStateMod | DeviceSysImageGUID | DeviceRCRNRNAKGen

// String lists the flags by their ibv_devinfo names, "|"-separated.
func (f DeviceCapFlags) String() string {
	return flagString(uint32(f), []flagName{
		{uint32(DeviceBadPKeyCntr), "BAD_PKEY_CNTR"}, {uint32(DeviceBadQKeyCntr), "BAD_QKEY_CNTR"},
		{uint32(DeviceCurrQPStateMod), "CURR_QP_STATE_MOD"}, {uint32(DevicePortActiveEvent), "PORT_ACTIVE_EVENT"},
		{uint32(DeviceSysImageGUID), "SYS_IMAGE_GUID"}, {uint32(DeviceRCRNRNAKGen), "RC_RNR_NAK_GEN"},
		{uint32(DeviceSRQResize), "SRQ_RESIZE"},
	})
}

// PortCapFlags are port capabilities (enum ibv_port_cap_flags).
type PortCapFlags uint32

const (
	PortCapCMSup       PortCapFlags = 1 << 16 // a connection manager runs on the port
	PortCapIPBasedGIDs PortCapFlags = 1 << 26
)

// String lists the flags by their ibv_devinfo names, "|"-separated.
func (f PortCapFlags) String() string {
	return flagString(uint32(f), []flagName{{uint32(PortCapCMSup), "CM_SUP"}, {uint32(PortCapIPBasedGIDs), "IP_BASED_GIDS"}})
}

type flagName struct {
	f uint32
	n string
}

// flagString names the bits of f, "|"-separated, unknown ones in hex.
func flagString(f uint32, names []flagName) string {
	var parts []string
	for _, c := range names {
		if f&c.f != 0 {
			parts = append(parts, c.n)
			f &^= c.f
		}
	}
	if f != 0 {
		parts = append(parts, fmt.Sprintf("%#x", f))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}
