package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"syscall"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/discovery"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// Factory holds what commands depend on, so that tests can replace it.
type Factory struct {
	IO  *ui.IO
	Now func() time.Time
	// OpenDevice opens a tbrdma device (a verbs context) on a local IP
	// address, receiving RoCEv2 on UDP port 4791 there.
	OpenDevice func(addr netip.Addr) (*verbs.Context, error)
	// Logger, when set by --debug, receives the engine's debug messages.
	Logger *slog.Logger
	// WrapConn, when set by --fault, wraps the UDP endpoint of every
	// device OpenDevice opens (fault.go).
	WrapConn func(transport.Conn) transport.Conn
	// PSK is set by --psk-file: every device OpenDevice opens checks the
	// key on rdma_cm connection setup (psk.go).
	PSK bool
	// BrowsePeers is the mDNS browse that completes peer arguments
	// (completion_peers.go), discovery.Browse; nil: no browse.
	BrowsePeers func(context.Context, *discovery.Options) ([]discovery.Peer, error)
}

// NewFactory returns the factory of the real process.
func NewFactory() *Factory {
	f := &Factory{IO: ui.System(), Now: time.Now, BrowsePeers: discovery.Browse}
	f.OpenDevice = func(addr netip.Addr) (*verbs.Context, error) {
		ctx, err := openDeviceWith(addr, f.Logger, f.WrapConn)
		if err == nil {
			// For "tbrdma devices -v" (livecounters.go).
			publishCounters(ctx, liveCommand())
		}
		return ctx, err
	}
	return f
}

// openDevice opens the soft device whose interface has addr, bound to that
// interface so that only packets arriving on it are processed, with the
// device's active MTU. An address no listed device has (or a failure to
// list) falls back to a context on the address alone.
func openDevice(addr netip.Addr, log *slog.Logger) (*verbs.Context, error) {
	return openDeviceWith(addr, log, nil)
}

// openDeviceWith is openDevice with the endpoint wrapped by wrap (nil: as
// it is).
func openDeviceWith(addr netip.Addr, log *slog.Logger, wrap func(transport.Conn) transport.Conn) (*verbs.Context, error) {
	var ctx *verbs.Context
	var err error
	// NoNetpoll: the endpoint's socket stays out of the Go runtime's epoll
	// set (Linux). Every command here reads its socket from one receive
	// loop, which polls it (latency tests), sleeps in recvmmsg (the kernel
	// wait) or in poll(2); the poller's registration only made every
	// arriving datagram also run the kernel's epoll callback, on the
	// sender's CPU, inside its send: 0.75 µs of each sendmmsg on a veth
	// link, read-lat 64 B -5 %, read-lat -e -6 %, bandwidth unchanged
	// (docs/performance.md, session 13).
	o := &verbs.Options{Addr: addr, Logger: log, WrapConn: wrap, NoNetpoll: true}
	if dev := deviceWithAddr(addr); dev != nil {
		ctx, err = dev.Open(o)
	} else {
		o.ActiveMTU = verbs.MTU4096
		ctx, err = verbs.NewContext(o)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		port := wire.UDPPort
		if _, ok := findPortHolder("udp", addr, port); ok {
			return nil, fmt.Errorf("open device on %v: UDP port %d at %v is in use: %s: stop it, or pick another local address with --bind", addr, port, addr, portHolderText("udp", addr, port))
		}
		return nil, fmt.Errorf("open device on %v: UDP port %d at %v is in use (by rdma_rxe, whose devices tbrdma devices lists, or by a process: %s names it): pick another local address with --bind, or stop its holder", addr, port, addr, portLookupCommand("udp", port))
	}
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		return nil, fmt.Errorf("open device on %v: no interface has that address (--bind must be a local address)", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("open device on %v: %w", addr, err)
	}
	return ctx, nil
}

func deviceWithAddr(addr netip.Addr) *verbs.Device {
	devs, err := verbs.Devices(&verbs.DeviceListOptions{All: true})
	if err != nil {
		return nil
	}
	addr = addr.Unmap().WithZone("")
	for _, d := range devs {
		for _, g := range d.GIDs {
			if g.Addr.WithZone("") == addr {
				return d
			}
		}
	}
	return nil
}
