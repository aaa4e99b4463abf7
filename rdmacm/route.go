package rdmacm

import (
	"errors"
	"net"
	"net/netip"
	"syscall"

	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// checkRoute decides whether the ID's source address can reach dst, the
// check behind ROUTE_ERROR. tbrdma has no routing table of its own, so it
// rejects what cannot work on any network, and asks the operating system
// for contexts opened on a real device:
//
//   - dst unspecified, multicast or broadcast;
//   - IPv4 source and IPv6 destination or the reverse (v4-mapped
//     addresses count as IPv4);
//   - a loopback source and a destination off this host, or a loopback
//     destination from a source on a real interface (the kernel refuses
//     both: a packet from 127/8 never leaves the host);
//   - for a context opened from a Device: the OS has no route from the
//     source address to dst (a connected UDP socket fails with
//     ENETUNREACH or EHOSTUNREACH).
func checkRoute(vctx *verbs.Context, src, dst netip.Addr) error {
	src, dst = src.Unmap(), dst.Unmap()
	fail := func(why string) error { return &RouteError{Dst: dst, Reason: why} }
	switch {
	case !dst.IsValid() || dst.IsUnspecified():
		return fail("unspecified destination")
	case dst.IsMulticast() || dst == netip.IPv4Unspecified() || dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fail("multicast or broadcast destination")
	case src.IsValid() && !src.IsUnspecified() && src.Is4() != dst.Is4():
		return fail("source " + src.String() + " and destination are of different IP versions")
	case src.IsLoopback() && !dst.IsLoopback():
		return fail("the device is on loopback address " + src.String() + ", the destination is off this host")
	case !src.IsLoopback() && src.IsValid() && !src.IsUnspecified() && dst.IsLoopback():
		return fail("loopback destination from a device on " + src.String())
	}
	if vctx.Device() == nil || !src.IsValid() || src.IsUnspecified() {
		return nil
	}
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
		net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, wire.UDPPort)))
	if err != nil {
		if errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) {
			return fail("the operating system has no route from " + src.String())
		}
		return nil // any other failure is not the route's (ports, permissions)
	}
	c.Close()
	return nil
}
