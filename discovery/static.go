package discovery

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// ParseStaticPeer parses one static peer entry "name=addr", where addr is
// an IP address ("198.18.0.2", "fe80::1%thunderbolt0") or an address with
// a port ("198.18.0.2:4791", "[fe80::1%thunderbolt0]:4791"); the port
// defaults to DefaultPort. Host names are not accepted: a static entry is
// for a network without name service. The peer's GID is derived from the
// address as RoCEv2 does (IPv4-mapped for IPv4).
func ParseStaticPeer(entry string) (Peer, error) {
	name, addr, ok := strings.Cut(strings.TrimSpace(entry), "=")
	name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
	if !ok || name == "" || addr == "" {
		return Peer{}, fmt.Errorf("static peer %q: want name=address[:port]", entry)
	}
	var ap netip.AddrPort
	if a, err := netip.ParseAddr(addr); err == nil {
		ap = netip.AddrPortFrom(a, DefaultPort)
	} else if ap, err = netip.ParseAddrPort(addr); err != nil {
		return Peer{}, fmt.Errorf("static peer %q: %q is not an IP address or address:port", entry, addr)
	}
	if ap.Port() == 0 {
		return Peer{}, fmt.Errorf("static peer %q: port 0", entry)
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		a = a.WithZone("") // IPv4 has no zone
	}
	gid := netip.AddrFrom16(a.As16()) // ::ffff:a.b.c.d for IPv4
	return Peer{
		Name:   trimLocal(name),
		Addrs:  []netip.Addr{a},
		Port:   ap.Port(),
		GID:    gid,
		TXT:    map[string]string{},
		Static: true,
	}, nil
}

// StaticPeers parses entries as ParseStaticPeer does; an entry may hold
// several peers separated by commas (a flag value "a=198.18.0.2,b=198.18.0.3").
func StaticPeers(entries ...string) ([]Peer, error) {
	var out []Peer
	for _, e := range entries {
		for f := range strings.SplitSeq(e, ",") {
			if strings.TrimSpace(f) == "" {
				continue
			}
			p, err := ParseStaticPeer(f)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// ReadStaticPeers reads a peers file: one or more name=addr entries per
// line separated by spaces or commas; "#" starts a comment.
func ReadStaticPeers(r io.Reader) ([]Peer, error) {
	var out []Peer
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		for f := range strings.FieldsFuncSeq(line, func(c rune) bool { return c == ',' || c == ' ' || c == '\t' }) {
			p, err := ParseStaticPeer(f)
			if err != nil {
				return nil, fmt.Errorf("line %s: %w", strconv.Itoa(n), err)
			}
			out = append(out, p)
		}
	}
	return out, sc.Err()
}
