package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/tbrdma/tbrdma/discovery"
	"github.com/tbrdma/tbrdma/verbs"
)

// advertiser is what serve keeps of a discovery.Advertiser.
type advertiser interface {
	Name() string
	Host() string
	Close() error // says goodbye
}

// advertiseMDNS is discovery.Advertise behind the advertiser interface.
func advertiseMDNS(ctx context.Context, s discovery.Service, o *discovery.Options) (advertiser, error) {
	a, err := discovery.Advertise(ctx, s, o)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// serveCaps are the capabilities serve advertises (TXT "caps").
var serveCaps = []string{"rc", "uc", "ud", "atomic", "srq", "cm"}

// servedDevice is a served context and the device (interface) it is on.
type servedDevice struct {
	ctx *verbs.Context
	dev *verbs.Device
}

// advertised picks the served devices to advertise, one per interface: those
// on --iface, else those on a Thunderbolt interface. The error says why
// there is none.
func (o *serveOptions) advertised(devs []*verbs.Context) ([]servedDevice, error) {
	var list []*verbs.Device
	var listErr error
	var out []servedDevice
	seen := map[string]bool{}
	anyThunderbolt := false
	for _, c := range devs {
		d := c.Device()
		if d == nil {
			if list == nil && listErr == nil {
				list, listErr = o.Devices(&verbs.DeviceListOptions{All: true})
				if listErr == nil && list == nil {
					list = []*verbs.Device{}
				}
			}
			d = deviceOf(list, c.LocalAddr().Addr())
		}
		if d == nil {
			continue
		}
		anyThunderbolt = anyThunderbolt || d.Thunderbolt
		want := d.Thunderbolt
		if len(o.Ifaces) > 0 {
			want = slices.Contains(o.Ifaces, d.Netdev)
		}
		if want && !seen[d.Netdev] {
			seen[d.Netdev] = true
			out = append(out, servedDevice{c, d})
		}
	}
	if len(out) == 0 && list == nil && listErr == nil {
		list, listErr = o.Devices(&verbs.DeviceListOptions{All: true})
	}
	for _, d := range list {
		anyThunderbolt = anyThunderbolt || d.Thunderbolt
	}
	var served []string
	for _, c := range devs {
		served = append(served, c.LocalAddr().Addr().String())
	}
	switch {
	case len(out) > 0:
		return out, nil
	case listErr != nil:
		return nil, fmt.Errorf("list devices: %w", listErr)
	case len(o.Ifaces) > 0:
		return nil, fmt.Errorf("none of the served addresses (%s) is on --iface %s", strings.Join(served, ", "), strings.Join(o.Ifaces, ","))
	case !anyThunderbolt:
		return nil, discovery.ErrNoInterface
	}
	return nil, fmt.Errorf("none of the served addresses (%s) is on a Thunderbolt interface (name the interface to advertise on with --iface)", strings.Join(served, ", "))
}

// deviceOf returns the listed device that has addr, or nil.
func deviceOf(list []*verbs.Device, addr netip.Addr) *verbs.Device {
	addr = addr.Unmap().WithZone("")
	for _, d := range list {
		for _, g := range d.GIDs {
			if g.Addr.Unmap().WithZone("") == addr {
				return d
			}
		}
	}
	return nil
}

// advertisedPorts are the ports serve listens on, as bound (with -p 0 the
// kernel picks one per address).
type advertisedPorts struct {
	cm  map[netip.Addr]uint16 // the ping service's rdma_cm port, per device address
	oob uint16                // the TCP port of the hosted tests; 0: none
}

// service is what serve publishes for one served device (DESIGN.md,
// Discovery): its RoCEv2 port, GID, node GUID, active MTU, device name,
// capabilities, the tbrdma version, the TCP port of the hosted pingpong
// and perftest servers (TXT "oob"), the rdma_cm port of the ping service
// (TXT "cm") and the largest large-segment size its link carries (TXT
// "seg": peers that see it may offer tbrdma's large-segment extension,
// in the perftest exchange or the CM private data).
func service(s servedDevice, cmPort, oobPort uint16) discovery.Service {
	return discovery.Service{
		CMPort:      cmPort,
		OOBPort:     oobPort,
		Port:        s.ctx.LocalAddr().Port(),
		GID:         netip.AddrFrom16(s.ctx.GID()),
		GUID:        fmt.Sprintf("%016x", uint64(s.dev.NodeGUID)),
		MTU:         s.ctx.ActiveMTU().Bytes(),
		Device:      s.dev.Name,
		Caps:        serveCaps,
		Version:     moduleVersion(),
		SegmentSize: verbs.SegmentSizeForLink(s.dev.LinkMTU),
	}
}

// advertise publishes the served devices on mDNS, one advertisement per
// interface, until ctx ends or the returned function is called; both say
// goodbye. Advertising is best effort: what fails is a warning on log.
func (o *serveOptions) advertise(ctx context.Context, devs []*verbs.Context, ports advertisedPorts, log io.Writer) (stop func()) {
	warn := func(err error) {
		hint := "--no-advertise turns this off"
		if errors.Is(err, discovery.ErrNoInterface) {
			hint = "peers can still list this machine with --static; " + hint
		}
		fmt.Fprintf(log, "tbrdma serve: warning: not advertising on mDNS: %v (%s)\n", err, hint)
	}
	served, err := o.advertised(devs)
	if err != nil {
		warn(err)
		return func() {}
	}
	advs := make([]advertiser, len(served))
	var wg sync.WaitGroup
	for i, s := range served {
		wg.Go(func() {
			a, err := o.Advertise(ctx, service(s, ports.cm[s.ctx.LocalAddr().Addr()], ports.oob), &discovery.Options{Interfaces: []string{s.dev.Netdev}, Logger: o.Logger})
			switch {
			case err != nil && ctx.Err() == nil:
				warn(fmt.Errorf("%s: %w", s.dev.Netdev, err))
			case err == nil:
				advs[i] = a
				fmt.Fprintf(log, "tbrdma serve: advertising %q (_tbrdma._udp, host %s) on mDNS on %s\n", a.Name(), a.Host(), s.dev.Netdev)
			}
		})
	}
	wg.Wait()
	stop = sync.OnceFunc(func() {
		n := 0
		for _, a := range advs {
			if a != nil {
				a.Close()
				n++
			}
		}
		if n > 0 {
			fmt.Fprintln(log, "tbrdma serve: said goodbye on mDNS")
		}
	})
	context.AfterFunc(ctx, stop)
	return stop
}
