package transport

import (
	"encoding/binary"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// ICMP errors on Linux. With Options.OnUnreachable set, the socket has
// IP_RECVERR (IPV6_RECVERR): the kernel then queues every ICMP error that
// answers one of its datagrams on the socket's error queue, even though the
// socket is unconnected, and sets the socket's pending error, which the next
// receive or send system call returns instead of doing its work (recvmmsg
// with nothing received yet; sendmmsg on its first message). The endpoint's
// system-call callbacks (batch_linux.go) treat such an errno as "read the
// error queue (drainErrQueue), report what it holds, try again", so a data
// path never sees it: no batch is cut short and nothing is lost. A queue
// entry that no pending error announces (a sendmmsg that had sent part of
// its batch returns the count and drops the error) is read with the next
// one, or at once by a NoNetpoll socket's poll(2), which reports POLLERR.

// errQueueDrainMax bounds one drain; the kernel bounds the queue by the
// receive buffer anyway.
const errQueueDrainMax = 64

// sizeofSockExtendedErr is struct sock_extended_err; the offender's
// sockaddr follows it (SO_EE_OFFENDER).
const sizeofSockExtendedErr = 16

// enableRecvErr turns on IP_RECVERR or IPV6_RECVERR.
func enableRecvErr(fd uintptr, is6 bool) error {
	if is6 {
		return unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
	}
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
}

// asyncErr handles errno e from recvmmsg or sendmmsg: when the endpoint
// reads its error queue and e is the pending error an ICMP message set, it
// drains the queue and reports true (call again). Otherwise e is the
// system call's own error (false).
func (c *udpConn) asyncErr(fd uintptr, e unix.Errno) bool {
	if !c.sys.recvErr || e == 0 || e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	return c.drainErrQueue(fd, e)
}

// drainErrQueue reads the socket's error queue until it is empty (or
// errQueueDrainMax entries), hands each ICMP destination unreachable to
// Options.OnUnreachable, and reports whether an entry from an ICMP message
// had errno want.
func (c *udpConn) drainErrQueue(fd uintptr, want unix.Errno) bool {
	var data [64]byte
	var oob [256]byte
	seen := false
	for range errQueueDrainMax {
		_, oobn, _, from, err := unix.Recvmsg(int(fd), data[:], oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			break
		}
		ee, ok := parseErrQueue(oob[:oobn], c.destOf(from))
		if ee.origin == unix.SO_EE_ORIGIN_ICMP || ee.origin == unix.SO_EE_ORIGIN_ICMP6 {
			seen = seen || ee.err.Errno == syscall.Errno(want)
		}
		if ok && c.onUnreach != nil {
			e := ee.err
			c.onUnreach(&e)
		}
	}
	return seen
}

// destOf is the destination recvmsg reports for an error-queue entry.
func (c *udpConn) destOf(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		a := netip.AddrFrom16(sa.Addr).Unmap()
		if c.sys.zone != "" && a.IsLinkLocalUnicast() {
			a = a.WithZone(c.sys.zone)
		}
		return netip.AddrPortFrom(a, uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// extErr is one decoded error-queue entry.
type extErr struct {
	origin uint8 // SO_EE_ORIGIN_*; 0 when ctrl held no IP_RECVERR message
	err    UnreachableError
}

// parseErrQueue decodes the control messages of one error-queue entry
// whose datagram went to dest: an IP_RECVERR or IPV6_RECVERR message
// holding a struct sock_extended_err (host byte order) and the offender's
// sockaddr. ok reports an ICMP or ICMPv6 destination unreachable; a local
// error, "fragmentation needed", "packet too big", "time exceeded" or
// malformed bytes give false. It never panics, whatever ctrl holds.
func parseErrQueue(ctrl []byte, dest netip.AddrPort) (ee extErr, ok bool) {
	msgs, err := unix.ParseSocketControlMessage(ctrl)
	if err != nil {
		return ee, false
	}
	for _, m := range msgs {
		v4 := m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR
		v6 := m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR
		if (!v4 && !v6) || len(m.Data) < sizeofSockExtendedErr {
			continue
		}
		d := m.Data
		ee.origin = d[4]
		ee.err = UnreachableError{Dest: dest, Errno: syscall.Errno(binary.NativeEndian.Uint32(d[0:4])),
			V6: ee.origin == unix.SO_EE_ORIGIN_ICMP6, Type: d[5], Code: d[6], From: offender(d[sizeofSockExtendedErr:])}
		switch ee.origin {
		case unix.SO_EE_ORIGIN_ICMP:
			return ee, ee.err.Type == icmpDestUnreach && ee.err.Code != icmpFragNeeded
		case unix.SO_EE_ORIGIN_ICMP6:
			return ee, ee.err.Type == icmp6DestUnreach
		}
		return ee, false
	}
	return ee, false
}

// offender decodes the sockaddr after a sock_extended_err (the invalid
// Addr if it is missing or of another family).
func offender(b []byte) netip.Addr {
	if len(b) < 2 {
		return netip.Addr{}
	}
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if len(b) >= 8 {
			return netip.AddrFrom4([4]byte(b[4:8]))
		}
	case unix.AF_INET6:
		if len(b) >= 24 {
			return netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		}
	}
	return netip.Addr{}
}

// initRecvErr turns on IP_RECVERR; a kernel that refuses it (none known)
// leaves the endpoint as without Options.OnUnreachable, which the log says.
func (c *udpConn) initRecvErr() {
	var err error
	if cerr := c.rc.Control(func(fd uintptr) { err = enableRecvErr(fd, c.is6) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		if c.log != nil {
			c.log.Info("ICMP errors not reported", "addr", c.laddr, "err", err)
		}
		return
	}
	c.sys.recvErr = true
	if rs, ok := c.rc.(*rawSock); ok {
		rs.onErr = func(fd uintptr) { c.drainErrQueue(fd, 0) }
	}
}
