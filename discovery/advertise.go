package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Advertiser publishes one service instance on the chosen interfaces until
// Close. Its methods are safe for concurrent use.
type Advertiser struct {
	ep   *endpoint
	log  *slog.Logger
	mu   sync.Mutex // guards resp, name, host, port, txt, closed
	resp *responder
	name string // instance label in use
	host string // host name in use, "<label>.local"
	port uint16
	txt  []string

	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

// Advertise probes for the instance and host names (renaming on conflict,
// RFC 6762 §9; a simultaneous probe for the same name is settled by the
// tie-break of §8.2), then answers queries and announces the service three
// times, one second apart. It returns once probing is over (under a second
// without conflicts) and the first announcement is sent. ctx bounds only
// the probing; the advertisement lasts until Close.
//
// The advertiser follows its interfaces: when one goes down or disappears
// (cable unplugged) it stops answering there; when it comes back, or a
// Thunderbolt interface appears (when Options.Interfaces is empty), or an
// interface's addresses change, it sends goodbyes for the addresses that
// are gone and announces the service there again.
func Advertise(ctx context.Context, s Service, o *Options) (*Advertiser, error) {
	log := o.logger()
	if s.Name == "" {
		s.Name = defaultInstance()
	}
	if len(s.Name) > maxLabel {
		return nil, fmt.Errorf("instance name %q longer than %d bytes", s.Name, maxLabel)
	}
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	txt, err := encodeTXT(s.txt())
	if err != nil {
		return nil, err
	}
	host := defaultHostLabel()
	if o != nil && o.HostName != "" {
		host = trimLocal(o.HostName)
	}
	ep, err := openEndpoint(o.interfaces(), false, log)
	if err != nil {
		return nil, err
	}
	a := &Advertiser{ep: ep, log: log, stop: make(chan struct{}), port: s.Port, txt: txt}
	a.resp = &responder{send: a.sendTo, log: log, probing: true}

	instance, hostLabel := s.Name, host
	instanceTry, hostTry, lost := 1, 1, 0
	for try := 1; ; try++ {
		a.mu.Lock()
		a.name, a.host = instance, hostLabel+".local"
		err := a.setZonesLocked()
		a.mu.Unlock()
		if err != nil {
			ep.close()
			return nil, err
		}
		res, err := a.probe(ctx)
		if err != nil {
			ep.close()
			return nil, err
		}
		if try >= maxConflicts && (res.instanceConflict || res.hostConflict || res.lost) {
			ep.close()
			return nil, fmt.Errorf("mdns names %q / %q: still in conflict after %d tries; "+
				"choose another instance name (Service.Name) or host name (Options.HostName)", instance, hostLabel, try)
		}
		if res.lost && !res.instanceConflict && !res.hostConflict {
			// §8.2: the winner probes on; wait a second, then probe
			// again, when it will defend the name.
			lost++
			select {
			case <-ctx.Done():
				ep.close()
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		if !res.instanceConflict && !res.hostConflict {
			break
		}
		if res.instanceConflict {
			instanceTry++
			instance = renamed(s.Name, instanceTry, false)
		}
		if res.hostConflict {
			hostTry++
			hostLabel = renamed(host, hostTry, true)
		}
		log.Info("mdns renamed after conflict", "instance", instance, "host", hostLabel)
	}
	a.wg.Add(1)
	go a.serve()
	for _, l := range ep.snapshot() {
		a.startAnnouncing(l.ifi.Index)
	}
	return a, nil
}

// Name returns the instance name in use (differs from Service.Name after
// a conflict).
func (a *Advertiser) Name() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.name
}

// Host returns the host name of the published address records, e.g.
// "lab-mac-tbrdma.local".
func (a *Advertiser) Host() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.host
}

// Update replaces the published service data (port and TXT; the names
// stay) and announces the change.
func (a *Advertiser) Update(s Service) error {
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	txt, err := encodeTXT(s.txt())
	if err != nil {
		return err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	a.port, a.txt = s.Port, txt
	err = a.setZonesLocked()
	a.mu.Unlock()
	if err != nil {
		return err
	}
	for _, l := range a.ep.snapshot() {
		a.announce(l.ifi.Index, false)
	}
	return nil
}

// Close sends goodbye packets (every record with TTL 0) and closes the
// sockets. It is idempotent.
func (a *Advertiser) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	close(a.stop)
	for _, l := range a.ep.snapshot() {
		a.announce(l.ifi.Index, true)
	}
	a.ep.close()
	a.wg.Wait()
	return nil
}

// setZonesLocked builds the zone of every link from the current names and
// data.
func (a *Advertiser) setZonesLocked() error {
	zones := make(map[int]*zone)
	for _, l := range a.ep.snapshot() {
		z, err := newZone(a.name, trimLocal(a.host), a.port, l.addrs, a.txt)
		if err != nil {
			return fmt.Errorf("interface %s: %w", l.ifi.Name, err)
		}
		zones[l.ifi.Index] = z
	}
	a.resp.zones = zones
	return nil
}

func (a *Advertiser) sendTo(ifIndex int, b []byte, to netip.AddrPort) {
	if l := a.ep.link(ifIndex); l != nil {
		a.ep.send(l, b, to)
	}
}

type probeResult struct {
	instanceConflict, hostConflict, lost bool
}

// probe sends three probes 250 ms apart after a random 0-250 ms delay and
// reports which names met a conflict, or whether a simultaneous probe won
// the tie-break.
func (a *Advertiser) probe(ctx context.Context) (probeResult, error) {
	a.mu.Lock()
	r := a.resp
	r.probing, r.instanceConflict, r.hostConflict, r.lost = true, false, false, false
	zones := r.zones
	a.mu.Unlock()
	deadline := time.NewTimer(rand.N(probeInterval))
	defer deadline.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return probeResult{}, ctx.Err()
		case p := <-a.ep.pkts:
			a.mu.Lock()
			r.handle(p)
			res := probeResult{r.instanceConflict, r.hostConflict, r.lost}
			a.mu.Unlock()
			if res.instanceConflict || res.hostConflict || res.lost {
				return res, nil
			}
		case <-deadline.C:
			if sent == probeCount {
				a.mu.Lock()
				r.probing = false
				a.mu.Unlock()
				return probeResult{}, nil
			}
			for i, z := range zones {
				b, err := probe(z)
				if err != nil {
					return probeResult{}, fmt.Errorf("build probe: %w", err)
				}
				a.sendTo(i, b, netip.AddrPort{})
			}
			sent++
			deadline.Reset(probeInterval)
		}
	}
}

// serve answers queries and follows link changes until Close.
func (a *Advertiser) serve() {
	defer a.wg.Done()
	for {
		select {
		case <-a.stop:
			return
		case p := <-a.ep.pkts:
			a.mu.Lock()
			a.resp.handle(p)
			a.mu.Unlock()
		case ev := <-a.ep.events:
			a.linkChanged(ev)
		}
	}
}

// linkChanged reacts to an interface going, coming back or changing
// addresses (RFC 6762 §8.3: announce again after a change; §10.1:
// goodbyes for records no longer valid).
func (a *Advertiser) linkChanged(ev linkEvent) {
	a.mu.Lock()
	if !ev.up {
		delete(a.resp.zones, ev.ifIndex)
		a.mu.Unlock()
		return
	}
	l := a.ep.link(ev.ifIndex)
	if l == nil {
		a.mu.Unlock()
		return
	}
	var bye []byte
	if old := a.resp.zones[ev.ifIndex]; old != nil {
		var err error
		if bye, err = addressGoodbye(old, l.addrs); err != nil {
			a.log.Warn("pack mdns goodbye", "err", err)
		}
	}
	z, err := newZone(a.name, trimLocal(a.host), a.port, l.addrs, a.txt)
	if err != nil {
		delete(a.resp.zones, ev.ifIndex)
		a.mu.Unlock()
		a.log.Warn("mdns: cannot advertise on interface", "interface", ev.name, "err", err)
		return
	}
	a.resp.zones[ev.ifIndex] = z
	a.mu.Unlock()
	if bye != nil {
		a.ep.send(l, bye, netip.AddrPort{})
	}
	a.log.Info("mdns: announcing again", "interface", ev.name, "addrs", l.addrs)
	a.startAnnouncing(ev.ifIndex)
}

// addressGoodbye returns the goodbye (TTL 0) for the address records of
// old whose address is not in addrs; nil when none is gone.
func addressGoodbye(old *zone, addrs []netip.Addr) ([]byte, error) {
	var gone []dns.RR
	for _, rr := range old.all() {
		if addr, ok := recordAddr(rr); ok && !slices.Contains(addrs, addr) {
			rr.Header().Ttl = 0
			gone = append(gone, rr)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: gone}
	return m.Pack()
}

// recordAddr returns the address of an A or AAAA record.
func recordAddr(rr dns.RR) (netip.Addr, bool) {
	switch rr := rr.(type) {
	case *dns.A:
		a, ok := netip.AddrFromSlice(rr.A)
		return a.Unmap(), ok
	case *dns.AAAA:
		return netip.AddrFromSlice(rr.AAAA)
	}
	return netip.Addr{}, false
}

// startAnnouncing announces the service on one interface now and twice
// more, one second apart (RFC 6762 §8.3).
func (a *Advertiser) startAnnouncing(ifIndex int) {
	a.announce(ifIndex, false)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(announceInterval)
		defer t.Stop()
		for i := 1; i < announceCount; i++ {
			select {
			case <-a.stop:
				return
			case <-t.C:
				a.announce(ifIndex, false)
			}
		}
	}()
}

// announce sends every record of the interface's zone, with TTL 0 for a
// goodbye.
func (a *Advertiser) announce(ifIndex int, goodbye bool) {
	a.mu.Lock()
	z := a.resp.zones[ifIndex]
	var b []byte
	if z != nil {
		var err error
		b, err = announcement(z, goodbye)
		if err != nil {
			a.log.Warn("build mdns announcement", "err", err)
			b = nil
		} else if !goodbye {
			a.resp.noteMulticast(ifIndex, z.all())
		}
	}
	a.mu.Unlock()
	if b != nil {
		a.sendTo(ifIndex, b, netip.AddrPort{})
	}
}
