//go:build !linux && !darwin

package discovery

import (
	"net"
	"syscall"
)

// bindAddr returns the wildcard address: elsewhere sharing 5353 with a
// system responder is not attempted (see docs/discovery.md).
func bindAddr(_ *net.Interface, v6 bool) string {
	if v6 {
		return "[::]:5353"
	}
	return "0.0.0.0:5353"
}

// controlSocket sets nothing; the standard library's multicast defaults
// apply.
func controlSocket(_, _ string, _ syscall.RawConn) error { return nil }
