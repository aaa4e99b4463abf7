package discovery

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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

// readStaticFile reads a peers file (see ReadStaticPeers).
func readStaticFile(name string) ([]Peer, []byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, nil, fmt.Errorf("static peers file: %w (create it, or drop the option)", err)
	}
	ps, err := ReadStaticPeers(bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf("static peers file %s: %w", name, err)
	}
	return ps, b, nil
}

// staticPeers returns Options.Static followed by the peers of
// Options.StaticFile.
func (o *Options) staticPeers() ([]Peer, error) {
	if o == nil {
		return nil, nil
	}
	ps := slices.Clone(o.Static)
	if o.StaticFile != "" {
		fp, _, err := readStaticFile(o.StaticFile)
		if err != nil {
			return nil, err
		}
		ps = append(ps, fp...)
	}
	return ps, nil
}

// staticWatch reports the static peers to Watch and follows the peers
// file.
type staticWatch struct {
	log     *slog.Logger
	fixed   []Peer // Options.Static
	file    string
	content []byte // the file as last read
	peers   map[string]Peer
}

func newStaticWatch(o *Options) (*staticWatch, error) {
	s := &staticWatch{log: o.logger(), peers: map[string]Peer{}}
	if o == nil {
		return s, nil
	}
	s.fixed, s.file = o.Static, o.StaticFile
	var fp []Peer
	if s.file != "" {
		var err error
		if fp, s.content, err = readStaticFile(s.file); err != nil {
			return nil, err
		}
	}
	s.peers = s.index(fp)
	return s, nil
}

// index returns the static peers by lowercased name; the first entry of a
// name wins.
func (s *staticWatch) index(fromFile []Peer) map[string]Peer {
	m := map[string]Peer{}
	for _, p := range slices.Concat(s.fixed, fromFile) {
		k := strings.ToLower(p.Name)
		if _, dup := m[k]; !dup {
			m[k] = p
		}
	}
	return m
}

// initial returns an Appeared event per static peer, sorted by name.
func (s *staticWatch) initial() []Event {
	var evs []Event
	for _, p := range s.peers {
		evs = append(evs, Event{Appeared, p})
	}
	sortEvents(evs)
	return evs
}

// run follows the file until ctx ends, sending the changes.
func (s *staticWatch) run(ctx context.Context, send func([]Event) bool) {
	if s.file == "" {
		return
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(s.file)
		if err != nil {
			if s.content != nil {
				s.log.Warn("static peers file unreadable; keeping the previous list", "file", s.file, "err", err)
				s.content = nil
			}
			continue
		}
		if bytes.Equal(b, s.content) {
			continue
		}
		s.content = b
		fp, err := ReadStaticPeers(bytes.NewReader(b))
		if err != nil {
			s.log.Warn("static peers file invalid; keeping the previous list", "file", s.file, "err", err)
			continue
		}
		next := s.index(fp)
		evs := diffPeers(s.peers, next)
		s.peers = next
		if len(evs) > 0 && !send(evs) {
			return
		}
	}
}
