package cli

import (
	"context"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/discovery"
)

// peerCompletionBrowse bounds the mDNS browse of peer completion: the
// shell waits for it at every Tab.
const peerCompletionBrowse = time.Second

// completePeers returns the ValidArgsFunction of the commands whose
// argument is a peer (ping, pingpong, the perftest commands, cat, udaddy):
// the names and addresses of the --static peers on the command line (for a
// command that has --static), of the --static-file peers file (for one that
// has --static-file), and of the peers a short mDNS browse finds
// (f.BrowsePeers, at most peerCompletionBrowse; none when it is nil), each
// with the other as its description. Never file names. A bad --static or
// peers file, or a failed browse, only leaves their candidates out: a
// completion has no way to report an error.
func completePeers(f *Factory) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp // one peer only
		}
		return peerCandidates(c, f, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// completePeerFlag is completePeers for a flag whose value is a peer
// (udaddy -s).
func completePeerFlag(f *Factory) cobra.CompletionFunc {
	return func(c *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return peerCandidates(c, f, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

func peerCandidates(c *cobra.Command, f *Factory, toComplete string) []cobra.Completion {
	var peers []discovery.Peer
	if fl := c.Flags().Lookup("static"); fl != nil {
		if vals, err := c.Flags().GetStringArray("static"); err == nil {
			if ps, err := discovery.StaticPeers(vals...); err == nil {
				peers = append(peers, ps...)
			}
		}
	}
	if fl := c.Flags().Lookup("static-file"); fl != nil && fl.Value.String() != "" {
		if fh, err := os.Open(fl.Value.String()); err == nil {
			ps, err := discovery.ReadStaticPeers(fh)
			fh.Close()
			if err == nil {
				peers = append(peers, ps...)
			}
		}
	}
	if f.BrowsePeers != nil {
		ctx := c.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, peerCompletionBrowse)
		ps, err := f.BrowsePeers(ctx, &discovery.Options{Timeout: peerCompletionBrowse})
		cancel()
		if err == nil {
			peers = append(peers, ps...)
		}
	}
	return peerCompletions(peers, toComplete)
}

// peerCompletions lists, for each peer, its name (described by its first
// address) and each address (described by the name), keeping those that
// start with prefix, each once, in the order found.
func peerCompletions(peers []discovery.Peer, prefix string) []cobra.Completion {
	var out []cobra.Completion
	var seen []string
	add := func(word, desc string) {
		if word == "" || !strings.HasPrefix(strings.ToLower(word), strings.ToLower(prefix)) || slices.Contains(seen, word) {
			return
		}
		seen = append(seen, word)
		if desc == "" {
			out = append(out, word)
		} else {
			out = append(out, cobra.CompletionWithDesc(word, desc))
		}
	}
	for _, p := range peers {
		first := ""
		if len(p.Addrs) > 0 {
			first = p.Addrs[0].String()
		}
		add(p.Name, first)
		for _, a := range p.Addrs {
			add(a.String(), p.Name)
		}
	}
	return out
}
