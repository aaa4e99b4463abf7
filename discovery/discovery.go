package discovery

import (
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ServiceType is the DNS-SD service type tbrdma advertises and browses.
const ServiceType = "_tbrdma._udp"

// Domain is the mDNS domain.
const Domain = "local."

// DefaultPort is the RoCEv2 UDP port, advertised when [Service.Port] is 0
// and assumed by static peers that give none.
const DefaultPort = 4791

// Record TTLs (RFC 6762 §10): records that carry a host name (A, AAAA,
// SRV) live 120 s, the others (PTR, TXT) 75 minutes.
const (
	HostTTL  = 120 * time.Second
	OtherTTL = 4500 * time.Second
)

var (
	// ErrNoInterface is returned when no interface was named and no
	// Thunderbolt interface is up; its text says what to do.
	ErrNoInterface = errors.New("no Thunderbolt network interface is up: connect a Thunderbolt cable and bring the link up " +
		"(Linux: ip link set thunderbolt0 up, with an IPv4 or IPv6 address; macOS: the Thunderbolt Bridge service), " +
		"or name the interface to use (Options.Interfaces), or list the peer statically (Options.Static)")
	// ErrNoAddress is returned when a chosen interface has no usable IP
	// address.
	ErrNoAddress = errors.New("interface has no IP address")
	// ErrNotFound is returned by Resolve when no peer answered in time.
	ErrNotFound = errors.New("peer not found")
	// ErrClosed is returned by methods of a closed Advertiser.
	ErrClosed = errors.New("advertiser closed")
)

// Peer is one advertised tbrdma endpoint as seen on one interface. It is
// a value: Browse and Watch hand out copies that later packets never
// change.
type Peer struct {
	// Name is the DNS-SD instance name (one label, unescaped), by default
	// the host name of the peer, e.g. "lab-mac".
	Name string
	// Host is the target host name of the SRV record without the final
	// dot, e.g. "lab-mac-tbrdma.local".
	Host string
	// Addrs are the addresses of Host seen on Interface, IPv4 first.
	// IPv6 link-local addresses carry Interface as their zone.
	Addrs []netip.Addr
	// Port is the RoCEv2 UDP port of the peer (SRV port).
	Port uint16
	// GID is the peer's GID (TXT "gid"), invalid when not advertised.
	GID netip.Addr
	// TXT holds the TXT pairs with lowercased keys; a key without "="
	// (a boolean attribute) maps to "". Only the first occurrence of a
	// key counts (RFC 6763 §6.4).
	TXT map[string]string
	// Interface is the name of the interface the peer was seen on; empty
	// for a static peer.
	Interface string
	// Static reports that the peer came from a static list, not mDNS.
	Static bool
}

// AddrPort returns the peer's first address with its port, the address to
// send RoCEv2 packets to; invalid when the peer has no address.
func (p Peer) AddrPort() netip.AddrPort {
	if len(p.Addrs) == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(p.Addrs[0], p.Port)
}

// MTU returns the active IB MTU the peer advertised (TXT "mtu"), 0 if none.
func (p Peer) MTU() int {
	n, _ := strconv.Atoi(p.TXT["mtu"])
	return n
}

// Caps returns the capabilities the peer advertised (TXT "caps").
func (p Peer) Caps() []string {
	if p.TXT["caps"] == "" {
		return nil
	}
	return strings.Split(p.TXT["caps"], ",")
}

// CMPort returns the rdma_cm port the peer's ping service listens on (TXT
// "cm"), 0 when it advertised none.
func (p Peer) CMPort() uint16 {
	n, _ := strconv.ParseUint(p.TXT["cm"], 10, 16)
	return uint16(n)
}

// SegmentSize returns the largest large-segment size the peer's device
// takes (TXT "seg": tbrdma's large-segment extension, docs/wire-format.md),
// 0 when it advertised none (a stock peer, or a link too small).
func (p Peer) SegmentSize() int {
	n, _ := strconv.Atoi(p.TXT["seg"])
	return max(n, 0)
}

// OOBPort returns the port of the peer's perftest-compatible out-of-band
// listener (TXT "oob"), 0 when it serves none.
func (p Peer) OOBPort() uint16 {
	n, _ := strconv.ParseUint(p.TXT["oob"], 10, 16)
	return uint16(n)
}

func (p Peer) String() string {
	s := p.Name
	if ap := p.AddrPort(); ap.IsValid() {
		s += " " + ap.String()
	}
	if p.Interface != "" {
		s += " on " + p.Interface
	}
	return s
}

// equal reports whether two peers carry the same data.
func (p Peer) equal(q Peer) bool {
	return p.Name == q.Name && p.Host == q.Host && slices.Equal(p.Addrs, q.Addrs) &&
		p.Port == q.Port && p.GID == q.GID && maps.Equal(p.TXT, q.TXT) &&
		p.Interface == q.Interface && p.Static == q.Static
}

// Service describes what an Advertiser publishes. The TXT record is built
// from the fields in this order: txtvers=1, gid, guid, mtu, dev, caps,
// ver, oob, cm, seg; zero fields are left out.
type Service struct {
	// Name is the instance name; default: the host name. At most 63
	// bytes; any characters.
	Name string
	// Port is the RoCEv2 UDP port; default DefaultPort.
	Port uint16
	// GID is the device's GID (IPv4-mapped or IPv6).
	GID netip.Addr
	// GUID is the node GUID, e.g. "0002:c9ff:fe00:0001" or 16 hex digits.
	GUID string
	// MTU is the active IB MTU in bytes (256 … 4096).
	MTU int
	// Device is the device name, e.g. "tbrdma0" or "rxe0".
	Device string
	// Caps lists capabilities, e.g. "rc", "uc", "ud", "atomic", "srq", "cm".
	Caps []string
	// Version is the tbrdma software version.
	Version string
	// OOBPort is the port of the perftest-compatible out-of-band listener
	// when one is serving, else 0.
	OOBPort uint16
	// CMPort is the rdma_cm port of the rping-compatible ping service
	// (tbrdma serve; rping's default is 7174) when one is serving, else 0.
	CMPort uint16
	// SegmentSize is the largest segment size of tbrdma's large-segment
	// extension the device takes (TXT "seg"), 0 for none.
	SegmentSize int
}

// txt returns the service's TXT pairs in advertising order.
func (s Service) txt() []txtPair {
	p := []txtPair{{"txtvers", "1"}}
	add := func(k, v string) {
		if v != "" {
			p = append(p, txtPair{k, v})
		}
	}
	if s.GID.IsValid() {
		add("gid", s.GID.String())
	}
	add("guid", s.GUID)
	if s.MTU > 0 {
		add("mtu", strconv.Itoa(s.MTU))
	}
	add("dev", s.Device)
	add("caps", strings.Join(s.Caps, ","))
	add("ver", s.Version)
	if s.OOBPort != 0 {
		add("oob", strconv.Itoa(int(s.OOBPort)))
	}
	if s.CMPort != 0 {
		add("cm", strconv.Itoa(int(s.CMPort)))
	}
	if s.SegmentSize > 0 {
		add("seg", strconv.Itoa(s.SegmentSize))
	}
	return p
}

// Options configure Advertise, Browse, Watch and Resolve. A nil *Options
// means all defaults.
type Options struct {
	// Interfaces names the interfaces to use. Default: every Thunderbolt
	// interface that is up (detected by transport/netif); if there is
	// none the call fails with ErrNoInterface.
	Interfaces []string
	// Logger receives malformed-packet reports and socket problems; nil
	// means silent.
	Logger *slog.Logger
	// Timeout bounds Browse and Resolve (when ctx has no earlier
	// deadline); default 1 s.
	Timeout time.Duration
	// HostName is the host label of the advertised host records; default
	// "<os host name>-tbrdma", which never collides with the host name the
	// system responder (Avahi, mDNSResponder) publishes.
	HostName string
	// Static peers are returned by Browse and Resolve in addition to (and,
	// for Resolve, before) what mDNS finds, and reported by Watch. See
	// ParseStaticPeer, StaticPeers.
	Static []Peer
	// StaticFile names a peers file (the format of ReadStaticPeers) whose
	// peers count as Static ones, after them. Browse and Resolve read it
	// once; Watch follows changes to it.
	StaticFile string
}

func (o *Options) logger() *slog.Logger {
	if o == nil || o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

func (o *Options) timeout() time.Duration {
	if o == nil || o.Timeout <= 0 {
		return time.Second
	}
	return o.Timeout
}

// interfaces returns the interfaces named, nil for the Thunderbolt ones.
func (o *Options) interfaces() []string {
	if o != nil && len(o.Interfaces) > 0 {
		return o.Interfaces
	}
	return nil
}

// EventType says what happened to a peer.
type EventType int

const (
	// Appeared: the peer is complete (SRV and an address) for the first
	// time on that interface.
	Appeared EventType = iota + 1
	// Changed: addresses, port, host or TXT changed.
	Changed
	// Left: the peer said goodbye, or its records expired.
	Left
)

func (t EventType) String() string {
	switch t {
	case Appeared:
		return "appeared"
	case Changed:
		return "changed"
	case Left:
		return "left"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is one change seen by Watch. For Left, Peer is the last state seen.
type Event struct {
	Type EventType
	Peer Peer
}
