package cli

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/verbs"
)

// withDevices replaces the device list -d names are looked up in.
func withDevices(t *testing.T, devs ...*verbs.Device) {
	t.Helper()
	old := listDevices
	listDevices = func() ([]*verbs.Device, error) { return devs, nil }
	t.Cleanup(func() { listDevices = old })
}

// fakeDevice is a device on netdev with the GID table of addrs.
func fakeDevice(netdev string, up bool, addrs ...string) *verbs.Device {
	d := &verbs.Device{Name: verbs.DeviceNamePrefix + netdev, Netdev: netdev, PortState: verbs.PortDown}
	if up {
		d.PortState = verbs.PortActive
	}
	for i, a := range addrs {
		ad := netip.MustParseAddr(a)
		d.GIDs = append(d.GIDs, verbs.GIDEntry{Index: i, GID: verbs.GID(ad.As16()), Addr: ad})
	}
	return d
}

// usageError runs args, which must be refused as bad usage, and returns
// what the user sees on stderr.
func usageError(t *testing.T, args ...string) string {
	t.Helper()
	f, _, errOut := testFactory()
	if code := run(context.Background(), f, args); code != ExitUsage {
		t.Fatalf("tbrdma %s: exit %d, want %d; stderr:\n%s", strings.Join(args, " "), code, ExitUsage, errOut)
	}
	return errOut.String()
}

// TestDeviceFlagNames: -d takes the names tbrdma devices prints (and the
// netdev), whose address becomes the local one, and refuses others with
// the list of devices.
func TestDeviceFlagNames(t *testing.T) {
	tb := fakeDevice("thunderbolt0", true, "198.18.42.1", "fe80::1")
	eth := fakeDevice("enp3s0", true, "198.18.42.9")
	down := fakeDevice("thunderbolt1", false, "198.18.42.17")
	withDevices(t, tb, eth, down)

	for _, name := range []string{"tb_thunderbolt0", "thunderbolt0"} {
		var got *perftestOptions
		cmd := newCmdPerftest(&Factory{IO: nil}, writeBWTest, func(o *perftestOptions) error { got = o; return nil })
		cmd.SetArgs([]string{"-d", name, "198.18.42.2"})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("-d %s: %v", name, err)
		}
		if want := netip.MustParseAddr("198.18.42.1"); got.bind != want {
			t.Errorf("-d %s: local address %v, want the device's %v", name, got.bind, want)
		}
	}
	var got *pingpongOptions
	cmd := newCmdPingpong(&Factory{}, func(o *pingpongOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"-d", "tb_thunderbolt0", "--bind", "198.18.42.3", "198.18.42.2"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.bind != netip.MustParseAddr("198.18.42.3") {
		t.Errorf("--bind with -d: local address %v, want --bind's", got.bind)
	}

	for _, c := range []struct {
		name string
		args []string
	}{
		{"nosuch0", []string{"write-bw", "-d", "nosuch0", "198.18.42.2"}},
		{"rxe0", []string{"pingpong", "-d", "rxe0", "198.18.42.2"}},
		{"mlx5_0", []string{"read-lat", "-R", "-d", "mlx5_0"}},
	} {
		msg := usageError(t, c.args...)
		for _, want := range []string{"unknown device -d " + c.name, "tb_thunderbolt0", "tb_enp3s0", "tb_thunderbolt1", "tbrdma devices"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", c.args, want, msg)
			}
		}
		if c.name == "rxe0" && !strings.Contains(msg, "rxe0 is a kernel RDMA device") {
			t.Errorf("%v: stderr does not say rxe0 is a kernel device:\n%s", c.args, msg)
		}
	}

	withDevices(t)
	if msg := usageError(t, "write-bw", "-d", "tb_thunderbolt0", "198.18.42.2"); !strings.Contains(msg, "there are no devices") {
		t.Errorf("no devices: stderr does not say so:\n%s", msg)
	}
}

// TestGIDIndexChecked: -x (and pingpong's -g) must be an index of the
// device's GID table; the error names the valid range.
func TestGIDIndexChecked(t *testing.T) {
	withDevices(t, fakeDevice("thunderbolt0", true, "198.18.42.1", "fe80::1"))
	for _, args := range [][]string{
		{"write-bw", "-d", "thunderbolt0", "-x", "3", "198.18.42.2"},
		{"read-lat", "-d", "tb_thunderbolt0", "-x", "2"},
		{"pingpong", "-d", "tb_thunderbolt0", "-g", "2", "198.18.42.2"},
	} {
		msg := usageError(t, args...)
		for _, want := range []string{"tb_thunderbolt0's GID table has 2 entries", "0 to 1"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, msg)
			}
		}
	}
	cmd := newCmdPerftest(&Factory{}, writeBWTest, func(*perftestOptions) error { return nil })
	cmd.SetArgs([]string{"-d", "tb_thunderbolt0", "-x", "1", "198.18.42.2"})
	if err := cmd.Execute(); err != nil {
		t.Errorf("-x 1 with a 2-entry table: %v", err)
	}
}

// TestGIDIndexCheckedOnOpen: without -d the GID table is the one of the
// device the local address opens; -x beyond it fails with the range.
func TestGIDIndexCheckedOnOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, _, errOut := testFactory()
	code := run(ctx, f, []string{"write-bw", "--bind", "127.0.0.1", "-p", "0", "-x", "99"})
	if code == ExitOK || !strings.Contains(errOut.String(), "invalid -x 99") || !strings.Contains(errOut.String(), "so the index is 0 to") {
		t.Errorf("exit %d; stderr lacks the GID range:\n%s", code, errOut)
	}
}

// TestRangeErrorsNameTheRange: a value out of range is refused with the
// range it must be in.
func TestRangeErrorsNameTheRange(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"write-bw", "-s", "2147483647", "x"}, fmt.Sprintf("invalid -s 2147483647: want 1..%d", verbs.MaxMessageSize/2)},
		{[]string{"read-lat", "-s", "0", "x"}, "want 1..1073741824"},
		{[]string{"write-lat", "-n", "2", "x"}, "invalid -n 2: want 5 or more"},
		{[]string{"send-bw", "-p", "70000", "x"}, "invalid -p 70000: want 1..65535"},
		{[]string{"send-bw", "-p", "0", "x"}, "invalid -p 0: want 1..65535"},
		{[]string{"write-bw", "-p", "-1"}, "or 0 for any free port"},
		{[]string{"write-bw", "-t", "0", "x"}, fmt.Sprintf("invalid -t 0: want 1..%d", verbs.MaxQPWR)},
		{[]string{"send-bw", "-r", "99999", "x"}, fmt.Sprintf("invalid -r 99999: want 1..%d", verbs.MaxQPWR)},
		{[]string{"write-bw", "-Q", "0", "x"}, "invalid -Q 0: want 1 or more"},
		{[]string{"read-lat", "-o", "0", "x"}, fmt.Sprintf("invalid -o 0: want 1..%d", verbs.MaxRdAtomic)},
		{[]string{"write-bw", "--qp-timeout", "32", "x"}, "want 0..31"},
		{[]string{"pingpong", "-s", "-1", "x"}, fmt.Sprintf("invalid -s -1: want 0..%d", verbs.MaxMessageSize)},
		{[]string{"pingpong", "-n", "0", "x"}, "invalid -n 0: want 1 or more"},
		{[]string{"pingpong", "-p", "65536", "x"}, "want 1..65535"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			if msg := usageError(t, c.args...); !strings.Contains(msg, c.want) {
				t.Errorf("stderr lacks %q:\n%s", c.want, msg)
			}
		})
	}
}

// TestConnectRefusedAtOnce: a client whose server is not listening fails
// at once (a refusal needs no timeout), naming the peer and what to do.
func TestConnectRefusedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	for _, cmd := range []string{"write-bw", "pingpong"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		f, _, errOut := testFactory()
		code := run(ctx, f, []string{cmd, "-p", fmt.Sprint(port), "127.0.0.1"})
		if ctx.Err() != nil {
			t.Fatalf("%s: still connecting at the test's deadline", cmd)
		}
		cancel()
		msg := errOut.String()
		if code == ExitOK || !strings.Contains(msg, fmt.Sprintf("127.0.0.1:%d", port)) || !strings.Contains(msg, "nothing listens on TCP port") {
			t.Errorf("%s: exit %d; stderr does not name the peer and the refusal:\n%s", cmd, code, msg)
		}
	}
}

// TestAddressInUseNamesHolder: a server whose port is taken says which
// process holds it (on Linux: this test's own) and what to do.
func TestAddressInUseNamesHolder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, cmd := range []string{"write-bw", "pingpong"} {
		f, _, errOut := testFactory()
		code := run(ctx, f, []string{cmd, "--bind", "127.0.0.1", "-p", fmt.Sprint(port)})
		msg := errOut.String()
		want := []string{fmt.Sprintf("holds TCP port %d", port), "-p 0"}
		if runtime.GOOS == "linux" {
			want = append(want, fmt.Sprintf("(pid %d)", os.Getpid()))
		}
		for _, w := range want {
			if code == ExitOK || !strings.Contains(msg, w) {
				t.Errorf("%s: exit %d; stderr lacks %q:\n%s", cmd, code, w, msg)
			}
		}
	}
}

// TestPortInUseHintOtherErrors: only "address in use" gets the hint.
func TestPortInUseHintOtherErrors(t *testing.T) {
	if h := portInUseHint(os.ErrPermission, netip.Addr{}, 1, "x"); h != "" {
		t.Errorf("hint for a permission error: %q", h)
	}
}

// TestPortDownRefused: a device whose port is down is refused when it
// opens, naming the interface and the next step; one that is up, or a
// context on an address no device lists, passes.
func TestPortDownRefused(t *testing.T) {
	addr := loopbackAddr()
	for _, up := range []bool{false, true} {
		d := fakeDevice("lo", up, addr.String())
		d.Interface.Loopback = true
		ctx, err := d.Open(&verbs.Options{Addr: addr})
		if err != nil {
			t.Fatal(err)
		}
		err = checkPortActive(ctx)
		ctx.Close()
		switch {
		case up && err != nil:
			t.Errorf("port up: %v", err)
		case !up && (err == nil || !strings.Contains(err.Error(), "tb_lo: port 1 is") || !strings.Contains(err.Error(), "ip link set lo up")):
			t.Errorf("port down: %v", err)
		}
	}
	ctx, err := verbs.NewContext(&verbs.Options{Addr: loopbackAddr(), ActiveMTU: verbs.MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if err := checkPortActive(ctx); err != nil {
		t.Errorf("a context without a listed device: %v", err)
	}
}

// TestConnectTimeoutStated: the help of the client commands states the
// connect bound they use.
func TestConnectTimeoutStated(t *testing.T) {
	for _, c := range []*cobra.Command{newCmdWriteBW(&Factory{}, nil), newCmdReadLat(&Factory{}, nil), newCmdPingpong(&Factory{}, nil)} {
		want := "gives up connecting after " + connectTimeout.String()
		if !strings.Contains(c.Long, want) || !strings.Contains(c.Flags().Lookup("timeout").Usage, want) {
			t.Errorf("%s: the help and --timeout do not say %q", c.Name(), want)
		}
	}
}
