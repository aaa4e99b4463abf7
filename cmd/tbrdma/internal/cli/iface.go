package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/tbrdma/tbrdma/transport/netif"
)

// Which interfaces a server answers on (docs/reliability.md, "Thunderbolt
// interfaces only"). A server the user gave no --bind picks its addresses
// itself: by default only those of Thunderbolt interfaces (netif kinds
// thunderbolt and thunderbolt-bridge), so that a laptop running "tbrdma
// serve" does not answer on its LAN or Wi-Fi. --bind (the user chose) and
// --any-interface widen it. A TCP-exchange server (pingpong, the perftest
// family, serve's hosted tests) listens on every address, as the stock tools
// do, and refuses a connection whose local address is on another interface,
// saying so on its stderr. Loopback connections are accepted: they come from
// this machine.

// anyInterfaceFlag names the flag that lifts the Thunderbolt-only default.
const anyInterfaceFlag = "any-interface"

// addAnyInterfaceFlag adds --any-interface to a command with a server side.
func addAnyInterfaceFlag(fl *pflag.FlagSet, p *bool) {
	fl.BoolVar(p, anyInterfaceFlag, false, "without --bind, also answer on interfaces that are not Thunderbolt (LAN, Wi-Fi; default: Thunderbolt only)")
}

// listInterfaces lists the host's interfaces (tests replace it).
var listInterfaces = netif.List

// isThunderboltKind reports whether an interface kind is a Thunderbolt link.
func isThunderboltKind(kind string) bool {
	return kind == netif.KindThunderbolt || kind == netif.KindThunderboltBridge
}

// servingAddrs returns the IPv4 addresses a server without --bind serves
// on: those of the up Thunderbolt interfaces, or with anyIface those of every
// up, non-loopback interface. None is an error saying what to do.
func servingAddrs(anyIface bool) ([]netip.Addr, error) {
	ifs, err := listInterfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []netip.Addr
	var others []string
	for _, ifc := range ifs {
		if !ifc.Up || ifc.Loopback {
			continue
		}
		var v4 []netip.Addr
		for _, p := range ifc.Addrs {
			if a := p.Addr().Unmap(); a.Is4() && !a.IsLoopback() {
				v4 = append(v4, a)
			}
		}
		switch {
		case len(v4) == 0:
		case anyIface || ifc.Thunderbolt || isThunderboltKind(ifc.Kind):
			out = append(out, v4...)
		default:
			others = append(others, fmt.Sprintf("%s %v", ifc.Name, v4[0]))
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if anyIface {
		return nil, fmt.Errorf("no network interface is up with an IPv4 address: bring one up, or give a local address with --bind")
	}
	also := ""
	if len(others) > 0 {
		also = " (other interfaces: " + strings.Join(others, ", ") + ")"
	}
	return nil, fmt.Errorf("no Thunderbolt interface is up with an IPv4 address%s: connect the cable and bring the link up (docs/tutorial.md), "+
		"or give the local address to serve on with --bind, or serve on every interface with --%s", also, anyInterfaceFlag)
}

// servingAddrsFunc returns the Addrs function of a command whose
// --any-interface flag is *anyIface, read when the command runs.
func servingAddrsFunc(anyIface *bool) func() ([]netip.Addr, error) {
	return func() ([]netip.Addr, error) { return servingAddrs(*anyIface) }
}

// interfaceOf returns the up interface that has the address a.
func interfaceOf(a netip.Addr) (netif.Interface, bool) {
	ifs, err := listInterfaces()
	if err != nil {
		return netif.Interface{}, false
	}
	a = a.Unmap().WithZone("")
	for _, ifc := range ifs {
		for _, p := range ifc.Addrs {
			if p.Addr().Unmap().WithZone("") == a {
				return ifc, true
			}
		}
	}
	return netif.Interface{}, false
}

// checkArrival decides whether a server without --bind and without
// --any-interface may answer a TCP connection that reached it at the local
// address local from peer: yes on a Thunderbolt interface or loopback; the
// error says why not and what to do. cmd names the command.
func checkArrival(cmd string, local, peer netip.Addr) error {
	if local.IsLoopback() {
		return nil
	}
	ifc, ok := interfaceOf(local)
	if ok && (ifc.Loopback || ifc.Thunderbolt || isThunderboltKind(ifc.Kind)) {
		return nil
	}
	where := "an address no interface lists"
	if ok {
		where = fmt.Sprintf("%s (%s, not a Thunderbolt interface)", ifc.Name, ifc.Kind)
	}
	return fmt.Errorf("refused the connection from %v: it arrived at %v on %s; tbrdma answers on Thunderbolt interfaces only: "+
		"have the client use this machine's Thunderbolt address, or run \"tbrdma %s\" with --bind %v or --%s", peer, local, where, cmd, local, anyInterfaceFlag)
}

// listenOneAllowed is listenOne for a TCP-exchange server: with bind set
// or anyIface it is listenOne; otherwise it accepts until a connection
// arrives on an interface checkArrival allows, closing (and reporting on
// log) the others. With port 0 (any free port) and no ready to learn it
// (the demo and tests have one), it says on log which port the kernel
// picked: the user needs it for the client's -p.
func listenOneAllowed(ctx context.Context, cmd string, bind netip.Addr, anyIface bool, port int, ready func(net.Addr), log io.Writer) (net.Conn, error) {
	if port == 0 && ready == nil {
		ready = announcePort(cmd, "TCP", log)
	}
	if bind.IsValid() || anyIface {
		return listenOne(ctx, bind, port, ready)
	}
	return listenUntil(ctx, netip.Addr{}, port, ready, func(c net.Conn) bool {
		if err := checkArrival(cmd, localAddr(c), remoteAddr(c)); err != nil {
			fmt.Fprintf(log, "tbrdma %s: %v; still waiting for a client\n", cmd, err)
			return false
		}
		return true
	})
}

// refusedHint explains an exchange that the server ended before answering:
// a tbrdma server refuses connections that arrive on an interface that is
// not Thunderbolt.
const refusedHint = "the server closed the connection without answering (a tbrdma server refuses clients that do not reach it on a Thunderbolt interface: see its log; use its Thunderbolt address, or run it with --any-interface)"

// explainClosed adds refusedHint to a client's exchange error when the
// server closed or reset the connection before answering.
func explainClosed(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %s", err, refusedHint)
	}
	return err
}

// announcePort returns a ready func that prints the listener's address
// and port on log ("tbrdma write-bw: listening on 0.0.0.0 port 40121
// (TCP)"), for a server started with -p 0. kind names the port space.
func announcePort(cmd, kind string, log io.Writer) func(net.Addr) {
	return func(a net.Addr) {
		if ta, ok := a.(*net.TCPAddr); ok {
			fmt.Fprintf(log, "tbrdma %s: listening on %v port %d (%s)\n", cmd, ta.AddrPort().Addr().Unmap(), ta.Port, kind)
		}
	}
}
