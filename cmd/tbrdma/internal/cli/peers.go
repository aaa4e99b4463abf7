package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/discovery"
)

type peersOptions struct {
	IO  *ui.IO
	Now func() time.Time
	// Browse is the one-shot browse (discovery.Browse).
	Browse func(context.Context, *discovery.Options) ([]discovery.Peer, error)
	// Watch is the continuous browse of --watch (discovery.Watch).
	Watch func(context.Context, *discovery.Options) (<-chan discovery.Event, error)
	// Logger receives discovery's debug messages (--debug).
	Logger *slog.Logger

	Watching bool
	Timeout  time.Duration
	Ifaces   []string
	Static   []string
	// StaticFile is a peers file (discovery.ReadStaticPeers format);
	// --watch re-reads it when it changes.
	StaticFile string
	JSON       bool

	static []discovery.Peer
}

func newCmdPeers(f *Factory, runF func(*peersOptions) error) *cobra.Command {
	opts := &peersOptions{IO: f.IO, Now: f.Now, Browse: discovery.Browse, Watch: discovery.Watch}
	cmd := &cobra.Command{
		Use:   "peers [--watch] [--timeout 1s] [--iface name] [--static name=addr ...] [--json]",
		Short: "List the tbrdma peers on the Thunderbolt link (mDNS browse of _tbrdma._udp)",
		Long: `Browse mDNS / DNS-SD for _tbrdma._udp on the Thunderbolt interfaces that are
up (or those named with --iface) for --timeout, then print one row per peer
and interface: instance name, host, addresses, RoCEv2 port, and the GID,
active IB MTU, capabilities and version of its TXT record. A peer is
advertised by "tbrdma serve" on the other machine.

--watch keeps browsing and prints one line per event, appeared, changed or
left (a peer that stops says goodbye and leaves within a second), until
Ctrl-C, which ends it with exit status 0.

--static name=address[:port] lists a peer by hand where multicast does not
work; static peers are printed after those mDNS found (and alone when there
is no Thunderbolt interface). --static-file reads them from a file of
name=address[:port] entries ("#" starts a comment); with --watch, edits to
the file show as peers appearing, changing and leaving. --json prints one
JSON object per peer (with --watch, per event), schemaVersion 1, raw values.`,
		Example: `  tbrdma peers
  tbrdma peers --watch
  tbrdma peers --iface en5 --timeout 3s --json
  tbrdma peers --static lab-mac=198.18.0.2,lab-pc=198.18.0.3
  tbrdma peers --watch --static-file ~/.config/tbrdma/peers`,
		Args: maxArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Logger = f.Logger
			if opts.Timeout <= 0 || opts.Timeout > time.Hour {
				return FlagErrorf("invalid --timeout %v: want a duration above 0 and at most 1h", opts.Timeout)
			}
			if opts.Watching && c.Flags().Changed("timeout") {
				return FlagErrorf("--timeout bounds a one-shot browse; --watch runs until Ctrl-C")
			}
			for _, n := range opts.Ifaces {
				if strings.TrimSpace(n) == "" {
					return FlagErrorf("invalid --iface %q: want an interface name", n)
				}
			}
			var err error
			if opts.static, err = discovery.StaticPeers(opts.Static...); err != nil {
				return FlagErrorf("invalid --static: %v", err)
			}
			if opts.StaticFile != "" {
				fh, err := os.Open(opts.StaticFile)
				if err != nil {
					return FlagErrorf("invalid --static-file: %v", err)
				}
				_, err = discovery.ReadStaticPeers(fh)
				fh.Close()
				if err != nil {
					return FlagErrorf("invalid --static-file %s: %v (want name=address[:port] entries, one or more per line)", opts.StaticFile, err)
				}
			}
			if runF != nil {
				return runF(opts)
			}
			return runPeers(c.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&opts.Watching, "watch", "w", false, "keep browsing and print peers appearing, changing and leaving until Ctrl-C")
	fl.VarP(newDurationFlag(&opts.Timeout, time.Second), "timeout", "t", "browse for `duration`: seconds or a duration such as 500ms (one-shot)")
	fl.StringSliceVar(&opts.Ifaces, "iface", nil, "browse on the interface `name` (repeatable; default: the Thunderbolt interfaces that are up)")
	fl.StringArrayVar(&opts.Static, "static", nil, "a peer listed by hand, `name=address[:port]` (repeatable, or comma-separated)")
	fl.StringVar(&opts.StaticFile, "static-file", "", "read static peers from `file` (name=address[:port] entries; --watch follows its changes)")
	fl.BoolVar(&opts.JSON, "json", false, "one JSON object per peer or event (schemaVersion 1)")
	// --peer, the spelling of discovery's messages and docs, is --static.
	fl.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "peer" {
			name = "static"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

func (o *peersOptions) discoveryOptions() *discovery.Options {
	return &discovery.Options{Interfaces: o.Ifaces, Logger: o.Logger, Timeout: o.Timeout, Static: o.static, StaticFile: o.StaticFile}
}

// noInterfaceError adds the CLI's way out to discovery.ErrNoInterface.
func noInterfaceError(err error) error {
	return fmt.Errorf("peers: %w\n  try: tbrdma peers --iface <interface> (any interface with multicast), "+
		"or tbrdma peers --static <name>=<address>", err)
}

func runPeers(ctx context.Context, o *peersOptions) error {
	if o.Watching {
		return watchPeers(ctx, o)
	}
	peers, err := o.Browse(ctx, o.discoveryOptions())
	if errors.Is(err, discovery.ErrNoInterface) {
		return noInterfaceError(err)
	}
	if err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	if o.JSON {
		enc := json.NewEncoder(o.IO.Out)
		for _, p := range peers {
			if err := enc.Encode(newPeerJSON(p)); err != nil {
				return err
			}
		}
	} else if len(peers) > 0 {
		writePeersTable(o.IO.Out, peers)
	}
	if ctx.Err() != nil {
		return errInterrupted
	}
	if len(peers) == 0 {
		fmt.Fprintf(o.IO.ErrOut, "tbrdma peers: no peer answered within %v (is `tbrdma serve` running on the other machine?)\n", o.Timeout)
	}
	return nil
}

func watchPeers(ctx context.Context, o *peersOptions) error {
	// discovery.Watch reports static peers as events of their own (and
	// watches only them when there is no Thunderbolt interface).
	ch, err := o.Watch(ctx, o.discoveryOptions())
	if errors.Is(err, discovery.ErrNoInterface) {
		return noInterfaceError(err)
	}
	if err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	for ev := range ch {
		if err := o.printEvent(ev); err != nil {
			return err
		}
	}
	return nil // the watch ends with its context: Ctrl-C is its normal end
}

func (o *peersOptions) printEvent(ev discovery.Event) error {
	now := o.Now()
	if o.JSON {
		return json.NewEncoder(o.IO.Out).Encode(peerEventJSON{
			SchemaVersion: 1, Event: ev.Type.String(), Time: now.Format(time.RFC3339Nano), peerJSON: newPeerJSON(ev.Peer)})
	}
	p := ev.Peer
	line := fmt.Sprintf("%s %-8s %s", now.Format("15:04:05"), ev.Type, p.Name)
	if p.Interface != "" {
		line += " on " + p.Interface
	} else if p.Static {
		line += " (static)"
	}
	if ev.Type != discovery.Left {
		line += fmt.Sprintf(": %s port %d", addrsString(p), p.Port)
		for _, kv := range [][2]string{{"host", p.Host}, {"gid", gidString(p)}, {"mtu", mtuString(p)},
			{"caps", p.TXT["caps"]}, {"ver", p.TXT["ver"]}} {
			if kv[1] != "" && kv[1] != "-" {
				line += ", " + kv[0] + " " + kv[1]
			}
		}
	}
	_, err := fmt.Fprintln(o.IO.Out, line)
	return err
}

func addrsString(p discovery.Peer) string {
	if len(p.Addrs) == 0 {
		return "-"
	}
	s := make([]string, len(p.Addrs))
	for i, a := range p.Addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func gidString(p discovery.Peer) string {
	if !p.GID.IsValid() {
		return "-"
	}
	return p.GID.String()
}

func mtuString(p discovery.Peer) string {
	if p.MTU() == 0 {
		return "-"
	}
	return strconv.Itoa(p.MTU())
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writePeersTable prints one row per peer, columns aligned.
func writePeersTable(w io.Writer, peers []discovery.Peer) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOST\tADDRESSES\tPORT\tGID\tMTU\tCAPS\tVERSION\tIFACE")
	for _, p := range peers {
		iface := p.Interface
		if p.Static {
			iface = "(static)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Name, dash(p.Host), addrsString(p), p.Port,
			gidString(p), mtuString(p), dash(p.TXT["caps"]), dash(p.TXT["ver"]), dash(iface))
	}
	tw.Flush()
}

// peerJSON is the --json object of one peer (schemaVersion 1). Raw values:
// the TXT record as received is in txt.
type peerJSON struct {
	SchemaVersion int               `json:"schemaVersion"`
	Name          string            `json:"name"`
	Host          string            `json:"host,omitempty"`
	Addrs         []string          `json:"addrs"`
	Port          uint16            `json:"port"`
	GID           string            `json:"gid,omitempty"`
	GUID          string            `json:"guid,omitempty"`
	MTUBytes      int               `json:"mtu_bytes,omitempty"`
	Device        string            `json:"dev,omitempty"`
	Caps          []string          `json:"caps,omitempty"`
	Version       string            `json:"version,omitempty"`
	OOBPort       uint16            `json:"oob_port,omitempty"`
	Interface     string            `json:"interface,omitempty"`
	Static        bool              `json:"static"`
	TXT           map[string]string `json:"txt"`
}

// peerEventJSON is the --watch --json object of one event: the peer's
// fields plus the event ("appeared", "changed", "left") and its RFC 3339
// time.
type peerEventJSON struct {
	SchemaVersion int    `json:"schemaVersion"`
	Event         string `json:"event"`
	Time          string `json:"time"`
	peerJSON
}

func newPeerJSON(p discovery.Peer) peerJSON {
	j := peerJSON{SchemaVersion: 1, Name: p.Name, Host: p.Host, Addrs: []string{}, Port: p.Port,
		GUID: p.TXT["guid"], MTUBytes: p.MTU(), Device: p.TXT["dev"], Caps: p.Caps(), Version: p.TXT["ver"],
		OOBPort: p.OOBPort(), Interface: p.Interface, Static: p.Static, TXT: p.TXT}
	for _, a := range p.Addrs {
		j.Addrs = append(j.Addrs, a.String())
	}
	if p.GID.IsValid() {
		j.GID = p.GID.String()
	}
	if j.TXT == nil {
		j.TXT = map[string]string{}
	}
	return j
}
