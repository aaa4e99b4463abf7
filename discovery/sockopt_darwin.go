package discovery

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// bindAddr returns the address the mDNS socket of one interface binds. On
// macOS a socket bound to a multicast address would send with that address
// as its source, so the socket binds the wildcard, as mDNSResponder's
// clients do, and shares the port through SO_REUSEPORT.
func bindAddr(_ *net.Interface, v6 bool) string {
	if v6 {
		return "[::]:5353"
	}
	return "0.0.0.0:5353"
}

// controlSocket sets SO_REUSEADDR and SO_REUSEPORT so that the socket
// shares 5353 with mDNSResponder.
func controlSocket(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
