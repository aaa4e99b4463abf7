package rdmacm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// Resolver turns a host name into addresses for ResolveAddr. The package's
// users supply one: a discovery browser (mDNS names), the system resolver
// ([SystemResolver]), or a static map in tests ([StaticResolver]).
type Resolver interface {
	LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error)
}

// StaticResolver is a fixed name → address table.
type StaticResolver map[string]netip.Addr

// LookupNetIP returns the address of host.
func (s StaticResolver) LookupNetIP(_ context.Context, host string) ([]netip.Addr, error) {
	if a, ok := s[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, fmt.Errorf("rdmacm: resolve %q: no such host", host)
}

// SystemResolver resolves names with the operating system's resolver
// (net.DefaultResolver).
type SystemResolver struct{}

// LookupNetIP returns the IP addresses of host.
func (SystemResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}
