package discovery

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseStaticPeer(t *testing.T) {
	tests := []struct {
		in, name, addr string
		port           uint16
		gid            string
	}{
		{"lab=198.18.0.2", "lab", "198.18.0.2", 4791, "::ffff:198.18.0.2"},
		{" lab.local = 198.18.0.2:5000 ", "lab", "198.18.0.2", 5000, "::ffff:198.18.0.2"},
		{"mac=fe80::1%thunderbolt0", "mac", "fe80::1%thunderbolt0", 4791, "fe80::1"},
		{"mac=[fe80::1%tb0]:4792", "mac", "fe80::1%tb0", 4792, "fe80::1"},
	}
	for _, tt := range tests {
		p, err := ParseStaticPeer(tt.in)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if p.Name != tt.name || p.Addrs[0] != netip.MustParseAddr(tt.addr) || p.Port != tt.port ||
			p.GID != netip.MustParseAddr(tt.gid) || !p.Static {
			t.Errorf("%q: got %+v", tt.in, p)
		}
	}
	for _, bad := range []string{"", "lab", "=198.18.0.2", "lab=", "lab=host.example", "lab=198.18.0.2:0", "lab=1.2.3.4:99999"} {
		if _, err := ParseStaticPeer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestStaticPeers(t *testing.T) {
	ps, err := StaticPeers("a=198.18.0.2,b=198.18.0.3", "c=198.18.0.4")
	if err != nil || len(ps) != 3 || ps[2].Name != "c" {
		t.Fatalf("%v %v", ps, err)
	}
	ps, err = ReadStaticPeers(strings.NewReader("# peers\na=198.18.0.2 b=198.18.0.3:5000\n\n  c=fe80::1%tb0 # link-local\n"))
	if err != nil || len(ps) != 3 || ps[1].Port != 5000 {
		t.Fatalf("%v %v", ps, err)
	}
	if _, err := ReadStaticPeers(strings.NewReader("a=198.18.0.2\nbroken\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error %v, want line 2", err)
	}
}

func TestResolveStatic(t *testing.T) {
	ps, _ := StaticPeers("lab=198.18.0.2")
	p, err := Resolve(t.Context(), "LAB.local", &Options{Static: ps, Interfaces: []string{"does-not-exist"}})
	if err != nil || p.Name != "lab" {
		t.Fatalf("%+v %v", p, err)
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{
		"lab": "lab", "lab.local": "lab", "lab.LOCAL.": "lab", "lab._tbrdma._udp.local.": "lab", ".local": ".local",
	} {
		if got := trimLocal(in); got != want {
			t.Errorf("trimLocal(%q) = %q, want %q", in, got, want)
		}
	}
	for _, label := range []string{"plain", "with.dot", `back\slash`, "space and (2)", "ünïcode"} {
		got, ok := instanceOf(instanceFQDN(label))
		if !ok || got != label {
			t.Errorf("instanceOf(instanceFQDN(%q)) = %q, %v", label, got, ok)
		}
	}
	if _, ok := instanceOf("x._other._udp.local."); ok {
		t.Error("foreign service accepted")
	}
	if got := renamed("lab", 2, false); got != "lab (2)" {
		t.Error(got)
	}
	if got := sanitizeHost("my_host.name"); got != "my-host-name" {
		t.Error(got)
	}
}

func TestNoInterface(t *testing.T) {
	saved := listThunderbolt
	defer func() { listThunderbolt = saved }()
	listThunderbolt = func() ([]string, error) { return nil, nil }
	if _, err := Browse(t.Context(), nil); err != ErrNoInterface {
		t.Errorf("Browse: %v, want ErrNoInterface", err)
	}
	ps, _ := StaticPeers("lab=198.18.0.2")
	if got, err := Browse(t.Context(), &Options{Static: ps}); err != nil || len(got) != 1 {
		t.Errorf("Browse with static peers only: %v, %v", got, err)
	}
	if _, err := Advertise(t.Context(), Service{}, nil); err != ErrNoInterface {
		t.Errorf("Advertise: %v, want ErrNoInterface", err)
	}
}

// TestWatchStatic: Watch reports static peers (Options.Static and
// StaticFile) as events, and follows the file: added, changed and
// removed entries; an invalid file keeps the previous list.
func TestWatchStatic(t *testing.T) {
	saved := listThunderbolt
	defer func() { listThunderbolt = saved }()
	listThunderbolt = func() ([]string, error) { return nil, nil } // static peers only

	file := filepath.Join(t.TempDir(), "peers")
	write := func(s string) {
		t.Helper()
		// Write a temporary file and rename it, as editors do, so the
		// watch never reads half a file.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("# lab peers\nlab-b=198.18.0.3\n")
	fixed, _ := StaticPeers("lab-a=198.18.0.2")
	if _, err := Watch(t.Context(), &Options{StaticFile: file + ".missing"}); err == nil {
		t.Error("Watch with a missing peers file: no error")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	events, err := Watch(ctx, &Options{Static: fixed, StaticFile: file, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	next := func(typ EventType, name string, port uint16) {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Type != typ || ev.Peer.Name != name || ev.Peer.Port != port || !ev.Peer.Static {
				t.Fatalf("event %v %+v, want %v %s port %d (static)", ev.Type, ev.Peer, typ, name, port)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %v event for %s", typ, name)
		}
	}
	next(Appeared, "lab-a", 4791)
	next(Appeared, "lab-b", 4791)

	write("lab-b=198.18.0.3:4792\nlab-c=198.18.0.4\n")
	next(Changed, "lab-b", 4792)
	next(Appeared, "lab-c", 4791)

	write("lab-b=not-an-address\n") // invalid: logged, list kept
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "static peers file invalid"); {
		if time.Now().After(deadline) {
			t.Fatalf("invalid file not reported; log:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	write("lab-b=198.18.0.3:4792\n")
	next(Left, "lab-c", 4791)

	cancel()
	for ev := range events {
		t.Errorf("event after cancel: %v", ev)
	}

	// Static peers only, no file: the watch reports them and lasts until
	// its context ends.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	if events, err = Watch(ctx, &Options{Static: fixed}); err != nil {
		t.Fatal(err)
	}
	next(Appeared, "lab-a", 4791)
	select {
	case ev, open := <-events:
		t.Fatalf("after the static peers: %v (open %v), want nothing until cancel", ev, open)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if _, open := <-events; open {
		t.Error("watch still open after cancel")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
