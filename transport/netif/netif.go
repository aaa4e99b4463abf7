// Package netif lists the host's network interfaces with what tbrdma needs
// to know about each: addresses, MTU, state, and whether the interface is a
// Thunderbolt network link.
//
// It is the one place that detects Thunderbolt networking:
//
//   - Linux: an interface driven by thunderbolt-net (its sysfs device is a
//     service on the thunderbolt bus, the driver link is named
//     "thunderbolt-net"), or one named thunderbolt* (the kernel's name
//     template, and the name of the veth pairs tbrdma's two-host tests use).
//     Detection is by driver first because udev may rename the interface.
//   - macOS: the hardware ports "Thunderbolt N" (per-receptacle enX
//     interfaces) and "Thunderbolt Bridge" (bridge0, whose members they are),
//     read from `networksetup -listallhardwareports`.
//   - Elsewhere no interface is reported as Thunderbolt.
//
// Both verbs (one soft RDMA device per interface) and discovery (mDNS on the
// Thunderbolt link) use it; it imports nothing of tbrdma.
package netif

import (
	"net"
	"net/netip"
	"slices"
)

// Kinds of interface, the values of [Interface.Kind].
const (
	KindLoopback          = "loopback"
	KindThunderbolt       = "thunderbolt"        // IP over a Thunderbolt/USB4 cable: Linux thunderbolt-net, a macOS "Thunderbolt N" port
	KindThunderboltBridge = "thunderbolt-bridge" // macOS "Thunderbolt Bridge" (bridge0) over the Thunderbolt ports
	KindEthernet          = "ethernet"
	KindWireless          = "wifi"
	KindBridge            = "bridge"
	KindVirtual           = "virtual" // no hardware behind it: veth, tun, dummy …
	KindOther             = "other"
)

// Interface is one network interface.
type Interface struct {
	Name         string
	Index        int
	MTU          int // link MTU in bytes
	HardwareAddr net.HardwareAddr
	// Addrs are the interface's unicast addresses with their prefix
	// lengths, in the order the system reports them. Prefixes carry no
	// zone; an IPv6 link-local address is scoped to this interface.
	Addrs []netip.Prefix
	Flags net.Flags
	// Up reports that the interface is administratively up and running
	// (IFF_UP and IFF_RUNNING: it has carrier). A Thunderbolt link is only
	// running once both hosts have brought it up.
	Up          bool
	Loopback    bool
	Thunderbolt bool
	// Kind is one of the Kind constants.
	Kind string
	// Hardware says what the system calls the interface: the driver on
	// Linux ("thunderbolt-net", "virtio_net"; empty for virtual
	// interfaces), the hardware port on macOS ("Thunderbolt 1",
	// "Thunderbolt Bridge", "Wi-Fi").
	Hardware string
	// Speed is the link speed in bits per second, 0 when unknown. On Linux
	// a Thunderbolt link's speed is its receive lanes times the per-lane
	// speed the XDomain reports; other interfaces report what ethtool
	// would.
	Speed uint64
	// Peer is the host name the other end of a Linux Thunderbolt link
	// announced (XDomain device_name); empty when unknown.
	Peer string
}

// IsUsable reports whether the interface can carry RoCEv2 traffic now: up
// and with at least one address.
func (i *Interface) IsUsable() bool { return i.Up && len(i.Addrs) > 0 }

// List returns the host's interfaces in index order. Platform detection
// (sysfs, networksetup) that fails leaves the interfaces it would have
// described with only what the portable interface list says; only a failure
// to list interfaces at all is an error.
func List() ([]Interface, error) {
	nifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	ifs := make([]Interface, 0, len(nifs))
	for i := range nifs {
		ifs = append(ifs, fromNet(&nifs[i]))
	}
	annotate(ifs)
	for i := range ifs {
		if ifs[i].Kind == "" {
			ifs[i].Kind = KindOther
		}
	}
	slices.SortStableFunc(ifs, func(a, b Interface) int { return a.Index - b.Index })
	return ifs, nil
}

// fromNet converts what the standard library knows about an interface.
func fromNet(n *net.Interface) Interface {
	ifc := Interface{
		Name:         n.Name,
		Index:        n.Index,
		MTU:          n.MTU,
		HardwareAddr: n.HardwareAddr,
		Flags:        n.Flags,
		Up:           n.Flags&net.FlagUp != 0 && n.Flags&net.FlagRunning != 0,
		Loopback:     n.Flags&net.FlagLoopback != 0,
	}
	if ifc.Loopback {
		ifc.Kind = KindLoopback
	}
	if addrs, err := n.Addrs(); err == nil {
		ifc.Addrs = prefixes(addrs)
	}
	return ifc
}

// prefixes converts interface addresses (*net.IPNet, *net.IPAddr) to
// prefixes, dropping anything else.
func prefixes(addrs []net.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range addrs {
		var ip net.IP
		bits, size := -1, 0
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
			bits, size = a.Mask.Size()
		case *net.IPAddr:
			ip = a.IP
		default:
			continue
		}
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		addr = addr.Unmap()
		if addr.Is4() && size == 128 {
			bits -= 96 // an IPv4 address with a 16-byte mask
		}
		if size == 0 || bits < 0 || bits > addr.BitLen() {
			bits = addr.BitLen()
		}
		out = append(out, netip.PrefixFrom(addr, bits))
	}
	return out
}
