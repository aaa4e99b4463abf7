package transport

import (
	"fmt"
	"net/netip"
	"syscall"
)

// UnreachableError is an ICMP "destination unreachable" that answered a
// datagram the endpoint sent (Linux: IP_RECVERR / IPV6_RECVERR and the
// socket's error queue; other systems do not report ICMP errors on an
// unconnected socket). Options.OnUnreachable receives them. It unwraps to
// the errno the kernel gives the ICMP message: ECONNREFUSED for port
// unreachable, EHOSTUNREACH for host unreachable (also the kernel's own
// when ARP or neighbour discovery gets no answer), ENETUNREACH, EACCES
// (administratively prohibited, IPv6) and the like.
type UnreachableError struct {
	// Dest is the destination of the datagram that was answered.
	Dest netip.AddrPort
	// From is the host that sent the ICMP message: Dest's address itself,
	// a router on the way, or this host (no neighbour answer).
	From netip.Addr
	// V6 says the message is ICMPv6; Type and Code are its fields.
	V6         bool
	Type, Code uint8
	// Errno is the kernel's translation of Type and Code.
	Errno syscall.Errno
}

// ICMP types and codes the message names (RFC 792, RFC 4443).
const (
	icmpDestUnreach  = 3
	icmpPortUnreach  = 3
	icmpFragNeeded   = 4
	icmp6DestUnreach = 1
	icmp6PortUnreach = 4
)

// PortUnreachable reports whether the peer itself said that nothing
// listens on the port.
func (e *UnreachableError) PortUnreachable() bool {
	if e.V6 {
		return e.Type == icmp6DestUnreach && e.Code == icmp6PortUnreach
	}
	return e.Type == icmpDestUnreach && e.Code == icmpPortUnreach
}

func (e *UnreachableError) Error() string {
	if e.PortUnreachable() {
		return fmt.Sprintf("%v answered ICMP port unreachable for UDP %d: no RoCE device listens there", e.Dest.Addr(), e.Dest.Port())
	}
	what, why := e.describe()
	from := "the peer"
	switch {
	case e.From == e.Dest.Addr():
	case e.From.IsValid():
		from = e.From.String()
	}
	return fmt.Sprintf("ICMP %s for %v UDP %d (from %s): %s", what, e.Dest.Addr(), e.Dest.Port(), from, why)
}

// describe names the message and its likely cause.
func (e *UnreachableError) describe() (what, why string) {
	proto := "ICMP"
	if e.V6 {
		proto = "ICMPv6"
	}
	switch e.Errno {
	case syscall.EHOSTUNREACH:
		return "host unreachable", "the peer is down or does not answer ARP/neighbour discovery on its link, or a router has no way to it"
	case syscall.ENETUNREACH:
		return "network unreachable", "a router has no route to the peer's network"
	case syscall.EACCES:
		return "communication prohibited", "a firewall refuses the traffic"
	case syscall.ECONNREFUSED:
		return "port unreachable", "nothing listens on the port"
	}
	return fmt.Sprintf("destination unreachable (%s type %d code %d)", proto, e.Type, e.Code), e.Errno.Error()
}

// Unwrap returns the errno (errors.Is(err, syscall.ECONNREFUSED) and so on).
func (e *UnreachableError) Unwrap() error { return e.Errno }
