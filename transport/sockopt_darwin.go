package transport

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setupSocket sets the options that must be in place before bind: the
// interface binding and "don't fragment". With DF set, XNU gives an atomic
// datagram IPv4 identification 0 (net.inet.ip.rfc6864=1, the default),
// the value the ICRC is computed with.
func setupSocket(fd uintptr, is6 bool, o *Options, ifindex int) error {
	s := int(fd)
	if is6 {
		if ifindex != 0 {
			if err := unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_BOUND_IF, ifindex); err != nil {
				return fmt.Errorf("bind to interface %q (IPV6_BOUND_IF): %w", o.Interface, err)
			}
		}
		if err := unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1); err != nil {
			return fmt.Errorf("setsockopt IPV6_DONTFRAG: %w", err)
		}
		return nil
	}
	if ifindex != 0 {
		if err := unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_BOUND_IF, ifindex); err != nil {
			return fmt.Errorf("bind to interface %q (IP_BOUND_IF): %w", o.Interface, err)
		}
	}
	if err := unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_DONTFRAG, 1); err != nil {
		return fmt.Errorf("setsockopt IP_DONTFRAG: %w", err)
	}
	return nil
}

// setBuffers sets the socket buffer sizes (a size < 0 keeps the default).
func setBuffers(pc *net.UDPConn, _ syscall.RawConn, rb, wb int) error {
	return setBuffersPortable(pc, rb, wb)
}
