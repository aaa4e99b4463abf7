package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"
)

// Advertiser publishes one service instance on the chosen interfaces until
// Close. Its methods are safe for concurrent use.
type Advertiser struct {
	ep   *endpoint
	log  *slog.Logger
	mu   sync.Mutex // guards resp.zones, name, closed
	resp *responder
	name string
	host string

	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

// Advertise probes for the instance and host names (renaming on conflict,
// RFC 6762 §9), then answers queries and announces the service three
// times, one second apart. It returns once probing is over (under a second)
// and the first announcement is sent. ctx bounds only the probing; the
// advertisement lasts until Close.
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
	names, err := o.interfaces()
	if err != nil {
		return nil, err
	}
	ep, err := openEndpoint(names, log)
	if err != nil {
		return nil, err
	}
	a := &Advertiser{ep: ep, log: log, stop: make(chan struct{})}
	a.resp = &responder{send: a.sendTo, log: log, probing: true}

	instance, hostLabel := s.Name, host
	instanceTry, hostTry := 1, 1
	for try := 1; ; try++ {
		if err := a.setZones(instance, hostLabel, s.Port, txt); err != nil {
			ep.close()
			return nil, err
		}
		instanceConflict, hostConflict, err := a.probe(ctx)
		if err != nil {
			ep.close()
			return nil, err
		}
		if !instanceConflict && !hostConflict {
			break
		}
		if try == maxConflicts {
			ep.close()
			return nil, fmt.Errorf("mdns names %q / %q: still in conflict after %d renames", instance, hostLabel, try)
		}
		if instanceConflict {
			instanceTry++
			instance = renamed(s.Name, instanceTry, false)
		}
		if hostConflict {
			hostTry++
			hostLabel = renamed(host, hostTry, true)
		}
		log.Info("mdns renamed after conflict", "instance", instance, "host", hostLabel)
	}
	a.name, a.host = instance, hostLabel+".local"
	a.wg.Add(1)
	go a.serve()
	a.announce(false)
	a.wg.Add(1)
	go a.reannounce()
	return a, nil
}

// Name returns the instance name in use (differs from Service.Name after
// a conflict).
func (a *Advertiser) Name() string { return a.name }

// Host returns the host name of the published address records, e.g.
// "lab-mac-tbrdma.local".
func (a *Advertiser) Host() string { return a.host }

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
	err = a.setZonesLocked(a.name, trimLocal(a.host), s.Port, txt)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	a.announce(false)
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
	a.announce(true)
	a.ep.close()
	a.wg.Wait()
	return nil
}

func (a *Advertiser) setZones(instance, host string, port uint16, txt []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.setZonesLocked(instance, host, port, txt)
}

func (a *Advertiser) setZonesLocked(instance, host string, port uint16, txt []string) error {
	zones := make(map[int]*zone)
	for _, l := range a.ep.links {
		z, err := newZone(instance, host, port, l.addrs, txt)
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

// probe sends three probes 250 ms apart after a random 0-250 ms delay and
// reports which names met a conflict.
func (a *Advertiser) probe(ctx context.Context) (instanceConflict, hostConflict bool, err error) {
	a.mu.Lock()
	a.resp.probing, a.resp.instanceConflict, a.resp.hostConflict = true, false, false
	zones := a.resp.zones
	a.mu.Unlock()
	deadline := time.NewTimer(rand.N(probeInterval))
	defer deadline.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case p := <-a.ep.pkts:
			a.mu.Lock()
			a.resp.handle(p)
			ic, hc := a.resp.instanceConflict, a.resp.hostConflict
			a.mu.Unlock()
			if ic || hc {
				return ic, hc, nil
			}
		case <-deadline.C:
			if sent == probeCount {
				a.mu.Lock()
				a.resp.probing = false
				a.mu.Unlock()
				return false, false, nil
			}
			for i, z := range zones {
				b, err := probe(z, sent == 0)
				if err != nil {
					return false, false, fmt.Errorf("build probe: %w", err)
				}
				a.sendTo(i, b, netip.AddrPort{})
			}
			sent++
			deadline.Reset(probeInterval)
		}
	}
}

// serve answers queries until Close.
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
		}
	}
}

// reannounce repeats the announcement (RFC 6762 §8.3).
func (a *Advertiser) reannounce() {
	defer a.wg.Done()
	t := time.NewTicker(announceInterval)
	defer t.Stop()
	for i := 1; i < announceCount; i++ {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.announce(false)
		}
	}
}

func (a *Advertiser) announce(goodbye bool) {
	a.mu.Lock()
	zones := a.resp.zones
	a.mu.Unlock()
	for i, z := range zones {
		b, err := announcement(z, goodbye)
		if err != nil {
			a.log.Warn("build mdns announcement", "err", err)
			continue
		}
		a.sendTo(i, b, netip.AddrPort{})
	}
}
