package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/discovery"
	"github.com/tbrdma/tbrdma/verbs"
)

// fakeAdvertiser records what serve advertises.
type fakeAdvertiser struct {
	mu      sync.Mutex
	calls   int
	service discovery.Service
	opts    discovery.Options
	closed  int
	err     error
}

func (f *fakeAdvertiser) Advertise(_ context.Context, s discovery.Service, o *discovery.Options) (advertiser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.service, f.opts = s, *o
	if f.err != nil {
		return nil, f.err
	}
	return f, nil
}

func (f *fakeAdvertiser) Name() string { return "lab-a" }
func (f *fakeAdvertiser) Host() string { return "lab-a-tbrdma.local" }
func (f *fakeAdvertiser) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

// serveAdvertising runs "tbrdma serve --bind addr -p 0 args..." with the
// device list and Advertise replaced, stops it once it listens, and
// returns its stderr.
func serveAdvertising(t *testing.T, fa *fakeAdvertiser, thunderbolt bool, args ...string) string {
	t.Helper()
	addr := rdmaAddr(t)
	f, _, _ := testFactory()
	errOut := newLockedBuffer("\x00")
	f.IO.ErrOut = errOut
	// A context made by NewContext has no device: serve looks it up.
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) {
		return verbs.NewContext(&verbs.Options{Addr: a, ActiveMTU: verbs.MTU1024})
	}
	devices := func(*verbs.DeviceListOptions) ([]*verbs.Device, error) {
		return []*verbs.Device{{Name: "tb_fake0", Netdev: "fake0", Thunderbolt: thunderbolt, NodeGUID: 0x026604fffe123456,
			GIDs: []verbs.GIDEntry{{GID: verbs.GID(netip.AddrFrom16(addr.As16()).As16()), Addr: addr}}}}, nil
	}
	var opts *serveOptions
	cmd := newCmdServe(f, func(o *serveOptions) error { opts = o; return nil })
	cmd.SetArgs(append([]string{"--bind", addr.String(), "-p", "0"}, args...))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	opts.Advertise, opts.Devices = fa.Advertise, devices
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	opts.Ready = func([]netip.AddrPort) { close(ready) }
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, opts) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve ended: %v\n%s", err, errOut)
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not listen:\n%s", errOut)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, errOut)
	}
	return errOut.String()
}

func TestServeAdvertises(t *testing.T) {
	fa := &fakeAdvertiser{}
	errOut := serveAdvertising(t, fa, true)
	if fa.calls != 1 || fa.closed != 1 {
		t.Fatalf("%d advertisements, %d closed; want 1, 1:\n%s", fa.calls, fa.closed, errOut)
	}
	s := fa.service
	if s.Port != 4791 || !s.GID.Is4In6() || s.GUID != "026604fffe123456" || s.MTU != 1024 || s.Device != "tb_fake0" ||
		!slices.Equal(s.Caps, serveCaps) || s.Version == "" || s.Name != "" {
		t.Errorf("service %+v", s)
	}
	// -p 0: the rdma_cm port the kernel picked is advertised (TXT "cm"),
	// and the TCP port of the hosted tests (TXT "oob").
	if s.CMPort == 0 || !strings.Contains(errOut, fmt.Sprintf(" port %d (rdma_cm, RDMA_PS_TCP)", s.CMPort)) || s.OOBPort != 18515 {
		t.Errorf("advertised cm port %d, oob port %d; want the listening ports (oob 18515):\n%s", s.CMPort, s.OOBPort, errOut)
	}
	if !slices.Equal(fa.opts.Interfaces, []string{"fake0"}) {
		t.Errorf("interfaces %q, want fake0", fa.opts.Interfaces)
	}
	for _, w := range []string{`tbrdma serve: advertising "lab-a" (_tbrdma._udp, host lab-a-tbrdma.local) on mDNS on fake0` + "\n",
		"tbrdma serve: said goodbye on mDNS\n"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
}

func TestServeAdvertiseIface(t *testing.T) {
	fa := &fakeAdvertiser{}
	errOut := serveAdvertising(t, fa, false, "--iface", "fake0")
	if fa.calls != 1 || fa.closed != 1 || !slices.Equal(fa.opts.Interfaces, []string{"fake0"}) {
		t.Fatalf("%d advertisements on %q, %d closed:\n%s", fa.calls, fa.opts.Interfaces, fa.closed, errOut)
	}
	fa = &fakeAdvertiser{}
	errOut = serveAdvertising(t, fa, true, "--iface", "other0")
	if fa.calls != 0 || !strings.Contains(errOut, "warning: not advertising on mDNS: none of the served addresses") {
		t.Fatalf("%d advertisements:\n%s", fa.calls, errOut)
	}
}

func TestServeNoAdvertise(t *testing.T) {
	fa := &fakeAdvertiser{}
	errOut := serveAdvertising(t, fa, true, "--no-advertise")
	if fa.calls != 0 || strings.Contains(errOut, "mDNS") {
		t.Fatalf("%d advertisements with --no-advertise:\n%s", fa.calls, errOut)
	}
}

// Advertising is best effort: without a Thunderbolt interface, or when
// Advertise fails, serve warns and serves.
func TestServeAdvertiseWarns(t *testing.T) {
	fa := &fakeAdvertiser{}
	errOut := serveAdvertising(t, fa, false)
	if fa.calls != 0 || !strings.Contains(errOut, "tbrdma serve: warning: not advertising on mDNS: "+discovery.ErrNoInterface.Error()) {
		t.Fatalf("%d advertisements:\n%s", fa.calls, errOut)
	}
	fa = &fakeAdvertiser{err: errors.New("mdns: boom")}
	errOut = serveAdvertising(t, fa, true)
	if fa.calls != 1 || fa.closed != 0 || !strings.Contains(errOut, "warning: not advertising on mDNS: fake0: mdns: boom") ||
		strings.Contains(errOut, "goodbye") {
		t.Fatalf("%d advertisements, %d closed:\n%s", fa.calls, fa.closed, errOut)
	}
}

func TestServeAdvertiseUsage(t *testing.T) {
	f, _, errOut := testFactory()
	if code := run(context.Background(), f, []string{"serve", "--no-advertise=maybe"}); code != ExitUsage {
		t.Errorf("exit %d, want %d:\n%s", code, ExitUsage, errOut)
	}
}
