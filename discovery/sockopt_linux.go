package discovery

import (
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// bindAddr returns the address the mDNS socket of one interface binds.
//
// On Linux the socket binds the group address itself (224.0.0.251:5353,
// [ff02::fb%if]:5353), not the wildcard: datagrams sent to the host's
// unicast addresses on port 5353 then never match it, so avahi-daemon,
// which binds the wildcard, keeps receiving the unicast answers meant for
// it. Linux leaves the source address of a socket bound to a multicast
// address unset, so replies still leave from the interface address.
func bindAddr(ifi *net.Interface, v6 bool) string {
	if v6 {
		return netip.AddrPortFrom(groupV6.WithZone(ifi.Name), mdnsPort).String()
	}
	return netip.AddrPortFrom(groupV4, mdnsPort).String()
}

// controlSocket sets the options that let the socket share 5353 with the
// system responder (SO_REUSEADDR, SO_REUSEPORT) and receive only the groups
// it joined on its own interface (IP_MULTICAST_ALL, IPV6_MULTICAST_ALL = 0;
// the latter needs Linux 4.20, so its failure is ignored: the receive path
// checks the arrival interface anyway).
func controlSocket(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
			return
		}
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
			return
		}
		if network == "udp6" {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0)
		} else {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		}
	})
	if err != nil {
		return err
	}
	return serr
}
