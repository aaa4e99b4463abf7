package cli

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/discovery"
)

// complete runs cobra's hidden __complete command as a shell's completion
// script does, with f.BrowsePeers answering browse, and returns the
// candidates (one per line, description after a tab) and the directive.
func complete(t *testing.T, browse func(context.Context, *discovery.Options) ([]discovery.Peer, error), args ...string) ([]string, cobra.ShellCompDirective) {
	t.Helper()
	f, out, errOut := testFactory()
	f.BrowsePeers = browse
	if code := run(context.Background(), f, append([]string{"__complete"}, args...)); code != ExitOK {
		t.Fatalf("__complete %q: exit %d\n%s%s", args, code, out, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, ":") {
		t.Fatalf("__complete %q: no directive line in %q", args, out)
	}
	var d int
	for _, c := range last[1:] {
		d = d*10 + int(c-'0')
	}
	return lines[:len(lines)-1], cobra.ShellCompDirective(d)
}

func TestCompletePeerArguments(t *testing.T) {
	mdnsPeer := discovery.Peer{Name: "lab-mac", Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("fe80::7%en5")}, Interface: "en5"}
	var browsed []*discovery.Options
	browse := func(ctx context.Context, o *discovery.Options) ([]discovery.Peer, error) {
		browsed = append(browsed, o)
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > peerCompletionBrowse {
			t.Errorf("browse context deadline %v (set %v), want at most %v from now", dl, ok, peerCompletionBrowse)
		}
		return []discovery.Peer{mdnsPeer}, nil
	}
	noBrowse := func(context.Context, *discovery.Options) ([]discovery.Peer, error) {
		return nil, discovery.ErrNoInterface
	}
	cases := []struct {
		name   string
		browse func(context.Context, *discovery.Options) ([]discovery.Peer, error)
		args   []string
		want   []string
	}{
		{"ping --static", noBrowse, []string{"ping", "--static", "lab=198.18.0.2", ""},
			[]string{"lab\t198.18.0.2", "198.18.0.2\tlab"}},
		{"ping --static and mDNS", browse, []string{"ping", "--static", "lab=198.18.0.2", ""},
			[]string{"lab\t198.18.0.2", "198.18.0.2\tlab", "lab-mac\t198.18.0.7", "198.18.0.7\tlab-mac", "fe80::7%en5\tlab-mac"}},
		{"prefix", browse, []string{"ping", "--static=lab=198.18.0.2,pc=198.18.0.3", "p"},
			[]string{"pc\t198.18.0.3"}},
		{"prefix of an address", browse, []string{"ping", "--static", "lab=198.18.0.2", "198.18.0."},
			[]string{"198.18.0.2\tlab", "198.18.0.7\tlab-mac"}},
		{"bad --static", noBrowse, []string{"ping", "--static", "lab", ""}, nil},
		{"write-bw", browse, []string{"write-bw", "-s", "65536", ""}, []string{"lab-mac\t198.18.0.7", "198.18.0.7\tlab-mac", "fe80::7%en5\tlab-mac"}},
		{"read-lat", browse, []string{"read-lat", "l"}, []string{"lab-mac\t198.18.0.7"}},
		{"pingpong --ud", browse, []string{"pingpong", "--ud", "lab"}, []string{"lab-mac\t198.18.0.7"}},
		{"cat", browse, []string{"cat", "1"}, []string{"198.18.0.7\tlab-mac"}},
		{"udaddy", browse, []string{"udaddy", "lab"}, []string{"lab-mac\t198.18.0.7"}},
		{"udaddy -s", browse, []string{"udaddy", "-s", "lab"}, []string{"lab-mac\t198.18.0.7"}},
		{"one peer only", browse, []string{"write-bw", "lab-mac", ""}, nil},
		{"no browse", nil, []string{"send-bw", ""}, nil},
		{"browse fails", noBrowse, []string{"send-lat", ""}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, dir := complete(t, tc.browse, tc.args...)
			if dir != cobra.ShellCompDirectiveNoFileComp {
				t.Errorf("directive %d, want ShellCompDirectiveNoFileComp (%d): peers, not file names", dir, cobra.ShellCompDirectiveNoFileComp)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("candidates\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	for _, o := range browsed {
		if o.Timeout <= 0 || o.Timeout > peerCompletionBrowse {
			t.Errorf("browse timeout %v, want above 0 and at most %v", o.Timeout, peerCompletionBrowse)
		}
	}
	if len(browsed) == 0 {
		t.Error("mDNS browse never called")
	}
}

// TestCompletePeersFile checks that the peers file of --static-file
// completes (peers has no peer argument; its completion helper is shared).
func TestCompletePeersFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "peers")
	if err := os.WriteFile(file, []byte("# lab\nbench=198.18.0.9 # the bench\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cobra.Command{Use: "x"}
	c.Flags().String("static-file", "", "")
	c.Flags().StringArray("static", nil, "")
	if err := c.ParseFlags([]string{"--static-file", file, "--static", "lab=198.18.0.2"}); err != nil {
		t.Fatal(err)
	}
	got, dir := completePeers(&Factory{})(c, nil, "")
	want := []string{"lab\t198.18.0.2", "198.18.0.2\tlab", "bench\t198.18.0.9", "198.18.0.9\tbench"}
	if !slices.Equal(got, want) || dir != cobra.ShellCompDirectiveNoFileComp {
		t.Fatalf("got %q directive %d, want %q and NoFileComp", got, dir, want)
	}
}
