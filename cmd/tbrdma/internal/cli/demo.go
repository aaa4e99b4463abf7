package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
)

type demoOptions struct {
	IO      *ui.IO
	Factory *Factory
	AddrA   string
	AddrB   string
	Quick   bool
}

func newCmdDemo(f *Factory, runF func(*demoOptions) error) *cobra.Command {
	opts := &demoOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run both ends on this machine over loopback UDP: pingpong, write-bw, read-lat, atomic-lat",
		Long: `Run a server and a client of each test command in this process, on two
loopback addresses, with real UDP sockets and real RoCEv2 packets: the whole
stack working with no Thunderbolt link and no second machine.

Each step prints the client's output exactly as the command prints it, so
the numbers read like ibv_rc_pingpong's and perftest's.`,
		Example: "  tbrdma demo\n  tbrdma demo --quick",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			for _, s := range []string{opts.AddrA, opts.AddrB} {
				a, err := netip.ParseAddr(s)
				if err != nil || !a.IsLoopback() {
					return FlagErrorf("--addr-a/--addr-b must be loopback IP addresses, got %q", s)
				}
			}
			if opts.AddrA == opts.AddrB {
				return FlagErrorf("--addr-a and --addr-b must differ: each end owns UDP port 4791 on its address")
			}
			if runF != nil {
				return runF(opts)
			}
			return runDemo(c.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.AddrA, "addr-a", "127.0.0.1", "loopback `address` of the server end")
	cmd.Flags().StringVar(&opts.AddrB, "addr-b", "127.0.0.2", "loopback `address` of the client end")
	cmd.Flags().BoolVar(&opts.Quick, "quick", false, "fewer iterations (a few seconds in all)")
	return cmd
}

// demoStep is one server/client pairing.
type demoStep struct {
	title   string
	command string
	args    []string
}

func runDemo(ctx context.Context, o *demoOptions) error {
	n := func(full, quick int) string {
		if o.Quick {
			return strconv.Itoa(quick)
		}
		return strconv.Itoa(full)
	}
	steps := []demoStep{
		{"SEND/RECV ping-pong, 4 KiB messages (ibv_rc_pingpong)", "pingpong", []string{"-s", "4096", "-n", n(1000, 100)}},
		{"RDMA WRITE bandwidth, 64 KiB messages (ib_write_bw)", "write-bw", []string{"-s", "65536", "-n", n(5000, 500)}},
		{"RDMA READ latency, 64 B (ib_read_lat)", "read-lat", []string{"-s", "64", "-n", n(1000, 100)}},
		{"atomic fetch-and-add latency (ib_atomic_lat)", "atomic-lat", []string{"-n", n(1000, 100)}},
	}
	out := o.IO.Out
	styled, sty := o.IO.StyledOut(), o.IO.Styles() // plain text when not a terminal
	fmt.Fprintf(out, "tbrdma demo: two RDMA devices on this machine, %s and %s, each on UDP port 4791,\n", o.AddrA, o.AddrB)
	fmt.Fprintf(out, "talking RoCEv2 over loopback; every packet carries a real BTH and ICRC.\n")
	for i, s := range steps {
		fmt.Fprintf(styled, "\n%s\n$ tbrdma %s --bind %s %s   (server)\n$ tbrdma %s --bind %s %s %s   (client)\n",
			sty.Header.Render(fmt.Sprintf("== %d/%d %s", i+1, len(steps), s.title)), s.command, o.AddrA, join(s.args), s.command, o.AddrB, join(s.args), o.AddrA)
		if err := o.runStep(ctx, s); err != nil {
			return fmt.Errorf("demo step %q: %w", s.command, err)
		}
	}
	fmt.Fprintf(styled, "\n%s On two machines joined by a Thunderbolt cable, run the server\n", sty.OK.Render(fmt.Sprintf("All %d steps passed.", len(steps))))
	fmt.Fprintf(out, "command on one and the client command, with the other's address, on the other;\n")
	fmt.Fprintf(out, "either side may be a stock Linux rdma_rxe host running the tool named in each title.\n")
	return nil
}

func join(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	return b.String()
}

// runStep runs the server side in a goroutine with its output kept aside,
// and the client with its output on ours.
func (o *demoOptions) runStep(ctx context.Context, s demoStep) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var serverOut bytes.Buffer
	sf := &Factory{IO: &ui.IO{In: new(bytes.Buffer), Out: &serverOut, ErrOut: &serverOut}, Now: o.Factory.Now,
		OpenDevice: o.Factory.OpenDevice, Logger: o.Factory.Logger}
	cf := &Factory{IO: &ui.IO{In: new(bytes.Buffer), Out: o.IO.Out, ErrOut: io.Discard}, Now: o.Factory.Now,
		OpenDevice: o.Factory.OpenDevice, Logger: o.Factory.Logger}
	listening := make(chan int, 1)
	onListen := func(a net.Addr) { listening <- a.(*net.TCPAddr).Port }
	serr := make(chan error, 1)
	server := demoCommand(sf, s.command, func(p *pingpongOptions) error {
		p.Listening = onListen
		return runPingpong(ctx, p)
	}, func(p *perftestOptions) error {
		p.Listening = onListen
		return runPerftest(ctx, p)
	})
	server.SetArgs(append([]string{"--bind", o.AddrA, "-p", "0"}, s.args...))
	server.SetOut(io.Discard)
	server.SetErr(io.Discard)
	go func() { serr <- server.ExecuteContext(ctx) }()
	var port int
	select {
	case port = <-listening:
	case err := <-serr:
		return fmt.Errorf("server: %w\n%s", err, serverOut.String())
	case <-ctx.Done():
		return ctx.Err()
	}
	client := demoCommand(cf, s.command, func(p *pingpongOptions) error { return runPingpong(ctx, p) },
		func(p *perftestOptions) error { return runPerftest(ctx, p) })
	client.SetArgs(append(append([]string{"--bind", o.AddrB, "-p", strconv.Itoa(port)}, s.args...), o.AddrA))
	client.SetOut(io.Discard)
	client.SetErr(io.Discard)
	cerr := client.ExecuteContext(ctx)
	if cerr != nil {
		cancel()
	}
	if err := <-serr; err != nil && cerr == nil {
		return fmt.Errorf("server: %w\n%s", err, serverOut.String())
	}
	return cerr
}

// demoCommand builds one test command whose run function is replaced.
func demoCommand(f *Factory, name string, pp func(*pingpongOptions) error, pt func(*perftestOptions) error) *cobra.Command {
	switch name {
	case "pingpong":
		return newCmdPingpong(f, pp)
	case "write-bw":
		return newCmdWriteBW(f, pt)
	case "read-lat":
		return newCmdReadLat(f, pt)
	default:
		return newCmdAtomicLat(f, pt)
	}
}
