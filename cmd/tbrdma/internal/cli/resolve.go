package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/tbrdma/tbrdma/discovery"
)

// resolveMDNS looks a peer name up on mDNS (the names "tbrdma peers"
// lists); a variable so that tests can replace it.
var resolveMDNS = func(ctx context.Context, name string) ([]netip.Addr, error) {
	p, err := discovery.Resolve(ctx, name, &discovery.Options{})
	if err != nil {
		return nil, err
	}
	return p.Addrs, nil
}

// resolveHost returns host's address: the literal; else, for a name that
// can be a tbrdma peer's (one label, or ending in .local, as "tbrdma peers"
// prints them), the address the peer advertises on mDNS on the Thunderbolt
// link; else the first IPv4 (else IPv6) address the system resolver gives.
// mDNS comes first so that a peer's name means its Thunderbolt address even
// where a DNS server knows the same name on another network.
func resolveHost(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	var mdnsErr error
	if mdnsCandidate(host) {
		addrs, err := resolveMDNS(ctx, host)
		if err == nil {
			if a, ok := pickAddr(addrs); ok {
				return a, nil
			}
			err = fmt.Errorf("%s: the mDNS answer has no address", host)
		}
		if !errors.Is(err, discovery.ErrNoInterface) {
			mdnsErr = err
		}
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err == nil {
		if a, ok := pickAddr(ips); ok {
			return a, nil
		}
		err = fmt.Errorf("%s: no address", host)
	}
	switch {
	case errors.Is(mdnsErr, discovery.ErrNotFound):
		return netip.Addr{}, fmt.Errorf("no tbrdma peer of that name answered on mDNS (%w) and the system resolver does not know it (%v): check the name with `tbrdma peers` (is `tbrdma serve` running there?), or give the peer's IP address",
			discovery.ErrNotFound, err)
	case mdnsErr != nil:
		return netip.Addr{}, fmt.Errorf("not found on mDNS (%w) nor by the system resolver (%v): check the name with `tbrdma peers`, or give the peer's IP address", mdnsErr, err)
	}
	return netip.Addr{}, err
}

// mdnsCandidate reports whether host can name a tbrdma peer on mDNS: a
// single label (not localhost) or a name under .local.
func mdnsCandidate(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "" || h == "localhost" {
		return false
	}
	return !strings.Contains(h, ".") || strings.HasSuffix(h, ".local")
}

// pickAddr returns the first IPv4 address of addrs, else the first one.
func pickAddr(addrs []netip.Addr) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), true
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, false
	}
	return addrs[0], true
}

// withStatic returns resolve that first looks the name up among static
// peers (--static name=address; names compare case-insensitively, with or
// without .local).
func withStatic(static []discovery.Peer, resolve func(context.Context, string) (netip.Addr, error)) func(context.Context, string) (netip.Addr, error) {
	return func(ctx context.Context, host string) (netip.Addr, error) {
		want := strings.TrimSuffix(strings.TrimSuffix(host, "."), ".local")
		for _, p := range static {
			if strings.EqualFold(p.Name, want) {
				if a, ok := pickAddr(p.Addrs); ok {
					return a, nil
				}
			}
		}
		return resolve(ctx, host)
	}
}
