package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/discovery"
)

func TestResolveHost(t *testing.T) {
	asked := []string{}
	mdns := map[string][]netip.Addr{
		"lab-mac": {netip.MustParseAddr("fe80::1%thunderbolt0"), netip.MustParseAddr("198.18.0.2")},
		"v6only":  {netip.MustParseAddr("fe80::2%thunderbolt0")},
	}
	old := resolveMDNS
	t.Cleanup(func() { resolveMDNS = old })
	resolveMDNS = func(_ context.Context, name string) ([]netip.Addr, error) {
		asked = append(asked, name)
		n := strings.TrimSuffix(strings.ToLower(name), ".local") // case-insensitive, as mDNS
		if a, ok := mdns[n]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("resolve %q: %w", name, discovery.ErrNotFound)
	}
	for _, c := range []struct {
		host, want string
		mdns       bool // asked on mDNS
	}{
		{"198.18.0.5", "198.18.0.5", false},
		{"::ffff:198.18.0.5", "198.18.0.5", false},
		{"lab-mac", "198.18.0.2", true},       // IPv4 first
		{"LAB-MAC.local", "198.18.0.2", true}, // as peers prints the host
		{"v6only", "fe80::2%thunderbolt0", true},
		{"localhost", "127.0.0.1", false}, // never asked on mDNS
	} {
		asked = asked[:0]
		got, err := resolveHost(t.Context(), c.host)
		if err != nil {
			if c.host == "localhost" {
				t.Logf("localhost: %v (no resolver here)", err)
				continue
			}
			t.Errorf("%s: %v", c.host, err)
			continue
		}
		if got.String() != c.want {
			t.Errorf("%s: %v, want %s", c.host, got, c.want)
		}
		if (len(asked) > 0) != c.mdns {
			t.Errorf("%s: asked mDNS %v, want %v", c.host, asked, c.mdns)
		}
	}

	// Not on mDNS nor in DNS: the error names both and what to do.
	_, err := resolveHost(t.Context(), "no-such-peer-e2e.invalid.local")
	if err == nil || !strings.Contains(err.Error(), "no tbrdma peer of that name answered on mDNS") || !strings.Contains(err.Error(), "tbrdma peers") ||
		!errors.Is(err, discovery.ErrNotFound) {
		t.Errorf("unknown .local name: %v", err)
	}

	// No Thunderbolt interface: mDNS is skipped silently, the system
	// resolver's error is the answer.
	resolveMDNS = func(context.Context, string) ([]netip.Addr, error) { return nil, discovery.ErrNoInterface }
	_, err = resolveHost(t.Context(), "no-such-peer-e2e.invalid.local")
	if err == nil || strings.Contains(err.Error(), "mDNS") {
		t.Errorf("without a Thunderbolt interface: %v", err)
	}
}

func TestMDNSCandidate(t *testing.T) {
	for host, want := range map[string]bool{
		"lab-mac": true, "lab-mac.local": true, "lab-mac.local.": true, "Lab-Mac.LOCAL": true,
		"localhost": false, "rxe-host.example.com": false, "": false,
	} {
		if got := mdnsCandidate(host); got != want {
			t.Errorf("%q: %v, want %v", host, got, want)
		}
	}
}

// TestPingStatic: ping --static name=address resolves name to address
// without asking mDNS or the system resolver.
func TestPingStatic(t *testing.T) {
	f, _, _ := testFactory()
	var got *pingOptions
	cmd := newCmdPing(f, func(o *pingOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--static", "lab-mac=198.18.0.2,lab-pc=198.18.0.3:4791", "LAB-PC.local"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	old := resolveMDNS
	t.Cleanup(func() { resolveMDNS = old })
	resolveMDNS = func(context.Context, string) ([]netip.Addr, error) {
		t.Error("asked mDNS for a static peer")
		return nil, discovery.ErrNotFound
	}
	a, err := got.Resolve(t.Context(), got.Peer)
	if err != nil || a != netip.MustParseAddr("198.18.0.3") {
		t.Errorf("resolve %s: %v, %v; want 198.18.0.3", got.Peer, a, err)
	}

	cmd = newCmdPing(f, func(*pingOptions) error { return nil })
	cmd.SetArgs([]string{"--static", "lab-mac", "lab-mac"})
	var fe *FlagError
	if err := cmd.Execute(); !errors.As(err, &fe) {
		t.Errorf("--static without an address: %v, want a usage error", err)
	}
}
