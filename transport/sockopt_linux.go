package transport

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setupSocket sets the options that must be in place before bind: the
// device binding, path MTU discovery "do" (DF set, never fragment locally,
// and — on an unconnected socket — IPv4 identification 0, which the ICRC
// covers), and for IPv6 acceptance of zero UDP checksums, which rdma_rxe
// sends.
func setupSocket(fd uintptr, is6 bool, o *Options, _ int) error {
	s := int(fd)
	if o.Interface != "" {
		if err := unix.BindToDevice(s, o.Interface); err != nil {
			return fmt.Errorf("bind to device %q (SO_BINDTODEVICE): %w", o.Interface, err)
		}
	}
	if is6 {
		if err := unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fmt.Errorf("setsockopt IPV6_MTU_DISCOVER: %w", err)
		}
		if err := unix.SetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
			return fmt.Errorf("setsockopt UDP_NO_CHECK6_RX: %w", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return fmt.Errorf("setsockopt IP_MTU_DISCOVER: %w", err)
	}
	return nil
}

// setBuffers sets the socket buffer sizes (a size < 0 keeps the default).
// It tries SO_RCVBUFFORCE / SO_SNDBUFFORCE first, which exceed
// net.core.rmem_max / wmem_max when the process has CAP_NET_ADMIN, and
// falls back to the capped SO_RCVBUF / SO_SNDBUF.
func setBuffers(pc *net.UDPConn, rc syscall.RawConn, rb, wb int) error {
	var rerr, werr error
	err := rc.Control(func(fd uintptr) {
		if rb > 0 && unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rb) != nil {
			rerr = pc.SetReadBuffer(rb)
		}
		if wb > 0 && unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, wb) != nil {
			werr = pc.SetWriteBuffer(wb)
		}
	})
	if err != nil {
		return err
	}
	if rerr != nil {
		return rerr
	}
	return werr
}
