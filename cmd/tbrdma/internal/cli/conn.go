package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// parseBind reads --bind (-d, the stock tools' device flag, is
// resolveDeviceFlag's). The zero Addr means "not given".
func parseBind(bind string) (netip.Addr, error) {
	if bind != "" {
		a, err := netip.ParseAddr(bind)
		if err != nil {
			return netip.Addr{}, FlagErrorf("invalid --bind %q: want a local IP address", bind)
		}
		return a.Unmap(), nil
	}
	return netip.Addr{}, nil
}

// exchangeKeepAlive bounds how long a TCP exchange waits on a peer that
// went away without closing (cable pulled, machine asleep, namespace
// deleted): after 5 s without traffic the kernel probes the peer every 2 s
// and fails the connection after 3 unanswered probes, about 11 s in all.
// Without it a side blocked reading waits for ever, as the stock tools do.
// A live peer answers the probes however long it takes to reply.
var exchangeKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}

// exchangeStallBound is how long after a peer goes silent exchangeKeepAlive
// fails the connection.
const exchangeStallBound = 5*time.Second + 3*2*time.Second

// connectTimeout bounds a client's connection to its server: the TCP
// exchange's connect (an unreachable peer otherwise takes the kernel's two
// minutes of SYN retries) and, with -R, the rdma_cm connection of the
// exchange (REQ retries otherwise take over a minute). A refusal or an
// ICMP error ends the attempt at once. The --timeout help states it.
const connectTimeout = 10 * time.Second

// connectTimeoutHelp is what --timeout's help says of connectTimeout.
var connectTimeoutHelp = fmt.Sprintf("; a client gives up connecting after %v in any case", connectTimeout)

// exchangeTimeoutHint explains a TCP exchange that exchangeKeepAlive
// ended: "" for any other error.
func exchangeTimeoutHint(err error) string {
	var op *net.OpError
	if !errors.As(err, &op) || !errors.Is(err, syscall.ETIMEDOUT) || op.Addr == nil {
		return ""
	}
	peer := op.Addr.String()
	if a, ok := op.Addr.(*net.TCPAddr); ok {
		peer = a.IP.String()
	}
	return fmt.Sprintf(" (peer %s stopped answering: no reply to TCP keepalive probes for %v; it was stopped or asleep, or the link went down: check that it runs and that the link is up, then start again)", peer, exchangeStallBound)
}

// listenOne listens on bind:port (all addresses when bind is not set),
// accepts one connection and closes the listener, as the stock tools do.
// ready, if not nil, is called once the listener is up.
func listenOne(ctx context.Context, bind netip.Addr, port int, ready func(net.Addr)) (net.Conn, error) {
	return listenUntil(ctx, bind, port, ready, nil)
}

// listenUntil is listenOne that keeps accepting until admit (nil: any
// connection) takes one; the connections it refuses are closed.
func listenUntil(ctx context.Context, bind netip.Addr, port int, ready func(net.Addr), admit func(net.Conn) bool) (net.Conn, error) {
	host := ""
	if bind.IsValid() {
		host = bind.String()
	}
	lc := net.ListenConfig{KeepAliveConfig: exchangeKeepAlive}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		if hint := portInUseHint(err, bind, port, "stop it, or use -p 0 (any free port, printed on stderr) or another -p"); hint != "" {
			return nil, fmt.Errorf("couldn't listen to port %d: %w: %s", port, err, hint)
		}
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	defer ln.Close()
	if ready != nil {
		ready(ln.Addr())
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("accept on port %d: %w", port, err)
		}
		if admit == nil || admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// dial connects to peer:port, from bind when it is set. peer is an
// address or a name, resolved as resolveHost does (so a name "tbrdma peers"
// lists works).
func dial(ctx context.Context, peer string, bind netip.Addr, port int) (net.Conn, error) {
	d := net.Dialer{KeepAliveConfig: exchangeKeepAlive, Timeout: connectTimeout}
	if bind.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(bind, 0))
	}
	addr, err := resolveHost(ctx, peer)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("couldn't resolve %s: %w", peer, err)
	}
	c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		to := netip.AddrPortFrom(addr, uint16(port))
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			// Not wrapped: the bound is ours, not the caller's deadline
			// (a net timeout error is also context.DeadlineExceeded).
			return nil, fmt.Errorf("couldn't connect to %s: no answer within %v (%s is down or off the link, or a firewall drops TCP port %d: check that it runs and is reachable, e.g. with ping)", to, connectTimeout, peer, port)
		}
		return nil, fmt.Errorf("couldn't connect to %s: %w%s", to, err, dialHint(peer, port, err))
	}
	return c, nil
}

// dialHint says what a failed connection to peer:port means and what to
// do: "" when the cause is not one it knows.
func dialHint(peer string, port int, err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf(" (%s answered that nothing listens on TCP port %d: start the server there first, with the same command and no peer, or tbrdma serve; or check -p)", peer, port)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTDOWN):
		return fmt.Sprintf(" (no route to %s, or no reply on the link to its address: check the address and that the link is up, e.g. with tbrdma devices)", peer)
	}
	return ""
}

// localAddr is the IP address of our end of c: the address the peer
// reached us at, and so the one our RoCE device must use.
func localAddr(c net.Conn) netip.Addr {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// remoteAddr is the IP address of the peer's end of c.
func remoteAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// closeOnCancel closes c when ctx ends, so blocked reads return; call the
// returned func to stop watching.
func closeOnCancel(ctx context.Context, c net.Conn) func() bool {
	return context.AfterFunc(ctx, func() { c.Close() })
}

// checkPort validates -p: 1..65535, or 0 for a server (any free port; the
// tests use it).
func checkPort(port int, peer string) error {
	if port < 0 || port > 65535 || (port == 0 && peer != "") {
		if peer != "" {
			return FlagErrorf("invalid -p %d: want 1..65535 (the port the server listens on)", port)
		}
		return FlagErrorf("invalid -p %d: want 1..65535, or 0 for any free port (printed on stderr)", port)
	}
	return nil
}

// openServingDevices opens a device on bind, or, when bind is unset, one on
// every local address from addrs, skipping (with a line on log) those that
// cannot be opened. cmd names the command in messages. The caller closes
// the devices, also on error.
func openServingDevices(cmd string, bind netip.Addr, addrs func() ([]netip.Addr, error),
	open func(netip.Addr) (*verbs.Context, error), log io.Writer) ([]*verbs.Context, error) {
	list := []netip.Addr{bind}
	if !bind.IsValid() {
		var err error
		if list, err = addrs(); err != nil {
			return nil, fmt.Errorf("%s: list local addresses: %w", cmd, err)
		}
	}
	var devs []*verbs.Context
	for _, a := range list {
		d, err := open(a)
		if err != nil {
			if bind.IsValid() {
				return devs, err
			}
			fmt.Fprintf(log, "tbrdma %s: skipping %v: %v\n", cmd, a, err)
			continue
		}
		devs = append(devs, d)
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("%s: no local address to listen on: give one with --bind", cmd)
	}
	return devs, nil
}

func closeDevices(devs []*verbs.Context) {
	for _, d := range devs {
		d.Close()
	}
}

// openForPeer resolves peer, picks the local address (bind, or else the
// source the kernel routes to the peer from) and opens the device there.
// cmd names the command in messages.
func openForPeer(ctx context.Context, cmd, peer string, bind netip.Addr,
	resolve func(context.Context, string) (netip.Addr, error), source func(netip.Addr) (netip.Addr, error),
	open func(netip.Addr) (*verbs.Context, error)) (netip.Addr, *verbs.Context, error) {
	addr, err := resolve(ctx, peer)
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("%s: %s: %w", cmd, peer, err)
	}
	local := bind
	if !local.IsValid() {
		if local, err = source(addr); err != nil {
			return netip.Addr{}, nil, fmt.Errorf("%s: %s: %w (use --bind)", cmd, peer, err)
		}
	}
	dev, err := open(local)
	if err != nil {
		return netip.Addr{}, nil, err
	}
	return addr, dev, nil
}
