package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/discovery"
)

var (
	peerMac = discovery.Peer{
		Name: "lab-mac", Host: "lab-mac-tbrdma.local", Port: 4791, Interface: "thunderbolt0",
		Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fe80::2%thunderbolt0")},
		GID:   netip.MustParseAddr("::ffff:198.18.0.2"),
		TXT: map[string]string{"txtvers": "1", "gid": "::ffff:198.18.0.2", "guid": "0002c9fffe000001", "mtu": "4096",
			"dev": "tb_thunderbolt0", "caps": "rc,ud,atomic", "ver": "0.1.0", "oob": "18515"},
	}
	peerStatic = mustStatic("lab-pc=198.18.0.3")
	fixedNow   = time.Date(2025, 3, 1, 12, 34, 56, 0, time.UTC)
)

func mustStatic(e string) discovery.Peer {
	p, err := discovery.ParseStaticPeer(e)
	if err != nil {
		panic(err)
	}
	return p
}

// runPeersWith runs "tbrdma peers args..." with fake Browse and Watch
// injected through the options, and returns the exit code and output.
func runPeersWith(t *testing.T, ctx context.Context, browse func(context.Context, *discovery.Options) ([]discovery.Peer, error),
	watch func(context.Context, *discovery.Options) (<-chan discovery.Event, error), args ...string) (int, string, string) {
	t.Helper()
	f, out, errOut := testFactory()
	f.Now = func() time.Time { return fixedNow }
	cmd := newCmdPeers(f, func(o *peersOptions) error {
		o.Browse, o.Watch = browse, watch
		return runPeers(ctx, o)
	})
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	if err != nil {
		errOut.WriteString("tbrdma: " + err.Error() + "\n")
	}
	return exitCode(err, ctx.Err() != nil), out.String(), errOut.String()
}

func fakeBrowse(t *testing.T, wantIfaces []string, wantTimeout time.Duration) func(context.Context, *discovery.Options) ([]discovery.Peer, error) {
	return func(_ context.Context, o *discovery.Options) ([]discovery.Peer, error) {
		if !slices.Equal(o.Interfaces, wantIfaces) || o.Timeout != wantTimeout {
			t.Errorf("browse options: interfaces %q timeout %v, want %q %v", o.Interfaces, o.Timeout, wantIfaces, wantTimeout)
		}
		return append([]discovery.Peer{peerMac}, o.Static...), nil
	}
}

func TestPeersTable(t *testing.T) {
	code, out, errOut := runPeersWith(t, context.Background(), fakeBrowse(t, []string{"thunderbolt0", "en5"}, 3*time.Second), nil,
		"--iface", "thunderbolt0,en5", "-t", "3s", "--static", "lab-pc=198.18.0.3")
	if code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	want := "" +
		"NAME     HOST                  ADDRESSES                        PORT  GID                MTU   CAPS          VERSION  IFACE\n" +
		"lab-mac  lab-mac-tbrdma.local  198.18.0.2,fe80::2%thunderbolt0  4791  ::ffff:198.18.0.2  4096  rc,ud,atomic  0.1.0    thunderbolt0\n" +
		"lab-pc   -                     198.18.0.3                       4791  ::ffff:198.18.0.3  -     -             -        (static)\n"
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
}

func TestPeersJSON(t *testing.T) {
	// --peer is --static, the spelling discovery's messages use.
	code, out, errOut := runPeersWith(t, context.Background(), fakeBrowse(t, nil, time.Second), nil, "--json", "--peer", "lab-pc=198.18.0.3")
	if code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d JSON rows, want 2:\n%s", len(lines), out)
	}
	want := `{"schemaVersion":1,"name":"lab-mac","host":"lab-mac-tbrdma.local","addrs":["198.18.0.2","fe80::2%thunderbolt0"],` +
		`"port":4791,"gid":"::ffff:198.18.0.2","guid":"0002c9fffe000001","mtu_bytes":4096,"dev":"tb_thunderbolt0",` +
		`"caps":["rc","ud","atomic"],"version":"0.1.0","oob_port":18515,"interface":"thunderbolt0","static":false,` +
		`"txt":{"caps":"rc,ud,atomic","dev":"tb_thunderbolt0","gid":"::ffff:198.18.0.2","guid":"0002c9fffe000001","mtu":"4096","oob":"18515","txtvers":"1","ver":"0.1.0"}}`
	if lines[0] != want {
		t.Errorf("row:\n%s\nwant:\n%s", lines[0], want)
	}
	var row peerJSON
	if err := json.Unmarshal([]byte(lines[1]), &row); err != nil {
		t.Fatal(err)
	}
	if row.SchemaVersion != 1 || row.Name != "lab-pc" || !row.Static || row.Port != 4791 || row.TXT == nil ||
		!slices.Equal(row.Addrs, []string{"198.18.0.3"}) || row.GID != "::ffff:198.18.0.3" {
		t.Errorf("static row %+v", row)
	}
}

func TestPeersNone(t *testing.T) {
	none := func(context.Context, *discovery.Options) ([]discovery.Peer, error) { return nil, nil }
	code, out, errOut := runPeersWith(t, context.Background(), none, nil)
	if code != ExitOK || out != "" || !strings.Contains(errOut, "no peer answered within 1s") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestPeersNoInterface(t *testing.T) {
	fail := func(context.Context, *discovery.Options) ([]discovery.Peer, error) {
		return nil, discovery.ErrNoInterface
	}
	failWatch := func(context.Context, *discovery.Options) (<-chan discovery.Event, error) {
		return nil, discovery.ErrNoInterface
	}
	for _, args := range [][]string{nil, {"--watch"}} {
		code, out, errOut := runPeersWith(t, context.Background(), fail, failWatch, args...)
		if code != ExitFailed || out != "" {
			t.Errorf("%q: exit %d, stdout %q", args, code, out)
		}
		for _, w := range []string{"no Thunderbolt network interface is up", "try: tbrdma peers --iface <interface>", "--static <name>=<address>"} {
			if !strings.Contains(errOut, w) {
				t.Errorf("%q: stderr lacks %q:\n%s", args, w, errOut)
			}
		}
	}
	other := func(context.Context, *discovery.Options) ([]discovery.Peer, error) { return nil, errors.New("boom") }
	if code, _, errOut := runPeersWith(t, context.Background(), other, nil); code != ExitFailed || !strings.Contains(errOut, "peers: boom") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// fakeWatch sends an Appeared event per static peer, then evs, then waits
// for ctx and closes the channel, as discovery.Watch does; cancel is called
// once all are sent (Ctrl-C).
func fakeWatch(t *testing.T, cancel func(), evs ...discovery.Event) func(context.Context, *discovery.Options) (<-chan discovery.Event, error) {
	return func(ctx context.Context, o *discovery.Options) (<-chan discovery.Event, error) {
		ch := make(chan discovery.Event)
		go func() {
			defer close(ch)
			for _, p := range o.Static {
				ch <- discovery.Event{Type: discovery.Appeared, Peer: p}
			}
			for _, ev := range evs {
				ch <- ev
			}
			cancel()
			<-ctx.Done()
		}()
		return ch, nil
	}
}

func TestPeersWatch(t *testing.T) {
	changed := peerMac
	changed.TXT = map[string]string{"mtu": "1024", "ver": "0.2.0"}
	evs := []discovery.Event{{Type: discovery.Appeared, Peer: peerMac}, {Type: discovery.Changed, Peer: changed}, {Type: discovery.Left, Peer: changed}}

	ctx, cancel := context.WithCancel(context.Background())
	code, out, errOut := runPeersWith(t, ctx, nil, fakeWatch(t, cancel, evs...), "--watch", "--static", "lab-pc=198.18.0.3")
	if code != ExitOK {
		t.Fatalf("exit %d after Ctrl-C, want 0:\n%s", code, errOut)
	}
	want := "" +
		"12:34:56 appeared lab-pc (static): 198.18.0.3 port 4791, gid ::ffff:198.18.0.3\n" +
		"12:34:56 appeared lab-mac on thunderbolt0: 198.18.0.2,fe80::2%thunderbolt0 port 4791, host lab-mac-tbrdma.local, gid ::ffff:198.18.0.2, mtu 4096, caps rc,ud,atomic, ver 0.1.0\n" +
		"12:34:56 changed  lab-mac on thunderbolt0: 198.18.0.2,fe80::2%thunderbolt0 port 4791, host lab-mac-tbrdma.local, gid ::ffff:198.18.0.2, mtu 1024, ver 0.2.0\n" +
		"12:34:56 left     lab-mac on thunderbolt0\n"
	if out != want {
		t.Errorf("watch:\n%s\nwant:\n%s", out, want)
	}

	ctx, cancel = context.WithCancel(context.Background())
	code, out, errOut = runPeersWith(t, ctx, nil, fakeWatch(t, cancel, evs...), "-w", "--json")
	if code != ExitOK {
		t.Fatalf("--json: exit %d:\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d JSON events, want 3:\n%s", len(lines), out)
	}
	for i, typ := range []string{"appeared", "changed", "left"} {
		var ev struct {
			SchemaVersion int    `json:"schemaVersion"`
			Event         string `json:"event"`
			Time          string `json:"time"`
			Name          string `json:"name"`
			MTU           int    `json:"mtu_bytes"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.SchemaVersion != 1 || ev.Event != typ || ev.Time != "2025-03-01T12:34:56Z" || ev.Name != "lab-mac" {
			t.Errorf("event %d: %s", i, lines[i])
		}
	}
	if !strings.HasPrefix(lines[0], `{"schemaVersion":1,"event":"appeared","time":`) {
		t.Errorf("event field order: %s", lines[0])
	}
}

func TestPeersUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"peers", "x"}, "too many arguments"},
		{[]string{"peers", "--timeout", "0"}, "invalid --timeout 0s"},
		{[]string{"peers", "--timeout", "2h"}, "invalid --timeout 2h0m0s"},
		{[]string{"peers", "--timeout", "soon"}, "invalid argument"},
		{[]string{"peers", "--watch", "--timeout", "2s"}, "--watch runs until Ctrl-C"},
		{[]string{"peers", "--static", "lab-mac"}, "invalid --static"},
		{[]string{"peers", "--static", "lab-mac=lab-mac.local"}, "is not an IP address"},
		{[]string{"peers", "--iface", "en5,"}, "invalid --iface"},
		{[]string{"peers", "--nope"}, "unknown flag: --nope"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f, out, errOut := testFactory()
			if code := run(context.Background(), f, c.args); code != ExitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, ExitUsage, errOut)
			}
			if !strings.Contains(errOut.String(), c.want) || !strings.Contains(errOut.String(), "Usage:") || out.Len() != 0 {
				t.Errorf("stderr lacks %q and usage (stdout %q):\n%s", c.want, out, errOut)
			}
		})
	}
}

// TestPeersWatchStaticOnly runs the real discovery.Watch with a static
// peer (and, on most machines, no Thunderbolt interface): the static peer
// appears, and Ctrl-C ends the watch.
func TestPeersWatchStaticOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(500*time.Millisecond, cancel)
	code, out, errOut := runPeersWith(t, ctx, nil, discovery.Watch, "--watch", "--static", "lab-pc=198.18.0.3")
	if code != ExitOK || !strings.Contains(out, "appeared lab-pc (static)") {
		t.Errorf("exit %d, stdout %q, stderr %q: want the static peer to appear", code, out, errOut)
	}
}
