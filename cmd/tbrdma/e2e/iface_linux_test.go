package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Addresses of the second link, eth1: a LAN that is not Thunderbolt.
const (
	lanA = "198.18.9.1"
	lanB = "198.18.9.2"
)

// addLAN joins l's namespaces by a second veth pair named eth1 on both
// sides (netif classifies it as virtual, not Thunderbolt).
func (l *link) addLAN(t *testing.T) {
	t.Helper()
	id := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	vA, vB := "tbl"+id+"a", "tbl"+id+"b"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("link", "add", vA, "type", "veth", "peer", "name", vB)
	t.Cleanup(func() { exec.Command("ip", "link", "del", vA).Run() })
	for _, s := range []struct{ ns, veth, addr string }{{l.nsA, vA, lanA}, {l.nsB, vB, lanB}} {
		ip("link", "set", s.veth, "netns", s.ns)
		ip("-n", s.ns, "link", "set", s.veth, "name", "eth1")
		ip("-n", s.ns, "link", "set", "eth1", "up")
		ip("-n", s.ns, "addr", "add", s.addr+"/29", "dev", "eth1")
	}
}

// deviceRow is the part of a "devices --json" row the tests read.
type deviceRow struct {
	Name      string            `json:"name"`
	Counters  map[string]uint64 `json:"counters"`
	Processes *int              `json:"processes"`
	PIDs      []int             `json:"pids"`
}

// devicesJSON runs "devices -v --json" in ns and returns the row of dev.
func (l *link) devicesJSON(t *testing.T, ns, dev string) deviceRow {
	t.Helper()
	r := l.run(t, ns, 30*time.Second, "devices", "-v", "--json")
	if r.code != 0 {
		t.Fatalf("devices -v --json: %v", r)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var row deviceRow
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("devices --json line %q: %v", line, err)
		}
		if row.Name == dev {
			return row
		}
	}
	t.Fatalf("devices --json lists no %s:\n%s", dev, r.stdout)
	return deviceRow{}
}

// TestThunderboltOnly: by default a server answers only on Thunderbolt
// interfaces. B has thunderbolt0 (198.18.7.2) and a LAN eth1 (198.18.9.2):
// serve answers A on the first and refuses it on the second, keeping on
// serving; --any-interface answers both; a standalone pingpong server
// refuses and waits on; with the Thunderbolt link down, serve says what to
// do. Meanwhile "devices -v --json" shows serve's live counters, growing
// with traffic and gone when serve exits.
func TestThunderboltOnly(t *testing.T) {
	l := newLink(t)
	l.addLAN(t)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir()) // the counter files of this test's processes only

	progress("thunderbolt-only: serve in B without --bind")
	serve := l.start(t, l.nsB, "", "serve", "--no-advertise")
	serve.waitLine(t, "listening on "+l.addrB+" port 7174", 10*time.Second)
	serve.waitLine(t, "port 18515 (TCP", 10*time.Second)
	if s := serve.errText(); strings.Contains(s, lanB) {
		t.Errorf("serve listens on the LAN address %s:\n%s", lanB, s)
	}

	pingpong := func(peer string) result {
		return l.run(t, l.nsA, 30*time.Second, "pingpong", "-n", "20", "-s", "64", "-c", peer)
	}
	if r := pingpong(l.addrB); r.code != 0 {
		t.Fatalf("pingpong to serve's Thunderbolt address: %v\nserve:\n%s", r, serve.errText())
	}

	progress("thunderbolt-only: counters of serve in devices -v --json")
	// serve rewrites its counter file about every second: poll.
	row := l.devicesJSON(t, l.nsB, "tb_thunderbolt0")
	for end := time.Now().Add(15 * time.Second); row.Counters["packets_in"] == 0 && time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
		row = l.devicesJSON(t, l.nsB, "tb_thunderbolt0")
	}
	if row.Processes == nil || *row.Processes != 1 || len(row.PIDs) != 1 || row.Counters["packets_in"] == 0 {
		t.Fatalf("devices --json after a pingpong against serve: processes %v pids %v counters %v; want serve's, packets_in > 0",
			row.Processes, row.PIDs, row.Counters)
	}
	first := row.Counters["packets_in"]
	if r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "5", "-i", "0.05", l.addrB); r.code != 0 {
		t.Fatalf("ping serve: %v", r)
	}
	deadline := time.Now().Add(15 * time.Second)
	for row.Counters["packets_in"] <= first {
		if time.Now().After(deadline) {
			t.Fatalf("serve's packets_in stayed %d after 5 pings", first)
		}
		time.Sleep(500 * time.Millisecond)
		row = l.devicesJSON(t, l.nsB, "tb_thunderbolt0")
	}
	t.Logf("serve's packets_in: %d, then %d", first, row.Counters["packets_in"])
	if lan := l.devicesJSON(t, l.nsB, "tb_eth1"); lan.Processes == nil || *lan.Processes != 0 || lan.Counters != nil {
		t.Errorf("tb_eth1, which serve does not use: processes %v counters %v", lan.Processes, lan.Counters)
	}

	progress("thunderbolt-only: a client on the LAN address is refused")
	r := pingpong(lanB)
	if r.code != 1 || !strings.Contains(r.stderr, "without answering") || !strings.Contains(r.stderr, "Thunderbolt") {
		t.Errorf("pingpong to serve's LAN address: want exit 1 and a message about Thunderbolt: %v", r)
	}
	t.Logf("the client says: %s", strings.TrimSpace(r.stderr))
	t.Logf("serve says: %s", serve.waitLine(t, "refused the connection from "+lanA, 10*time.Second))
	if s := serve.errText(); !strings.Contains(s, "eth1") || !strings.Contains(s, "--any-interface") {
		t.Errorf("serve's refusal does not name the interface and the way out:\n%s", s)
	}
	if r := l.run(t, l.nsA, 30*time.Second, "write-bw", "-n", "20", lanB); r.code != 1 {
		t.Errorf("write-bw to serve's LAN address: want exit 1: %v", r)
	}
	if r := pingpong(l.addrB); r.code != 0 {
		t.Fatalf("pingpong to serve after the refusals: %v\nserve:\n%s", r, serve.errText())
	}

	serve.cmd.Process.Signal(syscall.SIGTERM)
	if code := serve.wait(t, 15*time.Second); code != 0 {
		t.Errorf("serve after SIGTERM: exit %d:\n%s", code, serve.errText())
	}
	if row := l.devicesJSON(t, l.nsB, "tb_thunderbolt0"); row.Processes == nil || *row.Processes != 0 || row.Counters != nil {
		t.Errorf("devices --json after serve exited: processes %v pids %v counters %v; want none", row.Processes, row.PIDs, row.Counters)
	}

	progress("thunderbolt-only: serve --any-interface answers both")
	serve = l.start(t, l.nsB, "", "serve", "--no-advertise", "--any-interface")
	serve.waitLine(t, "port 18515 (TCP", 10*time.Second)
	for _, peer := range []string{l.addrB, lanB} {
		if r := pingpong(peer); r.code != 0 {
			t.Errorf("pingpong to %s, serve --any-interface: %v\nserve:\n%s", peer, r, serve.errText())
		}
	}
	if r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "2", "-i", "0.05", lanB); r.code != 0 {
		t.Errorf("ping %s, serve --any-interface: %v", lanB, r)
	}
	serve.cmd.Process.Signal(syscall.SIGTERM)
	serve.wait(t, 15*time.Second)

	progress("thunderbolt-only: a standalone pingpong server refuses the LAN and waits on")
	srv := l.start(t, l.nsB, "", "pingpong", "-n", "20", "-s", "64", "-c")
	l.waitListenTCP(t, l.nsB, 18515, srv)
	if r := pingpong(lanB); r.code != 1 {
		t.Errorf("pingpong client via the LAN: want exit 1: %v", r)
	}
	srv.waitLine(t, "refused the connection from "+lanA, 10*time.Second)
	if r := pingpong(l.addrB); r.code != 0 {
		t.Errorf("pingpong client via Thunderbolt after a refusal: %v\nserver:\n%s", r, srv.errText())
	}
	if code := srv.wait(t, 15*time.Second); code != 0 {
		t.Errorf("pingpong server: exit %d:\n%s", code, srv.errText())
	}

	progress("thunderbolt-only: no Thunderbolt link up")
	if out, err := exec.Command("ip", "-n", l.nsB, "link", "set", "thunderbolt0", "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set thunderbolt0 down: %v: %s", err, out)
	}
	r = l.run(t, l.nsB, 30*time.Second, "serve", "--no-advertise")
	t.Logf("serve without a Thunderbolt link says: %s", strings.TrimSpace(r.stderr))
	for _, w := range []string{"no Thunderbolt interface is up", "eth1 " + lanB, "docs/tutorial.md", "--bind", "--any-interface"} {
		if r.code != 1 || !strings.Contains(r.stderr, w) {
			t.Errorf("serve without a Thunderbolt link: want exit 1 and %q: %v", w, r)
		}
	}
	// --bind still serves the LAN: the user chose it.
	serve = l.start(t, l.nsB, "", "serve", "--no-advertise", "--bind", lanB)
	serve.waitLine(t, "listening on "+lanB+" port 18515", 10*time.Second)
	if r := pingpong(lanB); r.code != 0 {
		t.Errorf("pingpong to serve --bind %s: %v", lanB, r)
	}
	serve.cmd.Process.Signal(syscall.SIGTERM)
	serve.wait(t, 15*time.Second)
}
