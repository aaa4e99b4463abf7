package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/rping"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/discovery"
	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/verbs"
)

type serveOptions struct {
	IO         *ui.IO
	Now        func() time.Time
	OpenDevice func(netip.Addr) (*verbs.Context, error)
	// Addrs lists the local addresses to serve on without --bind.
	Addrs func() ([]netip.Addr, error)
	// Ready, if set, is called once every listener is up (tests).
	Ready func([]netip.AddrPort)
	// Advertise publishes a served device on mDNS (discovery.Advertise);
	// Devices (verbs.Devices) names the served devices' interfaces.
	Advertise func(context.Context, discovery.Service, *discovery.Options) (advertiser, error)
	Devices   func(*verbs.DeviceListOptions) ([]*verbs.Device, error)
	Logger    *slog.Logger

	Bind     string
	Port     int
	Verbose  bool
	MaxConns int
	// OOBPort is the TCP port of the hosted pingpong and perftest
	// servers (serve_oob.go); 0 hosts none.
	OOBPort int
	// NoAdvertise turns mDNS off; Ifaces names the interfaces to
	// advertise on (default: the Thunderbolt ones).
	NoAdvertise bool
	Ifaces      []string
	// AnyInterface serves, without --bind, on every up non-loopback IPv4
	// address, not only the Thunderbolt ones (iface.go).
	AnyInterface bool
	// CatRelay is the socket of the relay for cat receivers on this
	// machine (serve_catrelay.go); "": the default path.
	CatRelay string

	bind netip.Addr
}

func newCmdServe(f *Factory, runF func(*serveOptions) error) *cobra.Command {
	opts := &serveOptions{IO: f.IO, Now: f.Now, Advertise: advertiseMDNS, Devices: verbs.Devices}
	opts.Addrs = servingAddrsFunc(&opts.AnyInterface)
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Advertise this machine and answer ping, pingpong and the perftest family",
		Long: `Listen on rdma_cm port 7174 (RDMA_PS_TCP) and answer rping's protocol for
every client that connects, "tbrdma ping" or the stock "rping -c", each
connection in its own goroutine, as "rping -s -P" does. One line per
connection accepted and closed goes to stderr; -v prints rping's "server ping
data: ..." lines on stdout.

On TCP --oob-port (18515) serve also runs the server side of "tbrdma
pingpong", "write-bw", "read-bw", "send-bw", "write-lat", "read-lat",
"send-lat" and "atomic-lat" clients, with the client's size, iterations and
depths, on its own device (each client gets a QP, CQ and MR of its own;
clients may run at the same time). A tbrdma client says which test it runs in
a hint that stock servers ignore (docs/wire-format.md). A stock perftest
client sends no hint: serve says so on stderr and closes the connection (run
the test's own server for it: "tbrdma write-bw" with --oob-port 0 here, or
serve stopped). A stock ibv_rc_pingpong client gets serve's defaults (4096
bytes, 1000 iterations, MTU 1024). "pingpong --ud" and -R (rdma_cm)
perftest clients are not hosted: serve refuses -R clients at once on rdma_cm
port --oob-port, with a REJ that a tbrdma client explains. A line per client
on stderr says what runs and how it ended; a failed client never stops serve.

A "tbrdma cat" receiver started on this machine, which cannot open a device
on serve's addresses, registers with serve over a unix socket (mode 0600,
same user only) next to serve's live-counter file; serve then listens on
cat's port for it and relays the stream it accepts.

Without --bind tbrdma serves on the IPv4 addresses of this machine's
Thunderbolt interfaces only (each is a device with UDP 4791; addresses whose
UDP 4791 is taken, by rdma_rxe for one, are skipped with a warning): a
laptop's LAN and Wi-Fi get no answer. The TCP port for hosted tests then
listens on every address and refuses, with a line on stderr, a client that
did not reach a served address. With no Thunderbolt link up serve says so and
exits 1: bring the link up (docs/tutorial.md), or give --bind ADDRESS, or
--any-interface to serve on every up, non-loopback IPv4 address.

SIGINT or SIGTERM is the normal way to stop it: it disconnects its peers
(each gets a DISCONNECTED event), waits up to two seconds for their answer
and exits 0.`,
		Example: `  tbrdma serve --bind 198.18.0.1
  rping -c -a 198.18.0.1 -C 10 -v           # on the peer, or:
  tbrdma ping -c 10 198.18.0.1`,
		Args: maxArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.OpenDevice, opts.Logger = f.OpenDevice, f.Logger
			var err error
			if opts.bind, err = parseBind(opts.Bind); err != nil {
				return err
			}
			if opts.Port < 0 || opts.Port > 65535 {
				return FlagErrorf("invalid -p %d: want 1..65535 (0: any free port)", opts.Port)
			}
			if opts.OOBPort < 0 || opts.OOBPort > 65535 {
				return FlagErrorf("invalid --oob-port %d: want 1..65535 (0: host no pingpong or perftest server)", opts.OOBPort)
			}
			if opts.MaxConns < 1 {
				return FlagErrorf("invalid --max-conns %d: want 1 or more", opts.MaxConns)
			}
			if f.PSK && opts.OOBPort != 0 {
				// The TCP exchange of pingpong and perftest carries no
				// key: a keyed serve does not host them unless asked to.
				if c.Flags().Changed("oob-port") {
					fmt.Fprintf(f.IO.ErrOut, "tbrdma serve: warning: --psk-file covers rdma_cm connections only: the pingpong and perftest clients on TCP port %d are served without the key\n", opts.OOBPort)
				} else {
					opts.OOBPort = 0
					fmt.Fprintf(f.IO.ErrOut, "tbrdma serve: --psk-file: not hosting pingpong and perftest clients on TCP (their exchange carries no key); give --oob-port 18515 to host them without it\n")
				}
			}
			if runF != nil {
				return runF(opts)
			}
			return runServe(c.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Bind, "bind", "", "local IP `address` to serve on (default: every IPv4 address of the Thunderbolt interfaces)")
	fl.IntVarP(&opts.Port, "port", "p", rping.DefaultPort, "rdma_cm `port` to listen on (0: any free port, printed on stderr)")
	fl.BoolVarP(&opts.Verbose, "verbose", "v", false, `print rping's "server ping data" lines`)
	fl.IntVar(&opts.OOBPort, "oob-port", 18515, "TCP `port` for pingpong and perftest clients (0: host none; with --psk-file 0 unless given, as their exchange carries no key)")
	fl.IntVar(&opts.MaxConns, "max-conns", 64, "connections served at once per address; more are rejected")
	fl.BoolVar(&opts.NoAdvertise, "no-advertise", false, "do not advertise this machine on mDNS (_tbrdma._udp)")
	fl.StringSliceVar(&opts.Ifaces, "iface", nil, "advertise on the interface `name` (repeatable; default: the Thunderbolt interfaces served)")
	addAnyInterfaceFlag(fl, &opts.AnyInterface)
	return cmd
}

// syncWriter serialises the writes of the connections' goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func runServe(ctx context.Context, o *serveOptions) error {
	out := &syncWriter{w: o.IO.Out}
	log := &syncWriter{w: o.IO.ErrOut}
	devs, err := openServingDevices("serve", o.bind, o.Addrs, o.OpenDevice, log)
	defer closeDevices(devs)
	if err != nil {
		return err
	}
	waits := make(map[*verbs.Context]*serveWait, len(devs))
	for _, d := range devs {
		// A served device's receive loop polls its socket for a moment
		// after each packet, as a dedicated latency server's does, so
		// that the sessions that spin on their CQs (the latency tests)
		// are answered as fast; an idle serve polls nothing. While only
		// bandwidth sessions that a dedicated server runs with the
		// kernel wait are under way, it waits in the kernel instead
		// (serve_wait.go).
		hooks.Of(d).SetBusyPoll(perf.BusyPollWindow)
		waits[d] = newServeWait(hooks.Of(d), log)
		// Large segments for the clients that offer them (serve_oob.go), as
		// far as the link carries them; QPs that do not agree on them (every
		// stock peer's) keep the path MTU.
		serveSegments(d, log)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Up before the "listening on" lines: cat receivers may come then.
	defer startCatRelay(ctx, o.CatRelay, devs, log)()
	so := rping.ServerOptions{
		MaxConns: o.MaxConns,
		Accepted: func(p netip.AddrPort) {
			fmt.Fprintf(log, "tbrdma serve: %v port %d connected\n", p.Addr(), p.Port())
		},
		Closed: func(p netip.AddrPort, pings int, err error) {
			why := "peer disconnected"
			switch {
			case errors.Is(err, rping.ErrShutdown):
				why = "disconnected by us (shutting down)"
			case err != nil:
				why = err.Error()
			}
			fmt.Fprintf(log, "tbrdma serve: %v port %d closed after %d pings: %s\n", p.Addr(), p.Port(), pings, why)
		},
	}
	if o.Verbose {
		so.Verbose = out
	}
	var mu sync.Mutex
	var bound []netip.AddrPort
	ports := advertisedPorts{cm: map[netip.Addr]uint16{}}
	var ready, done sync.WaitGroup
	errs := make([]error, len(devs))
	oobErrs := make([]error, len(devs))
	for i, d := range devs {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			s := so
			once := sync.OnceFunc(ready.Done)
			defer once()
			s.Ready = func(a netip.AddrPort) {
				mu.Lock()
				bound = append(bound, a)
				ports.cm[d.LocalAddr().Addr()] = a.Port()
				mu.Unlock()
				fmt.Fprintf(log, "tbrdma serve: listening on %v port %d (rdma_cm, RDMA_PS_TCP)\n", a.Addr(), a.Port())
				once()
			}
			if errs[i] = rping.Serve(ctx, d, netip.AddrPortFrom(d.LocalAddr().Addr(), uint16(o.Port)), s); errs[i] != nil {
				errs[i] = fmt.Errorf("serve on %v port %d: %w", d.LocalAddr().Addr(), o.Port, errs[i])
				cancel() // one listener failing stops them all
			}
		}()
	}
	ready.Wait()
	if o.OOBPort != 0 && o.OOBPort != o.Port && ctx.Err() == nil {
		// perftest -R clients connect to rdma_cm port -p, the TCP
		// port's number: refuse them there at once, saying why.
		if stop, err := refuseRClients(ctx, devs, uint16(o.OOBPort), log); err != nil {
			fmt.Fprintf(log, "tbrdma serve: warning: -R perftest clients will see no listener: %v\n", err)
		} else {
			defer stop()
		}
	}
	if o.OOBPort != 0 && ctx.Err() == nil && o.bind.IsValid() {
		d := devs[0]
		a := d.LocalAddr().Addr()
		if ln, err := listenOOB(ctx, a, o.OOBPort); err != nil {
			oobErrs[0] = err
			cancel()
		} else {
			ports.oob = uint16(ln.Addr().(*net.TCPAddr).Port)
			fmt.Fprintf(log, "tbrdma serve: listening on %v port %d (TCP, pingpong and perftest clients)\n", a, ports.oob)
			s := &oobServer{dev: d, wait: waits[d], log: log, now: o.Now}
			done.Go(func() {
				if err := serveOOB(ctx, ln, func(net.Conn) (*oobServer, error) { return s, nil }, log); err != nil {
					oobErrs[0] = err
					cancel()
				}
			})
		}
	} else if o.OOBPort != 0 && ctx.Err() == nil {
		// Without --bind: one listener on every address, as the stock
		// servers; a client is served by the device on the address it
		// reached, and refused on any other (iface.go).
		if ln, err := listenOOB(ctx, netip.IPv4Unspecified(), o.OOBPort); err != nil {
			oobErrs[0] = err
			cancel()
		} else {
			servers := map[netip.Addr]*oobServer{}
			var names []string
			for _, d := range devs {
				a := d.LocalAddr().Addr().Unmap().WithZone("")
				servers[a] = &oobServer{dev: d, wait: waits[d], log: log, now: o.Now}
				names = append(names, a.String())
			}
			ports.oob = uint16(ln.Addr().(*net.TCPAddr).Port)
			fmt.Fprintf(log, "tbrdma serve: listening on %v port %d (TCP, pingpong and perftest clients of %s)\n",
				netip.IPv4Unspecified(), ports.oob, strings.Join(names, ", "))
			route := func(c net.Conn) (*oobServer, error) { return routeOOB(c, servers, o.AnyInterface) }
			done.Go(func() {
				if err := serveOOB(ctx, ln, route, log); err != nil {
					oobErrs[0] = err
					cancel()
				}
			})
		}
	}
	if !o.NoAdvertise && ctx.Err() == nil {
		defer o.advertise(ctx, devs, ports, log)()
	}
	if o.Ready != nil && len(bound) == len(devs) {
		o.Ready(bound)
	}
	done.Wait()
	return errors.Join(append(errs, oobErrs...)...)
}

// routeOOB picks the hosted-test server of a client that reached serve's
// all-address TCP listener: the one on the address it reached. A client on
// any other address is refused: on a non-Thunderbolt interface because
// serve answers Thunderbolt only (unless anyIface), else because no device
// serves that address.
func routeOOB(c net.Conn, servers map[netip.Addr]*oobServer, anyIface bool) (*oobServer, error) {
	local, peer := localAddr(c), remoteAddr(c)
	if s := servers[local]; s != nil {
		return s, nil
	}
	if !anyIface {
		if err := checkArrival("serve", local, peer); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("refused the connection from %v: it arrived at %v, an address serve does not serve (see its \"listening on\" lines); have the client use one of those", peer, local)
}

// serveSegments enables large segments on a served device, as large as its
// link carries (the largest there is for a device on no interface, as a
// dedicated server offers), for the clients that offer them; QPs that do
// not agree on them (every stock peer's) keep the path MTU. When the
// device cannot take them, serve says so and offers none.
func serveSegments(d *verbs.Context, log io.Writer) {
	n := verbs.SegmentSizeLimit
	dev := d.Device()
	if dev != nil && dev.LinkMTU > 0 {
		n = verbs.SegmentSizeForLink(dev.LinkMTU)
	}
	if n == 0 {
		return
	}
	if err := d.SetMaxSegmentSize(n); err != nil && dev != nil {
		fmt.Fprintf(log, "tbrdma serve: %v: no large segments for the clients that offer them: %v\n", d.LocalAddr().Addr(), err)
	}
}
