//go:build !linux && !darwin

package transport

import (
	"fmt"
	"net"
	"syscall"
)

// setupSocket cannot bind to an interface or set "don't fragment" on this
// system. IPv4 packets then carry an identification other than the 0 the
// ICRC is computed with: rdma_rxe, which sees the IP header, drops them; a
// tbrdma peer, which cannot see it, accepts them. IPv6 is unaffected.
func setupSocket(_ uintptr, _ bool, o *Options, _ int) error {
	if o.Interface != "" {
		return fmt.Errorf("bind to interface %q: %w", o.Interface, errNotSupportedOnOS)
	}
	return nil
}

// setBuffers sets the socket buffer sizes (a size < 0 keeps the default).
func setBuffers(pc *net.UDPConn, _ syscall.RawConn, rb, wb int) error {
	return setBuffersPortable(pc, rb, wb)
}
