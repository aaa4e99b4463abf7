package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/jsonout"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/rping"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/discovery"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

type pingOptions struct {
	IO         *ui.IO
	Now        func() time.Time
	OpenDevice func(netip.Addr) (*verbs.Context, error)
	// Resolve turns the peer argument into an address.
	Resolve func(ctx context.Context, host string) (netip.Addr, error)
	// Source returns the local address the kernel routes to peer from (the
	// default for --bind).
	Source func(peer netip.Addr) (netip.Addr, error)

	Peer     string
	Count    int
	Interval float64 // seconds
	Size     int
	Timeout  float64 // seconds
	Port     int
	Bind     string
	JSON     bool
	Quiet    bool
	Deadline float64 // seconds, 0: none
	Numeric  bool
	// Static are --static peers, name=address[:port]: the peer argument
	// may name one of them.
	Static []string

	bind                        netip.Addr
	interval, timeout, deadline time.Duration
}

func newCmdPing(f *Factory, runF func(*pingOptions) error) *cobra.Command {
	opts := &pingOptions{IO: f.IO, Now: f.Now, Resolve: resolveHost, Source: routeSource}
	cmd := &cobra.Command{
		Use:   "ping [flags] <peer>",
		Short: "Ping a peer over RDMA with rping's protocol, printing like ping(8)",
		Long: `Connect through rdma_cm (RDMA_PS_TCP, port 7174) to a peer running "rping -s"
or "tbrdma serve" and run rping's iterations one at a time: the client
advertises its source buffer, the server RDMA READs it and says "go ahead",
the client advertises its sink, the server RDMA WRITEs the echo there and
says "go ahead" again, and the client checks the echo byte for byte. Each
iteration is timed from the first SEND to the second "go ahead" and printed
as ping(8) prints an echo reply; the summary on exit (count reached or
Ctrl-C) is ping(8)'s.

Iteration seq carries rping's pattern "rdma-ping-<seq-1>: ...", so a server
run with -v prints the same lines as for "rping -c". -s is rping's -S: both
ends should use the same size (the stock server reads at most its own).

-W bounds each wait: the connection's setup, and each of an iteration's two
"go ahead"s. rping's protocol cannot skip an iteration, so a reply that does
not come in time ends the run (ping(8) would go on). -w bounds the whole run,
as ping(8)'s deadline: ping stops then, however many replies came. -q prints
only the PING line and the summary (with --json, only the summary object).
-n is accepted for ping(8)'s habit: tbrdma prints addresses as numbers.

Exit status: 0 if any reply arrived (with -c and -w: if all count replies
arrived before the deadline), 1 otherwise (none arrived, or the peer refused
or never answered), 2 for bad usage.`,
		Example: `  tbrdma ping -c 5 198.18.0.2                 # peer running "rping -s -a 198.18.0.2"
  tbrdma ping --bind 198.18.0.1 -i 0.2 198.18.0.2
  tbrdma ping -q -w 5 -i 0.1 198.18.0.2        # only the summary, after 5 s`,
		ValidArgsFunction: completePeers(f),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return FlagErrorf("ping needs one peer address, got %d arguments", len(args))
			}
			opts.Peer = args[0]
			opts.OpenDevice = f.OpenDevice
			if err := opts.check(); err != nil {
				return err
			}
			if len(opts.Static) > 0 {
				static, err := discovery.StaticPeers(opts.Static...)
				if err != nil {
					return FlagErrorf("invalid --static: %v", err)
				}
				opts.Resolve = withStatic(static, opts.Resolve)
			}
			if runF != nil {
				return runF(opts)
			}
			return runPing(c.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&opts.Count, "count", "c", 0, "stop after `count` replies sent (0: until interrupted)")
	fl.VarP(newSecondsFlag(&opts.Interval, 1), "interval", "i", "wait `seconds` between the starts of iterations")
	fl.IntVarP(&opts.Size, "size", "s", rping.DefaultSize, fmt.Sprintf("ping buffer size in bytes (rping's -S, %d..%d)", rping.MinSize, rping.MaxSize))
	fl.VarP(newSecondsFlag(&opts.Timeout, 10), "timeout", "W", "wait at most `seconds` for the connection and for each reply")
	fl.IntVarP(&opts.Port, "port", "p", rping.DefaultPort, "rdma_cm `port` of the peer")
	fl.StringVar(&opts.Bind, "bind", "", "local IP `address` for RoCE (default: the kernel's source address for the peer)")
	fl.BoolVarP(&opts.Quiet, "quiet", "q", false, "print only the PING line and the summary, as ping(8) -q")
	fl.VarP(newSecondsFlag(&opts.Deadline, 0), "deadline", "w", "stop after `seconds` in all, however many replies came (0: no deadline), as ping(8) -w")
	fl.BoolVarP(&opts.Numeric, "numeric", "n", false, "numeric output (accepted for ping(8)'s habit: addresses are always printed as numbers)")
	fl.BoolVar(&opts.JSON, "json", false, "one JSON object per reply and a summary object (schemaVersion 1, raw units)")
	fl.StringArrayVar(&opts.Static, "static", nil, "a peer named by hand, `name=address[:port]`, where mDNS does not work (repeatable, or comma-separated)")
	return cmd
}

func (o *pingOptions) check() error {
	var err error
	if o.bind, err = parseBind(o.Bind); err != nil {
		return err
	}
	if o.Count < 0 {
		return FlagErrorf("invalid -c %d: want 0 (no limit) or more", o.Count)
	}
	if o.Interval < 0 || math.IsNaN(o.Interval) || o.Interval > 1e6 {
		return FlagErrorf("invalid -i %v: want seconds, 0 or more", o.Interval)
	}
	if o.Size < rping.MinSize || o.Size > rping.MaxSize {
		return FlagErrorf("invalid -s %d: want %d..%d (rping's -S)", o.Size, rping.MinSize, rping.MaxSize)
	}
	if !(o.Timeout > 0) || o.Timeout > 1e6 {
		return FlagErrorf("invalid -W %v: want seconds, more than 0", o.Timeout)
	}
	if o.Port < 1 || o.Port > 65535 {
		return FlagErrorf("invalid -p %d: want 1..65535", o.Port)
	}
	if o.Deadline < 0 || math.IsNaN(o.Deadline) || o.Deadline > 1e6 {
		return FlagErrorf("invalid -w %v: want seconds, 0 (no deadline) or more", o.Deadline)
	}
	o.deadline = time.Duration(o.Deadline * float64(time.Second))
	o.interval = time.Duration(o.Interval * float64(time.Second))
	o.timeout = time.Duration(o.Timeout * float64(time.Second))
	return nil
}

// routeSource returns the source address the kernel picks for peer (a
// connected UDP socket sends nothing).
func routeSource(peer netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, 4791)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", peer, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// pingStats are ping(8)'s counters, times in nanoseconds.
type pingStats struct {
	transmitted, received, errors int
	min, max, sum, sum2           float64
}

func (s *pingStats) add(rtt time.Duration) {
	x := float64(rtt.Truncate(time.Microsecond).Nanoseconds()) // as ping(8)'s lines

	if s.received == 0 || x < s.min {
		s.min = x
	}
	if x > s.max {
		s.max = x
	}
	s.received++
	s.sum += x
	s.sum2 += x * x
}

// print writes ping(8)'s summary: the packet line, and the rtt line when
// a reply arrived (mdev = sqrt(mean(x²) − mean(x)²)). Styles color it on a
// terminal; w strips them otherwise (ui.IO.StyledOut).
func (s *pingStats) print(w io.Writer, sty *ui.Styles, peer string, elapsed time.Duration) {
	fmt.Fprintf(w, "\n%s\n", sty.Header.Render(fmt.Sprintf("--- %s rdma ping statistics ---", peer)))
	fmt.Fprintf(w, "%d packets transmitted, %d received", s.transmitted, s.received)
	if s.errors > 0 {
		fmt.Fprintf(w, ", %s", sty.Bad.Render(fmt.Sprintf("+%d errors", s.errors)))
	}
	if s.transmitted > 0 {
		loss := sty.OK
		if s.received < s.transmitted {
			loss = sty.Bad
		}
		fmt.Fprintf(w, ", %s", loss.Render(fmt.Sprintf("%.6g%% packet loss", float64(s.transmitted-s.received)*100/float64(s.transmitted))))
	}
	fmt.Fprintf(w, ", time %dms\n", elapsed.Milliseconds())
	if s.received > 0 {
		avg, mdev := s.avgMdev()
		fmt.Fprintf(w, "rtt min/avg/max/mdev = %.3f/%.3f/%.3f/%.3f ms\n", s.min/1e6, avg/1e6, s.max/1e6, mdev/1e6)
	}
}

// avgMdev returns the mean and ping(8)'s mdev of the round trips, in ns.
func (s *pingStats) avgMdev() (avg, mdev float64) {
	n := float64(s.received)
	avg = s.sum / n
	return avg, math.Sqrt(max(s.sum2/n-avg*avg, 0))
}

// summary is the --json summary object.
func (s *pingStats) summary(peer string, addr netip.Addr, elapsed time.Duration) jsonout.PingSummaryV1 {
	j := jsonout.PingSummaryV1{SchemaVersion: 1, Type: "summary", Peer: peer, Transmitted: s.transmitted,
		Received: s.received, Errors: s.errors, TimeNs: elapsed.Nanoseconds()}
	if addr.IsValid() {
		j.Addr = addr.String()
	}
	if s.transmitted > 0 {
		j.LossRatio = float64(s.transmitted-s.received) / float64(s.transmitted)
	}
	if s.received > 0 {
		avg, mdev := s.avgMdev()
		j.RTT = &jsonout.PingRTTV1{MinNs: s.min, AvgNs: jsonout.Round(avg, 3), MaxNs: s.max, MdevNs: jsonout.Round(mdev, 3)}
	}
	return j
}

// pingTime formats a round trip as ping(8) does: three significant
// digits below 100 ms (0.052, 1.23, 12.3), whole milliseconds above.
func pingTime(rtt time.Duration) string {
	us := rtt.Microseconds()
	switch {
	case us >= 100000-50:
		return strconv.FormatInt((us+500)/1000, 10)
	case us >= 10000-5:
		return fmt.Sprintf("%d.%01d", (us+50)/1000, ((us+50)%1000)/100)
	case us >= 1000:
		return fmt.Sprintf("%d.%02d", (us+5)/1000, ((us+5)%1000)/10)
	}
	return fmt.Sprintf("%d.%03d", us/1000, us%1000)
}

func runPing(ctx context.Context, o *pingOptions) error {
	out, errOut := o.IO.Out, o.IO.ErrOut
	if o.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.deadline)
		defer cancel()
	}
	enc := json.NewEncoder(out)
	replies := out // the reply lines: none with -q
	if o.Quiet {
		replies = io.Discard
	}
	replyJSON := func(r jsonout.PingV1) {
		if !o.Quiet {
			enc.Encode(r)
		}
	}
	human := out // the PING line: with --json, on stderr when it is a terminal
	if o.JSON {
		human = io.Discard
		if o.IO.IsStderrTTY() {
			human = errOut
		}
	}
	var st pingStats
	summary := func(addr netip.Addr, elapsed time.Duration) {
		if o.JSON {
			enc.Encode(st.summary(o.Peer, addr, elapsed))
			return
		}
		st.print(o.IO.StyledOut(), o.IO.Styles(), o.Peer, elapsed)
	}
	addr, dev, err := openForPeer(ctx, "ping", o.Peer, o.bind, o.Resolve, o.Source, o.OpenDevice)
	if err != nil {
		return err
	}
	defer dev.Close()

	fmt.Fprintf(human, "PING %s (%s) %d bytes of data over RDMA (rdma_cm port %d).\n", o.Peer, addr, o.Size, o.Port)
	peer := netip.AddrPortFrom(addr, uint16(o.Port))
	cl, err := rping.Dial(ctx, dev, peer, o.Size, o.timeout)
	if err != nil {
		if ctx.Err() != nil {
			summary(addr, 0)
			return errSilent
		}
		return connectError(peer, dev.LocalAddr().Addr(), err)
	}
	start := o.Now()
	var end error
	for seq := 1; o.Count == 0 || seq <= o.Count; seq++ {
		t0 := o.Now()
		st.transmitted++
		rtt, err := cl.Ping(ctx, seq-1, o.timeout, o.Now)
		var mm *rping.MismatchError
		reply := jsonout.PingV1{SchemaVersion: 1, Type: "reply", Peer: o.Peer, Addr: addr.String(), Seq: seq, Bytes: o.Size, RTTNs: rtt.Nanoseconds()}
		switch {
		case err == nil && o.JSON:
			st.add(rtt)
			reply.OK = true
			replyJSON(reply)
		case err == nil:
			st.add(rtt)
			fmt.Fprintf(replies, "%d bytes from %s: seq=%d time=%s ms\n", o.Size, addr, seq, pingTime(rtt))
		case errors.As(err, &mm) && o.JSON:
			st.errors++
			reply.Mismatch = &jsonout.PingMismatchV1{Offset: mm.Offset, Want: mm.Want, Got: mm.Got}
			replyJSON(reply)
		case errors.As(err, &mm):
			st.errors++
			fmt.Fprintf(replies, "%d bytes from %s: seq=%d time=%s ms (BAD ECHO: byte #%d should be 0x%02x but was 0x%02x)\n",
				o.Size, addr, seq, pingTime(rtt), mm.Offset, mm.Want, mm.Got)
		default:
			end = err
		}
		if end != nil || o.Count != 0 && seq == o.Count {
			break
		}
		if d := o.interval - o.Now().Sub(t0); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				end = ctx.Err()
			}
			if end != nil {
				break
			}
		}
	}
	elapsed := o.Now().Sub(start)
	var te *rping.TimeoutError
	switch {
	case end == nil || ctx.Err() != nil:
	case errors.Is(end, rping.ErrDisconnected):
		fmt.Fprintf(errOut, "tbrdma: ping: %s disconnected\n", o.Peer)
	case errors.As(end, &te):
		fmt.Fprintf(errOut, "tbrdma: ping: no reply from %s to seq=%d within %v; stopping (rping's protocol cannot skip an iteration)\n", o.Peer, te.Seq+1, te.Timeout)
	default:
		fmt.Fprintf(errOut, "tbrdma: ping: %v\n", end)
	}
	cl.Close()
	summary(addr, elapsed)
	if st.received == 0 || o.deadline > 0 && o.Count > 0 && st.received < o.Count {
		return errSilent
	}
	return nil
}

// connectError explains a failed connection in terms of what to check.
func connectError(peer netip.AddrPort, local netip.Addr, err error) error {
	var ce *rping.ConnectError
	if !errors.As(err, &ce) {
		return fmt.Errorf("ping: connect to %v: %w", peer, err)
	}
	where := fmt.Sprintf("%v port %d", peer.Addr(), peer.Port())
	if errors.Is(err, rdmacm.ErrAuthFailed) {
		return fmt.Errorf("%s: %w", where, ce.Event.Err)
	}
	if r, ok := ce.RejectReason(); ok {
		if r == rdmacm.RejectInvalidServiceID {
			return fmt.Errorf("no rdma_cm listener on %s (rejected: %v) — is `rping -s` or `tbrdma serve` running there?", where, r)
		}
		return fmt.Errorf("%s rejected the connection: %v (REJ reason %d)", where, r, uint16(r))
	}
	if ce.Event == nil {
		return fmt.Errorf("no answer from %s within %v (from %v): is rdma_rxe or tbrdma running there, on UDP port 4791, with `rping -s` or `tbrdma serve`?", where, ce.Timeout, local)
	}
	if msg, ok := unreachableText(ce.Event.Err, "`tbrdma serve` (or `rping -s`)"); ok {
		return errors.New(msg)
	}
	if ce.Event.Type == rdmacm.EventUnreachable {
		return fmt.Errorf("%s is unreachable: no answer to the connection request (is rdma_rxe or tbrdma running there, on UDP port 4791?)", where)
	}
	return fmt.Errorf("connect to %s: %v", where, ce.Event)
}
