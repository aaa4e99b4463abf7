package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

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
	network := "udp4"
	if v6 {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: controlSocket}
	pc, err := lc.ListenPacket(context.Background(), network, bindAddr(ifi, v6))
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
		if err := p.JoinGroup(ifi, &net.UDPAddr{IP: groupV6.AsSlice()}); err != nil {
			return fail("join ff02::fb", err)
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
		if err := p.JoinGroup(ifi, &net.UDPAddr{IP: groupV4.AsSlice()}); err != nil {
			return fail("join 224.0.0.251", err)
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
}

// endpoint owns the sockets of all chosen interfaces and a reader goroutine
// per socket; received packets arrive on pkts.
type endpoint struct {
	links []*link
	pkts  chan packet
	log   *slog.Logger
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// openEndpoint opens mDNS sockets on the named interfaces. A family that
// cannot be used on an interface (no IPv6, group join refused) is logged
// and skipped; an interface with neither family is an error.
func openEndpoint(names []string, log *slog.Logger) (*endpoint, error) {
	e := &endpoint{pkts: make(chan packet, 64), log: log, done: make(chan struct{})}
	for _, name := range names {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			e.close()
			return nil, fmt.Errorf("interface %q: %w", name, err)
		}
		l := &link{ifi: ifi, addrs: interfaceAddrs(ifi)}
		var errs []error
		for _, v6 := range []bool{false, true} {
			if !hasFamily(l.addrs, v6) {
				continue
			}
			c, err := listenMDNS(ifi, v6)
			if err != nil {
				errs = append(errs, err)
				log.Debug("mdns socket not available", "interface", name, "ipv6", v6, "err", err)
				continue
			}
			l.conns = append(l.conns, c)
		}
		if len(l.conns) == 0 {
			e.close()
			if len(errs) == 0 {
				return nil, fmt.Errorf("interface %s: %w", name, ErrNoAddress)
			}
			return nil, fmt.Errorf("interface %s: mdns sockets: %w", name, errors.Join(errs...))
		}
		e.links = append(e.links, l)
	}
	for _, l := range e.links {
		for _, c := range l.conns {
			e.wg.Add(1)
			go e.readLoop(c)
		}
	}
	return e, nil
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
	for _, l := range e.links {
		if l.ifi.Index == i {
			return l
		}
	}
	return nil
}

// send writes b on every socket of l (to invalid: to the groups).
func (e *endpoint) send(l *link, b []byte, to netip.AddrPort) {
	for _, c := range l.conns {
		if err := c.write(b, to); err != nil && !errors.Is(err, net.ErrClosed) {
			e.log.Debug("mdns send", "interface", l.ifi.Name, "to", to, "err", err)
		}
	}
}

func (e *endpoint) close() {
	e.once.Do(func() {
		close(e.done)
		for _, l := range e.links {
			for _, c := range l.conns {
				c.uc.Close()
			}
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

func hasFamily(addrs []netip.Addr, v6 bool) bool {
	for _, a := range addrs {
		if a.Is6() == v6 {
			return true
		}
	}
	return false
}

// netipAny is the invalid AddrPort that send understands as "the groups".
var netipAny netip.AddrPort
