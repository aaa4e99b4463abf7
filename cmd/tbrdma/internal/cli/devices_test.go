package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/tbrdma/tbrdma/transport/netif"
	"github.com/tbrdma/tbrdma/verbs"
)

func fakeDevices(*verbs.DeviceListOptions) ([]*verbs.Device, error) {
	tb := netif.Interface{Name: "thunderbolt0", Index: 7, MTU: 65520, Up: true, Thunderbolt: true, Kind: "thunderbolt",
		HardwareAddr: net.HardwareAddr{0x02, 0x66, 0x04, 0x12, 0x34, 0x56}, Speed: 40e9,
		Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")}}
	a := netip.MustParseAddr("198.18.0.1")
	return []*verbs.Device{{
		Name: "tb_thunderbolt0", Netdev: "thunderbolt0", Thunderbolt: true, NodeGUID: 0x026604fffe123456,
		GIDs:    []verbs.GIDEntry{{Index: 0, GID: verbs.GID(netip.AddrFrom16(a.As16()).As16()), Type: verbs.GIDTypeRoCEv2, Addr: a}},
		LinkMTU: 65520, ActiveMTU: verbs.MTU4096, MaxMTU: verbs.MTU4096, PortState: verbs.PortActive, Interface: tb,
	}}, nil
}

func TestDevicesOutputs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"devices"}, []string{
			"    device          \t   node GUID    \tnetdev      \tstate \tmtu      \tGID[0]\n",
			"    tb_thunderbolt0 \t026604fffe123456\tthunderbolt0*\tACTIVE\t4096/4096\t::ffff:198.18.0.1\n",
			"    rxe0            \t(kernel device) \t",
			"* Thunderbolt link",
		}},
		{[]string{"devices", "-v"}, []string{
			"hca_id:\ttb_thunderbolt0\n", "\tnode_guid:\t\t\t0266:04ff:fe12:3456\n",
			"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "\t\t\tactive_mtu:\t\t4096 (5)\n",
			"\t\t\tGID[  0]:\t\t::ffff:198.18.0.1, RoCE v2\n", "hca_id:\trxe0\t(kernel RDMA device",
			"netdev:\t\t\t\tthunderbolt0 (Thunderbolt, link MTU 65520, 40 Gb/s)",
		}},
	} {
		f, out, _ := testFactory()
		o := &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return []string{"rxe0"} }, Verbose: len(c.args) > 1}
		if err := runDevices(o); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

func TestDevicesJSON(t *testing.T) {
	f, out, _ := testFactory()
	o := &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return []string{"rxe0"} }, JSON: true}
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d JSON rows, want 2:\n%s", len(lines), out)
	}
	var row deviceJSON
	if err := json.Unmarshal([]byte(lines[0]), &row); err != nil {
		t.Fatal(err)
	}
	if row.SchemaVersion != 1 || row.Name != "tb_thunderbolt0" || !row.Thunderbolt || row.ActiveMTUBytes != 4096 ||
		row.LinkSpeedBps != 40e9 || len(row.GIDs) != 1 || row.GIDs[0].Addr != "198.18.0.1" {
		t.Fatalf("row %+v", row)
	}
	if !strings.Contains(lines[1], `"kind":"kernel"`) {
		t.Fatalf("kernel row %s", lines[1])
	}
}

// fakeLive is what two tbrdma processes publish: serve with a context on
// the fake device, write-bw with one opened on its address alone, and a
// third process on another device.
func fakeLive() ([]liveFile, error) {
	serve := verbs.Counters{PacketsIn: 12, Retransmits: 3}
	serve.NAKsSent[verbs.NAKRemAccess] = 2
	serve.Drops[verbs.DropICRC] = 5
	return []liveFile{
		{SchemaVersion: 1, PID: 100, Command: "serve", Contexts: []liveContext{{Device: "tb_thunderbolt0", Addr: "198.18.0.1", Counters: counterMap(serve)}}},
		{SchemaVersion: 1, PID: 200, Command: "write-bw", Contexts: []liveContext{{Addr: "198.18.0.1", Counters: counterMap(verbs.Counters{PacketsIn: 30})}}},
		{SchemaVersion: 1, PID: 300, Command: "cat", Contexts: []liveContext{{Device: "tb_eth1", Addr: "198.19.0.1", Counters: counterMap(verbs.Counters{PacketsIn: 1000})}}},
	}, nil
}

// TestDevicesCounters: -v and --json show each device's live counters
// summed over the processes that have it open, which ones, or why there
// are none.
func TestDevicesCounters(t *testing.T) {
	f, out, _ := testFactory()
	o := &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return nil }, Live: fakeLive, Verbose: true}
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"\tcounters (live, 2 processes: PID 100 (serve), 200 (write-bw)):\n", "\t\tpackets_in:             42\n",
		"\t\tretransmits:            3\n", "\t\tnaks_sent_rem_access:   2\n", "\t\tdrop_icrc:              5\n"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("-v output lacks %q:\n%s", w, out)
		}
	}
	f, out, _ = testFactory()
	o = &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return nil }, Live: fakeLive, JSON: true}
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	var row deviceJSON
	if err := json.Unmarshal(out.Bytes(), &row); err != nil {
		t.Fatal(err)
	}
	if row.Counters["packets_in"] != 42 || row.Counters["drop_icrc"] != 5 || row.Counters["naks_sent_rem_access"] != 2 ||
		row.CountersError != "" || len(row.Counters) != len((&verbs.Counters{}).Fields()) ||
		row.Processes == nil || *row.Processes != 2 || !slices.Equal(row.PIDs, []int{100, 200}) {
		t.Errorf("JSON counters %v processes %v pids %v (error %q)", row.Counters, row.Processes, row.PIDs, row.CountersError)
	}

	// No process: none, and no counters in JSON.
	none := func() ([]liveFile, error) { return nil, nil }
	f, out, _ = testFactory()
	o = &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return nil }, Live: none, Verbose: true}
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\tcounters:\t\t\tnone (no tbrdma process has the device open)\n") {
		t.Errorf("-v output without processes:\n%s", out)
	}
	f, out, _ = testFactory()
	o = &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return nil }, Live: none, JSON: true}
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	row = deviceJSON{}
	if err := json.Unmarshal(out.Bytes(), &row); err != nil {
		t.Fatal(err)
	}
	if row.Counters != nil || row.Processes == nil || *row.Processes != 0 || row.PIDs != nil {
		t.Errorf("JSON without processes: %s", out)
	}

	f, out, _ = testFactory()
	o = &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return nil }, Verbose: true,
		Live: func() ([]liveFile, error) { return nil, errors.New("permission denied") }}
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\tcounters:\t\t\tunavailable: permission denied\n") {
		t.Errorf("-v output lacks the reason counters are unavailable:\n%s", out)
	}
}

func TestDevicesLive(t *testing.T) {
	f, out, _ := testFactory()
	if code := run(context.Background(), f, []string{"devices", "--all"}); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "tb_lo") {
		t.Errorf("--all does not list loopback:\n%s", out)
	}
	if code := run(context.Background(), f, []string{"devices", "extra"}); code != ExitUsage {
		t.Fatalf("extra argument: exit %d, want %d", code, ExitUsage)
	}
}

// TestDevicesColor checks that a terminal gets the same table in color, and
// that a pipe or --no-color gets it plain.
func TestDevicesColor(t *testing.T) {
	table := func(tty, noColor bool) string {
		f, out, _ := testFactory()
		f.IO.SetStdoutTTY(tty)
		f.IO.SetNoColor(noColor)
		o := &devicesOptions{IO: f.IO, List: fakeDevices, Kernel: func() []string { return []string{"rxe0"} }}
		if err := runDevices(o); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	plain, color, noColor := table(false, false), table(true, false), table(true, true)
	if strings.Contains(plain, "\x1b") || noColor != plain {
		t.Errorf("pipe / --no-color output is styled:\n%q\n%q", plain, noColor)
	}
	if !strings.Contains(color, "\x1b[") || ansi.Strip(color) != plain {
		t.Errorf("terminal output %q, want %q in color", color, plain)
	}
}

func TestNoColorFlag(t *testing.T) {
	f, _, _ := testFactory()
	f.IO.SetStdoutTTY(true)
	if code := run(context.Background(), f, []string{"--no-color", "version"}); code != ExitOK || f.IO.ColorEnabled() {
		t.Fatalf("exit %d, color %v after --no-color", code, f.IO.ColorEnabled())
	}
}
