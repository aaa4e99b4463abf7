package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// mDNS constants (RFC 6762 §3, §11).
const (
	mdnsPort     = 5353
	mdnsHopLimit = 255
	// maxPacket is the largest mDNS message accepted or sent; RFC 6762
	// §17 caps a packet at 9000 bytes including headers.
	maxPacket = 9000
)

var (
	groupV4 = netip.MustParseAddr("224.0.0.251")
	groupV6 = netip.MustParseAddr("ff02::fb")
)

// packet is one datagram received on an interface.
type packet struct {
	data    []byte
	from    netip.AddrPort
	ifIndex int
}

// mconn is the mDNS socket of one interface and one address family: bound
// to port 5353 (see bindAddr), joined to the group on that interface only,
// sending to the group through that interface with hop limit 255.
type mconn struct {
	ifi   *net.Interface
	v6    bool
	uc    *net.UDPConn
	p4    *ipv4.PacketConn
	p6    *ipv6.PacketConn
	group netip.AddrPort
}

func listenMDNS(ifi *net.Interface, v6 bool) (*mconn, error) {
	return listen(ifi, v6, false)
}

// listenOneShot opens the socket of legacy one-shot queries (RFC 6762
// §5.1, §6.7) on ifi: an ephemeral port, not joined to the group, sending
// to the group through ifi. Responders answer such queries at once by
// unicast to that port, without the one-second multicast rate limit that
// Avahi and mDNSResponder apply, so Browse and Resolve do not miss
// records that a responder multicast just before they started.
func listenOneShot(ifi *net.Interface, v6 bool) (*mconn, error) {
	return listen(ifi, v6, true)
}

func listen(ifi *net.Interface, v6, oneShot bool) (*mconn, error) {
	network := "udp4"
	if v6 {
		network = "udp6"
	}
	var (
		pc  net.PacketConn
		err error
	)
	if oneShot {
		pc, err = net.ListenPacket(network, ":0")
	} else {
		lc := net.ListenConfig{Control: controlSocket}
		pc, err = lc.ListenPacket(context.Background(), network, bindAddr(ifi, v6))
	}
	if err != nil {
		return nil, err
	}
	c := &mconn{ifi: ifi, v6: v6, uc: pc.(*net.UDPConn)}
	fail := func(what string, err error) (*mconn, error) {
		c.uc.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if v6 {
		c.group = netip.AddrPortFrom(groupV6.WithZone(ifi.Name), mdnsPort)
		p := ipv6.NewPacketConn(c.uc)
		if !oneShot {
			if err := p.JoinGroup(ifi, &net.UDPAddr{IP: groupV6.AsSlice()}); err != nil {
				return fail("join ff02::fb", err)
			}
		}
		if err := p.SetMulticastInterface(ifi); err != nil {
			return fail("set multicast interface", err)
		}
		if err := p.SetMulticastHopLimit(mdnsHopLimit); err != nil {
			return fail("set hop limit", err)
		}
		_ = p.SetHopLimit(mdnsHopLimit)
		// Loopback lets browsers on this host (avahi, another tbrdma) see
		// the answers.
		if err := p.SetMulticastLoopback(true); err != nil {
			return fail("set multicast loopback", err)
		}
		if err := p.SetControlMessage(ipv6.FlagInterface, true); err != nil {
			return fail("enable packet info", err)
		}
		c.p6 = p
	} else {
		c.group = netip.AddrPortFrom(groupV4, mdnsPort)
		p := ipv4.NewPacketConn(c.uc)
		if !oneShot {
			if err := p.JoinGroup(ifi, &net.UDPAddr{IP: groupV4.AsSlice()}); err != nil {
				return fail("join 224.0.0.251", err)
			}
		}
		if err := p.SetMulticastInterface(ifi); err != nil {
			return fail("set multicast interface", err)
		}
		if err := p.SetMulticastTTL(mdnsHopLimit); err != nil {
			return fail("set multicast ttl", err)
		}
		_ = p.SetTTL(mdnsHopLimit)
		if err := p.SetMulticastLoopback(true); err != nil {
			return fail("set multicast loopback", err)
		}
		if err := p.SetControlMessage(ipv4.FlagInterface, true); err != nil {
			return fail("enable packet info", err)
		}
		c.p4 = p
	}
	return c, nil
}

// read returns the next datagram that arrived on c's interface.
func (c *mconn) read(b []byte) (int, netip.AddrPort, error) {
	for {
		var (
			n       int
			src     net.Addr
			ifIndex int
			err     error
		)
		if c.v6 {
			var cm *ipv6.ControlMessage
			n, cm, src, err = c.p6.ReadFrom(b)
			if cm != nil {
				ifIndex = cm.IfIndex
			}
		} else {
			var cm *ipv4.ControlMessage
			n, cm, src, err = c.p4.ReadFrom(b)
			if cm != nil {
				ifIndex = cm.IfIndex
			}
		}
		if err != nil {
			return 0, netip.AddrPort{}, err
		}
		// Without packet info (some platforms) trust the group join.
		if ifIndex != 0 && ifIndex != c.ifi.Index {
			continue
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		ap := ua.AddrPort()
		addr := ap.Addr().Unmap()
		if addr.Is6() && addr.IsLinkLocalUnicast() {
			addr = addr.WithZone(c.ifi.Name)
		}
		return n, netip.AddrPortFrom(addr, ap.Port()), nil
	}
}

// write sends b to the group (to invalid) or to a unicast address of the
// same family.
func (c *mconn) write(b []byte, to netip.AddrPort) error {
	if !to.IsValid() {
		to = c.group
	}
	if to.Addr().Is4() == c.v6 {
		return nil // other family: the other socket of the link sends it
	}
	_, err := c.uc.WriteToUDPAddrPort(b, to)
	return err
}

// link is one interface with its mDNS sockets (one or two families).
type link struct {
	ifi   *net.Interface
	addrs []netip.Addr // the interface's unicast addresses (no zones)
	conns []*mconn
	// oneShot are the sockets of legacy one-shot queries, when the
	// endpoint was opened for Browse or Resolve.
	oneShot []*mconn
}

func (l *link) close() {
	for _, c := range slices.Concat(l.conns, l.oneShot) {
		c.uc.Close()
	}
}

// linkEvent is a change of an endpoint's links seen by its monitor.
type linkEvent struct {
	ifIndex int
	name    string
	// up is false when the link went away (interface removed, down,
	// without carrier, or without addresses); true when it came up, or
	// when its addresses changed (then oldAddrs holds the previous ones).
	up       bool
	oldAddrs []netip.Addr
}

// pollInterval is how often the monitor looks at the interfaces.
const pollInterval = 500 * time.Millisecond

// endpoint owns the sockets of the chosen interfaces and a reader goroutine
// per socket; received packets arrive on pkts. A monitor goroutine follows
// the interfaces (hot-plug): a link that goes down or disappears is closed,
// one that comes back (or a Thunderbolt interface that appears, when none
// was named) is opened, and a link whose addresses change is reopened; each
// change is reported on events.
type endpoint struct {
	mu      sync.Mutex // guards links, closed
	links   []*link
	closed  bool
	want    []string // named interfaces; nil: the Thunderbolt interfaces
	oneShot bool
	pkts    chan packet
	events  chan linkEvent
	log     *slog.Logger
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// openEndpoint opens mDNS sockets on the named interfaces (nil names: the
// Thunderbolt interfaces that are up, ErrNoInterface if none). A family
// that cannot be used on an interface (no IPv6, group join refused) is
// logged and skipped; an interface with neither family is an error.
// oneShot adds the sockets of legacy one-shot queries.
func openEndpoint(names []string, oneShot bool, log *slog.Logger) (*endpoint, error) {
	e := &endpoint{want: names, oneShot: oneShot, pkts: make(chan packet, 64), events: make(chan linkEvent, 16),
		log: log, done: make(chan struct{})}
	if names == nil {
		var err error
		if names, err = listThunderbolt(); err != nil {
			return nil, fmt.Errorf("list interfaces: %w", err)
		}
		if len(names) == 0 {
			return nil, ErrNoInterface
		}
	}
	for _, name := range names {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			e.close()
			return nil, fmt.Errorf("interface %q: %w", name, err)
		}
		l, err := e.openLink(ifi)
		if err != nil {
			e.close()
			return nil, err
		}
		e.addLink(l)
	}
	e.wg.Add(1)
	go e.monitor()
	return e, nil
}

// openLink opens the sockets of one interface.
func (e *endpoint) openLink(ifi *net.Interface) (*link, error) {
	l := &link{ifi: ifi, addrs: interfaceAddrs(ifi)}
	var errs []error
	for _, v6 := range []bool{false, true} {
		if !hasFamily(l.addrs, v6) {
			continue
		}
		c, err := listenMDNS(ifi, v6)
		if err != nil {
			errs = append(errs, err)
			e.log.Debug("mdns socket not available", "interface", ifi.Name, "ipv6", v6, "err", err)
			continue
		}
		l.conns = append(l.conns, c)
		if e.oneShot {
			if c, err := listenOneShot(ifi, v6); err == nil {
				l.oneShot = append(l.oneShot, c)
			} else {
				e.log.Debug("mdns one-shot socket not available", "interface", ifi.Name, "ipv6", v6, "err", err)
			}
		}
	}
	if len(l.conns) == 0 {
		l.close()
		if len(errs) == 0 {
			return nil, fmt.Errorf("interface %s: %w", ifi.Name, ErrNoAddress)
		}
		return nil, fmt.Errorf("interface %s: mdns sockets: %w", ifi.Name, errors.Join(errs...))
	}
	return l, nil
}

// addLink starts the readers of l and adds it to the links.
func (e *endpoint) addLink(l *link) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		l.close()
		return
	}
	for _, c := range slices.Concat(l.conns, l.oneShot) {
		e.wg.Add(1)
		go e.readLoop(c)
	}
	e.links = append(e.links, l)
}

// removeLink closes l and drops it from the links.
func (e *endpoint) removeLink(l *link) {
	e.mu.Lock()
	e.links = slices.DeleteFunc(e.links, func(x *link) bool { return x == l })
	e.mu.Unlock()
	l.close()
}

// snapshot returns the current links.
func (e *endpoint) snapshot() []*link {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.links)
}

// usable reports whether an interface can carry mDNS now: up, with
// carrier (loopback needs none), and with an address.
func usable(ifi *net.Interface, addrs []netip.Addr) bool {
	return ifi.Flags&net.FlagUp != 0 && (ifi.Flags&net.FlagRunning != 0 || ifi.Flags&net.FlagLoopback != 0) && len(addrs) > 0
}

// monitor follows the interfaces until close.
func (e *endpoint) monitor() {
	defer e.wg.Done()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case <-t.C:
			for _, ev := range e.rescan() {
				select {
				case e.events <- ev:
				case <-e.done:
					return
				}
			}
		}
	}
}

// rescan compares the interfaces with the links, opens, reopens and closes
// links accordingly, and returns the changes.
func (e *endpoint) rescan() []linkEvent {
	want := e.want
	if want == nil {
		names, err := listThunderbolt()
		if err != nil {
			e.log.Debug("mdns: list interfaces", "err", err)
			return nil
		}
		want = names
	}
	var evs []linkEvent
	have := map[string]bool{}
	for _, l := range e.snapshot() {
		ifi, err := net.InterfaceByName(l.ifi.Name)
		var addrs []netip.Addr
		if err == nil {
			addrs = interfaceAddrs(ifi)
		}
		if err != nil || ifi.Index != l.ifi.Index || !usable(ifi, addrs) || !slices.Contains(want, l.ifi.Name) {
			e.log.Info("mdns: interface gone", "interface", l.ifi.Name)
			e.removeLink(l)
			evs = append(evs, linkEvent{ifIndex: l.ifi.Index, name: l.ifi.Name})
			continue
		}
		have[l.ifi.Name] = true
		if sameAddrs(addrs, l.addrs) {
			continue
		}
		// New addresses: reopen the sockets (a new family may need one).
		e.removeLink(l)
		nl, err := e.openLink(ifi)
		if err != nil {
			e.log.Info("mdns: interface unusable after an address change", "interface", ifi.Name, "err", err)
			evs = append(evs, linkEvent{ifIndex: l.ifi.Index, name: l.ifi.Name})
			continue
		}
		e.addLink(nl)
		e.log.Info("mdns: interface addresses changed", "interface", ifi.Name, "old", l.addrs, "new", nl.addrs)
		evs = append(evs, linkEvent{ifIndex: ifi.Index, name: ifi.Name, up: true, oldAddrs: l.addrs})
	}
	for _, name := range want {
		if have[name] {
			continue
		}
		ifi, err := net.InterfaceByName(name)
		if err != nil || !usable(ifi, interfaceAddrs(ifi)) {
			continue
		}
		l, err := e.openLink(ifi)
		if err != nil {
			e.log.Debug("mdns: interface not usable yet", "interface", name, "err", err)
			continue
		}
		e.addLink(l)
		e.log.Info("mdns: interface up", "interface", name, "addrs", l.addrs)
		evs = append(evs, linkEvent{ifIndex: ifi.Index, name: name, up: true})
	}
	return evs
}

func (e *endpoint) readLoop(c *mconn) {
	defer e.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := c.read(buf)
		if err != nil {
			select {
			case <-e.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			e.log.Debug("mdns read", "interface", c.ifi.Name, "err", err)
			continue
		}
		p := packet{data: append([]byte(nil), buf[:n]...), from: from, ifIndex: c.ifi.Index}
		select {
		case e.pkts <- p:
		case <-e.done:
			return
		}
	}
}

// link returns the link of interface index i, or nil.
func (e *endpoint) link(i int) *link {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.links {
		if l.ifi.Index == i {
			return l
		}
	}
	return nil
}

// send writes b on every socket of l (to invalid: to the groups).
func (e *endpoint) send(l *link, b []byte, to netip.AddrPort) {
	e.write(l, l.conns, b, to)
}

// sendOneShot sends a legacy one-shot query to the groups on l.
func (e *endpoint) sendOneShot(l *link, b []byte) {
	e.write(l, l.oneShot, b, netip.AddrPort{})
}

func (e *endpoint) write(l *link, conns []*mconn, b []byte, to netip.AddrPort) {
	for _, c := range conns {
		if err := c.write(b, to); err != nil && !errors.Is(err, net.ErrClosed) {
			e.log.Debug("mdns send", "interface", l.ifi.Name, "to", to, "err", err)
		}
	}
}

func (e *endpoint) close() {
	e.once.Do(func() {
		close(e.done)
		e.mu.Lock()
		e.closed = true
		links := e.links
		e.mu.Unlock()
		for _, l := range links {
			l.close()
		}
	})
	e.wg.Wait()
}

// interfaceAddrs returns the unicast addresses of ifi.
func interfaceAddrs(ifi *net.Interface) []netip.Addr {
	as, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			addr = addr.Unmap()
			if addr.IsMulticast() || addr.IsUnspecified() {
				continue
			}
			out = append(out, addr)
		}
	}
	return out
}

// sameAddrs reports whether two address lists hold the same addresses, in
// any order.
func sameAddrs(a, b []netip.Addr) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(a, b)
}

func hasFamily(addrs []netip.Addr, v6 bool) bool {
	for _, a := range addrs {
		if a.Is6() == v6 {
			return true
		}
	}
	return false
}
