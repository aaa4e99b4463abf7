package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestTwoMachines runs tbrdma as a user would on two machines joined by a
// Thunderbolt cable: B serves, A discovers it, pings it by name and by
// address, runs pingpong and every perftest command against B, streams a
// file through cat, and B goes away in the ways it can (SIGTERM, killed).
func TestTwoMachines(t *testing.T) {
	needNetns(t)
	needHostname(t)
	l := newLink(t)
	start := time.Now()
	step := func(s string) { progress("%5.1fs %s", time.Since(start).Seconds(), s) }

	step("devices in A")
	t.Run("devices", func(t *testing.T) {
		r := l.run(t, l.nsA, 10*time.Second, "devices")
		if r.code != 0 {
			t.Fatalf("devices: %v", r)
		}
		if !regexp.MustCompile(`(?m)^\s+tb_thunderbolt0\s.*thunderbolt0\*\s.*ACTIVE.*::ffff:198\.18\.7\.1$`).MatchString(r.stdout) ||
			!strings.Contains(r.stdout, "* Thunderbolt link") {
			t.Errorf("devices does not list thunderbolt0 as an active Thunderbolt device with GID ::ffff:%s:\n%v", l.addrA, r)
		}
		r = l.run(t, l.nsA, 10*time.Second, "devices", "--json")
		var d struct {
			SchemaVersion int    `json:"schemaVersion"`
			Netdev        string `json:"netdev"`
			Thunderbolt   bool   `json:"thunderbolt"`
			State         string `json:"state"`
			LinkMTU       int    `json:"link_mtu_bytes"`
			ActiveMTU     int    `json:"active_mtu_bytes"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || r.code != 0 {
			t.Fatalf("devices --json: %v (%v)", r, err)
		}
		if d.SchemaVersion != 1 || d.Netdev != "thunderbolt0" || !d.Thunderbolt || d.State != "ACTIVE" || d.LinkMTU != 65520 || d.ActiveMTU != 4096 {
			t.Errorf("devices --json: %+v", d)
		}
	})

	// B: a machine with its own host name, serving on its only address.
	host := "e2e-" + l.nsB[len("tbe2e-"):len("tbe2e-")+6]
	step("serve in B as " + host)
	serve := l.start(t, l.nsB, host, "serve")
	serve.waitLine(t, "listening on "+l.addrB+" port 7174", 10*time.Second)
	adv := serve.waitLine(t, "advertising", 10*time.Second)
	m := regexp.MustCompile(`advertising "([^"]+)"`).FindStringSubmatch(adv)
	if m == nil {
		t.Fatalf("serve: %q does not name what it advertises", adv)
	}
	name := m[1]
	if name != host {
		t.Errorf("serve advertises %q, want the host name %q", name, host)
	}

	step("peers in A")
	t.Run("peers", func(t *testing.T) {
		r := l.run(t, l.nsA, 15*time.Second, "peers", "--timeout", "3s")
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+\S+\s+198\.18\.7\.2[,\s].*\s4791\s+::ffff:198\.18\.7\.2\s+4096\s+rc,uc,ud,atomic,srq,cm\s.*thunderbolt0$`)
		if r.code != 0 || !row.MatchString(r.stdout) || !strings.HasPrefix(r.stdout, "NAME ") {
			t.Fatalf("peers does not list %s at %s:\n%v", name, l.addrB, r)
		}
		r = l.run(t, l.nsA, 15*time.Second, "peers", "--timeout", "3s", "--json")
		var p struct {
			SchemaVersion int               `json:"schemaVersion"`
			Name          string            `json:"name"`
			Addrs         []string          `json:"addrs"`
			Port          int               `json:"port"`
			GID           string            `json:"gid"`
			MTU           int               `json:"mtu_bytes"`
			Caps          []string          `json:"caps"`
			OOBPort       int               `json:"oob_port"`
			Interface     string            `json:"interface"`
			TXT           map[string]string `json:"txt"`
		}
		if err := json.Unmarshal([]byte(firstLine(r.stdout)), &p); err != nil || r.code != 0 {
			t.Fatalf("peers --json: %v (%v)", r, err)
		}
		if p.SchemaVersion != 1 || p.Name != name || len(p.Addrs) == 0 || p.Addrs[0] != l.addrB || p.Port != 4791 ||
			p.GID != "::ffff:"+l.addrB || p.MTU != 4096 || p.Interface != "thunderbolt0" || !contains(p.Caps, "cm") ||
			p.OOBPort != 18515 || p.TXT["cm"] != "7174" {
			t.Errorf("peers --json: %+v", p)
		}
	})

	step("ping by name and by address")
	for _, peer := range []string{name, l.addrB} {
		t.Run("ping "+peer, func(t *testing.T) {
			r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "3", "-i", "0.2", peer)
			if r.code != 0 {
				t.Fatalf("ping %s: %v", peer, r)
			}
			checkPingOutput(t, r.stdout, peer, l.addrB, 3)
		})
	}
	t.Run("ping --static", func(t *testing.T) {
		r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "1", "--static", "by-hand="+l.addrB, "by-hand")
		if r.code != 0 {
			t.Fatalf("ping --static: %v", r)
		}
		checkPingOutput(t, r.stdout, "by-hand", l.addrB, 1)
	})
	t.Run("ping --json", func(t *testing.T) {
		r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "2", "-i", "0", "--json", name)
		if r.code != 0 {
			t.Fatalf("ping --json: %v", r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 {
			t.Fatalf("ping -c 2 --json: want 2 replies and a summary:\n%v", r)
		}
		for i, s := range lines[:2] {
			var o struct {
				SchemaVersion int
				Type, Peer    string
				Addr          string
				Seq, Bytes    int
				RTT           int64 `json:"rtt_ns"`
				OK            bool
			}
			if err := json.Unmarshal([]byte(s), &o); err != nil {
				t.Fatalf("reply %d: %v: %s", i, err, s)
			}
			if o.SchemaVersion != 1 || o.Type != "reply" || o.Peer != name || o.Addr != l.addrB || o.Seq != i+1 || o.Bytes != 64 || o.RTT <= 0 || !o.OK {
				t.Errorf("reply %d: %+v", i, o)
			}
		}
		var s struct {
			Type                          string
			Transmitted, Received, Errors int
			Loss                          float64 `json:"loss_ratio"`
			TimeNs                        int64   `json:"time_ns"`
			RTT                           *struct {
				Min float64 `json:"min_ns"`
				Avg float64 `json:"avg_ns"`
				Max float64 `json:"max_ns"`
			}
		}
		if err := json.Unmarshal([]byte(lines[2]), &s); err != nil {
			t.Fatalf("summary: %v: %s", err, lines[2])
		}
		if s.Type != "summary" || s.Transmitted != 2 || s.Received != 2 || s.Errors != 0 || s.Loss != 0 || s.TimeNs <= 0 ||
			s.RTT == nil || !(0 < s.RTT.Min && s.RTT.Min <= s.RTT.Avg && s.RTT.Avg <= s.RTT.Max) {
			t.Errorf("summary: %s", lines[2])
		}
	})

	step("write-bw and pingpong by name against serve")
	t.Run("write-bw against serve", func(t *testing.T) {
		// serve hosts the test (TCP 18515, test hint); the client's -n and
		// -s must reach it, and serve says so on its stderr.
		r := l.run(t, l.nsA, 60*time.Second, "write-bw", "-n", "300", "-s", "8192", name)
		if r.code != 0 || !regexp.MustCompile(`(?m)^ 8192 +300 +\d`).MatchString(r.stdout) {
			t.Fatalf("write-bw %s against serve: %v", name, r)
		}
		serve.waitLine(t, "write-bw done", 10*time.Second)
		if !strings.Contains(serve.errText(), "write-bw: 8192 bytes, 300 iterations") {
			t.Errorf("serve's stderr does not show the client's parameters:\n%s", serve.errText())
		}
		r = l.run(t, l.nsA, 60*time.Second, "pingpong", "-n", "100", "-s", "6000", name)
		if r.code != 0 || !strings.Contains(r.stdout, "1200000 bytes in ") {
			t.Fatalf("pingpong %s against serve: %v", name, r)
		}
	})

	step("ping where nothing serves")
	t.Run("ping no listener", func(t *testing.T) {
		// B is there, but nothing listens on that rdma_cm port: rejected.
		r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "1", "-p", "7999", l.addrB)
		if r.code != 1 || !strings.Contains(r.stderr, "no rdma_cm listener on "+l.addrB+" port 7999") ||
			!strings.Contains(r.stderr, "tbrdma serve") {
			t.Errorf("ping to a port where nothing listens: want exit 1 and a message naming %s port 7999 and what to run there:\n%v", l.addrB, r)
		}
		if strings.Contains(r.stdout, "bytes from") {
			t.Errorf("a reply printed:\n%v", r)
		}
	})
	t.Run("ping no answer", func(t *testing.T) {
		// Nobody has this address: no answer at all within -W.
		r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "1", "-W", "1", l.absent)
		if r.code != 1 || !strings.Contains(r.stderr, "no answer from "+l.absent+" port 7174 within 1s") {
			t.Errorf("ping to an absent address: want exit 1 and \"no answer from %s port 7174 within 1s\":\n%v", l.absent, r)
		}
	})
	t.Run("ping unknown name", func(t *testing.T) {
		r := l.run(t, l.nsA, 30*time.Second, "ping", "-c", "1", "nobody-"+host)
		if r.code != 1 || !strings.Contains(r.stderr, "nobody-"+host) || !strings.Contains(r.stderr, "tbrdma peers") {
			t.Errorf("ping to a name nobody has: want exit 1, the name and a hint at tbrdma peers:\n%v", r)
		}
	})

	step("SIGTERM to serve, watched by peers --watch")
	t.Run("serve SIGTERM", func(t *testing.T) {
		// A watcher sees the goodbye at once; without one the records
		// would live for their TTL (120 s and more).
		watch := l.start(t, l.nsA, "", "peers", "--watch", "--json")
		waitEvent(t, watch, "appeared", name, 15*time.Second)
		if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, watch, "left", name, 20*time.Second)
		watch.cmd.Process.Signal(syscall.SIGINT)
		if code := watch.wait(t, 10*time.Second); code != 0 {
			t.Errorf("peers --watch after SIGINT: exit %d, want 0:\n%s", code, watch.errText())
		}
		if code := serve.wait(t, 15*time.Second); code != 0 {
			t.Errorf("serve after SIGTERM: exit %d, want 0:\n%s", code, serve.errText())
		}
		if !strings.Contains(serve.errText(), "said goodbye on mDNS") {
			t.Errorf("serve did not say goodbye on mDNS:\n%s", serve.errText())
		}
		r := l.run(t, l.nsA, 15*time.Second, "peers", "--timeout", "2s")
		if r.code != 0 || strings.Contains(r.stdout, name) {
			t.Errorf("peers after serve's goodbye still lists %s (or failed):\n%v", name, r)
		}
		if !strings.Contains(r.stderr, "no peer answered") {
			t.Errorf("peers with nobody serving: want a note on stderr:\n%v", r)
		}
	})

	select {
	case <-serve.done:
	default: // the subtest above was not selected (-run): B must be free
		serve.cmd.Process.Signal(syscall.SIGTERM)
		serve.wait(t, 15*time.Second)
	}

	step("pingpong")
	t.Run("pingpong", func(t *testing.T) {
		srv := l.start(t, l.nsB, "", "pingpong", "-n", "100")
		l.waitListenTCP(t, l.nsB, 18515, srv)
		r := l.run(t, l.nsA, 60*time.Second, "pingpong", "-n", "100", l.addrB)
		if r.code != 0 {
			t.Fatalf("pingpong client: %v", r)
		}
		if code := srv.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("pingpong server: exit %d:\n%s%s", code, srv.stdout.String(), srv.errText())
		}
		line := regexp.MustCompile(`(?m)^\s*local address:\s+LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.7\.1$`)
		for _, out := range []string{r.stdout + r.stderr} {
			if !line.MatchString(out) {
				t.Errorf("client: no ibv_rc_pingpong local address line with GID ::ffff:%s:\n%v", l.addrA, r)
			}
			if !regexp.MustCompile(`(?m)^819200 bytes in [\d.]+ seconds = [\d.]+ Mbit/sec$`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^100 iters in [\d.]+ seconds = [\d.]+ usec/iter$`).MatchString(out) {
				t.Errorf("client: no ibv_rc_pingpong result lines for 100 × 4096 bytes (both ways):\n%v", r)
			}
		}
	})

	perftests := []struct {
		cmd  string
		args []string
		bw   bool
		rows string // who prints result rows: "client", "both"
	}{
		{"write-bw", []string{"-n", "200", "-s", "4096"}, true, "both"},
		{"read-bw", []string{"-n", "200", "-s", "4096"}, true, "both"},
		{"send-bw", []string{"-n", "200", "-s", "4096"}, true, "both"},
		{"write-bw", []string{"-n", "200", "-s", "4096", "-b"}, true, "both"},
		{"send-bw", []string{"-n", "200", "-s", "4096", "-b"}, true, "both"},
		{"write-lat", []string{"-n", "100"}, false, "both"},
		{"read-lat", []string{"-n", "100"}, false, "client"},
		{"send-lat", []string{"-n", "100"}, false, "both"},
		{"atomic-lat", []string{"-n", "100"}, false, "client"},
	}
	for _, pt := range perftests {
		for _, mode := range []string{"perftest", "json"} {
			name := pt.cmd
			if pt.args[len(pt.args)-1] == "-b" {
				name += " -b"
			}
			step(name + " " + mode)
			t.Run(name+" "+mode, func(t *testing.T) {
				args := append([]string{pt.cmd}, pt.args...)
				if mode == "json" {
					args = append(args, "--json")
				}
				srv := l.start(t, l.nsB, "", args...)
				l.waitListenTCP(t, l.nsB, 18515, srv)
				r := l.run(t, l.nsA, 60*time.Second, append(args, l.addrB)...)
				if r.code != 0 {
					t.Fatalf("client: %v", r)
				}
				if code := srv.wait(t, 30*time.Second); code != 0 {
					t.Fatalf("server: exit %d:\n%s%s", code, srv.stdout.String(), srv.errText())
				}
				n, _ := strconv.Atoi(pt.args[1])
				size := 2
				switch {
				case len(pt.args) > 3:
					size, _ = strconv.Atoi(pt.args[3])
				case pt.cmd == "atomic-lat":
					size = 8
				}
				outs := map[string]string{"client": r.stdout, "server": srv.stdout.String()}
				for _, role := range []string{"client", "server"} {
					if role == "server" && pt.rows == "client" {
						continue
					}
					if mode == "json" {
						checkBenchJSON(t, outs[role], pt.cmd, role, size, n, pt.bw)
					} else {
						checkPerftestTable(t, outs[role], pt.cmd, role, size, n, pt.bw)
					}
				}
			})
		}
	}

	step("cat 64 MiB through a pipe")
	t.Run("cat", func(t *testing.T) {
		const size = 64 << 20
		recv := l.start(t, l.nsB, "", "cat")
		rh := sha256.New()
		waitUDP(t, l.nsB, l.addrB, recv)
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		defer cancel()
		send := l.command(ctx, t, l.nsA, "", "cat", l.addrB)
		stdin, err := send.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var sendErr strings.Builder
		send.Stderr = &sendErr
		if err := send.Start(); err != nil {
			t.Fatal(err)
		}
		sh := sha256.New()
		src := rand.NewChaCha8([32]byte{6})
		if _, err := io.CopyN(io.MultiWriter(stdin, sh), src, size); err != nil {
			t.Fatalf("write to cat's stdin: %v (%s)", err, sendErr.String())
		}
		stdin.Close()
		code := exitCode(send.Wait())
		if ctx.Err() != nil {
			t.Fatal("the sender did not end within 90s")
		}
		rcode := recv.wait(t, 30*time.Second)
		got := recv.stdout.bytes()
		if code != 0 || rcode != 0 {
			t.Fatalf("cat: sender exit %d (%s), receiver exit %d (%s)", code, sendErr.String(), rcode, recv.errText())
		}
		rh.Write(got)
		if len(got) != size {
			t.Fatalf("received %d bytes, sent %d", len(got), size)
		}
		if a, b := hex.EncodeToString(sh.Sum(nil)), hex.EncodeToString(rh.Sum(nil)); a != b {
			t.Fatalf("sha256: sent %s, received %s", a, b)
		}
		if sendErr.Len() != 0 || recv.errText() != "" {
			t.Errorf("a pipeline that works is silent, got stderr: sender %q, receiver %q", sendErr.String(), recv.errText())
		}
	})

	step("cat into a pipe that closes (| head -c 100)")
	t.Run("cat output closed", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		recv := l.startOut(t, l.nsB, "", w, "cat")
		w.Close()
		waitUDP(t, l.nsB, l.addrB, recv)
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		send := l.command(ctx, t, l.nsA, "", "cat", l.addrB)
		stdin, err := send.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var sendErr strings.Builder
		send.Stderr = &sendErr
		if err := send.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { // an endless stream, until the sender stops reading
			io.Copy(stdin, rand.NewChaCha8([32]byte{8}))
			stdin.Close()
		}()
		head := make([]byte, 100) // as head -c 100 does: read, then close
		if _, err := io.ReadFull(r, head); err != nil {
			t.Fatalf("read the receiver's output: %v (%s)", err, recv.errText())
		}
		r.Close()
		code := exitCode(send.Wait())
		if ctx.Err() != nil {
			t.Fatalf("the sender did not end within 60s of the receiver's output closing: %s", sendErr.String())
		}
		rcode := recv.wait(t, 30*time.Second)
		if rcode != 1 || !strings.Contains(recv.errText(), "tbrdma: cat: the output closed after ") {
			t.Errorf("receiver: exit %d, want 1 and the closed output: %q", rcode, recv.errText())
		}
		if code != 1 || !strings.Contains(sendErr.String(), "tbrdma: cat: the receiver's output closed after ") {
			t.Errorf("sender: exit %d, want 1 and the receiver's closed output: %q", code, sendErr.String())
		}
	})

	step("cat: receiver killed, streaming and stalled (in parallel)")
	t.Run("cat receiver killed", func(t *testing.T) {
		// Second addresses on A and B: each sender and receiver owns UDP
		// 4791 on its address.
		for _, a := range []struct{ ns, addr string }{{l.nsA, "198.18.7.5"}, {l.nsB, "198.18.7.4"}} {
			out, err := exec.Command("ip", "-n", a.ns, "addr", "add", a.addr+"/29", "dev", "thunderbolt0").CombinedOutput()
			if err != nil {
				t.Fatalf("add %s in %s: %v: %s", a.addr, a.ns, err, out)
			}
		}
		// Killed while data flows: WRITEs in flight go unanswered.
		t.Run("streaming", func(t *testing.T) {
			t.Parallel()
			catReceiverKilled(t, l, l.addrA, l.addrB, false)
		})
		// Killed while its output is blocked: the ring is full, every WRITE
		// acknowledged, and the sender waits for credits that never come.
		t.Run("stalled", func(t *testing.T) {
			t.Parallel()
			catReceiverKilled(t, l, "198.18.7.5", "198.18.7.4", true)
		})
	})
	step("done")
}

// catReceiverKilled streams endless data from A to a cat receiver on addr
// in B and kills the receiver (SIGKILL: no DREQ) once 8 MiB have arrived;
// with stall, the receiver's stdout is a pipe the test stops reading, so
// that the receiver has stopped returning credits when it dies. The sender
// must exit 1, naming the receiver, within rdma_cm's retry budget (the
// test allows 90 s).
func catReceiverKilled(t *testing.T, l *link, from, addr string, stall bool) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recv := l.startOut(t, l.nsB, "", w, "cat", "--bind", addr)
	w.Close()
	var got atomic.Int64
	go func() { // read the receiver's output: all of it, or 8 MiB when it is to stall
		buf := make([]byte, 1<<16)
		for !stall || got.Load() < 8<<20 {
			n, err := r.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	waitUDP(t, l.nsB, addr, recv)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	send := l.command(ctx, t, l.nsA, "", "cat", "--bind", from, addr)
	stdin, err := send.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var sendErr strings.Builder
	send.Stderr = &sendErr
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	fed := make(chan error, 1)
	go func() { // an endless stream, until the sender stops reading
		_, err := io.Copy(stdin, rand.NewChaCha8([32]byte{7}))
		fed <- err
	}()
	sent := make(chan struct{})
	go func() { send.Wait(); close(sent) }()
	for got.Load() < 8<<20 {
		select {
		case <-sent:
			t.Fatalf("the sender ended early (%v): %s", send.ProcessState, sendErr.String())
		case <-recv.done:
			t.Fatalf("the receiver ended early (%v): %s", recv.err, recv.errText())
		case <-ctx.Done():
			t.Fatal("no 8 MiB received within 90s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if stall {
		time.Sleep(500 * time.Millisecond) // the ring fills, the WRITEs are acknowledged
	}
	killed := time.Now()
	recv.cmd.Process.Kill()
	<-sent
	code := send.ProcessState.ExitCode()
	if ctx.Err() != nil {
		t.Fatalf("the sender did not end within 90s of the receiver's death: %s", sendErr.String())
	}
	t.Logf("sender exited %d %v after the receiver was killed: %s", code, time.Since(killed).Round(time.Millisecond), strings.TrimSpace(sendErr.String()))
	if code != 1 || !strings.Contains(sendErr.String(), "tbrdma: cat:") || !strings.Contains(sendErr.String(), "receiver") {
		t.Errorf("sender after the receiver was killed: exit %d, want 1 and a message about the receiver: %q", code, sendErr.String())
	}
	<-fed
}

// bytesOut is how much the process has written to stdout so far.
func (p *proc) bytesOut() int { return len(p.stdout.bytes()) }

// waitUDP waits until something has UDP 4791 open on addr in ns (the
// receiver of cat, before any connection), reading /proc/net/udp there.
func waitUDP(t *testing.T, ns, addr string, p *proc) {
	t.Helper()
	a := netip.MustParseAddr(addr).As4()
	// /proc/net/udp prints the address as a 32-bit number in host order
	// (little-endian here), then the port.
	want := fmt.Sprintf("%08X:12B7 ", binary.LittleEndian.Uint32(a[:]))
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/udp").Output()
		if err != nil {
			t.Fatalf("read /proc/net/udp in %s: %v", ns, err)
		}
		if strings.Contains(string(out), want) || strings.Contains(string(out), "00000000:12B7 ") {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("exited (%v) before opening UDP 4791: %s", p.err, p.errText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("UDP 4791 not open on %s in %s after 10s: %s", addr, ns, p.errText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitEvent waits for a "peers --watch --json" event about name.
func waitEvent(t *testing.T, watch *proc, event, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, line := range strings.Split(watch.stdout.String(), "\n") {
			var ev struct{ Event, Name string }
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == event && ev.Name == name {
				return
			}
		}
		select {
		case <-watch.done:
			t.Fatalf("peers --watch exited (%v) before a %q event for %s:\n%s%s", watch.err, event, name, watch.stdout.String(), watch.errText())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q event for %s from peers --watch within %v:\n%s", event, name, timeout, watch.stdout.String())
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkPingOutput checks ping(8)'s lines and summary for count replies.
func checkPingOutput(t *testing.T, out, peer, addr string, count int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	want := []string{fmt.Sprintf(`^PING %s \(%s\) 64 bytes of data over RDMA \(rdma_cm port 7174\)\.$`, regexp.QuoteMeta(peer), regexp.QuoteMeta(addr))}
	for i := 1; i <= count; i++ {
		want = append(want, fmt.Sprintf(`^64 bytes from %s: seq=%d time=\d[\d.]* ms$`, regexp.QuoteMeta(addr), i))
	}
	want = append(want, `^$`, fmt.Sprintf(`^--- %s rdma ping statistics ---$`, regexp.QuoteMeta(peer)),
		fmt.Sprintf(`^%d packets transmitted, %d received, 0%% packet loss, time \d+ms$`, count, count),
		`^rtt min/avg/max/mdev = \d+\.\d{3}/\d+\.\d{3}/\d+\.\d{3}/\d+\.\d{3} ms$`)
	if len(lines) != len(want) {
		t.Fatalf("ping printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d: %q does not match %s", i+1, lines[i], re)
		}
	}
	// The summary's figures are consistent: min <= avg <= max.
	f := strings.Split(strings.Fields(lines[len(lines)-1])[3], "/")
	var v [4]float64
	for i := range v {
		v[i], _ = strconv.ParseFloat(f[i], 64)
	}
	if !(0 < v[0] && v[0] <= v[1] && v[1] <= v[2]) {
		t.Errorf("rtt min/avg/max %v not ordered", v[:3])
	}
}

// checkPerftestTable checks perftest's result table in out: the header of
// the test's kind and one row for size and n with figures that parse.
func checkPerftestTable(t *testing.T, out, cmd, role string, size, n int, bw bool) {
	t.Helper()
	header := `(?m)^ #bytes\s+#iterations\s+t_min\[usec\]\s+t_max\[usec\]\s+t_typical\[usec\]\s+t_avg\[usec\]\s+t_stdev\[usec\]\s+99% percentile\[usec\]\s+99\.9% percentile\[usec\]\s*$`
	row := fmt.Sprintf(`(?m)^ %d\s+%d(\s+\d+\.\d{2}){7}\s*$`, size, n)
	if bw {
		header = `(?m)^ #bytes\s+#iterations\s+BW peak\[MiB/sec\]\s+BW average\[MiB/sec\]\s+MsgRate\[Mpps\]\s*$`
		row = fmt.Sprintf(`(?m)^ %d\s+%d\s+\d+\.\d{2}\s+\d+\.\d{2}\s+\d+\.\d{6}\s*$`, size, n)
	}
	if !regexp.MustCompile(header).MatchString(out) || !regexp.MustCompile(row).MatchString(out) {
		t.Errorf("%s %s: no perftest result table for %d bytes × %d:\n%s", cmd, role, size, n, out)
	}
}

// checkBenchJSON checks the --json rows: schema, names, units (bits/s,
// packets/s and ns agree with each other), not the timings themselves.
func checkBenchJSON(t *testing.T, out, cmd, role string, size, n int, bw bool) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("%s %s --json: want one row:\n%s", cmd, role, out)
	}
	var row map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &row); err != nil {
		t.Fatalf("%s %s --json: %v: %s", cmd, role, err, lines[0])
	}
	num := func(k string) float64 {
		v, ok := row[k].(float64)
		if !ok {
			t.Errorf("%s %s: %q missing or not a number in %s", cmd, role, k, lines[0])
		}
		return v
	}
	if row["schemaVersion"] != 1.0 || row["test"] != cmd || row["role"] != role || num("bytes") != float64(size) || num("iterations") != float64(n) {
		t.Errorf("%s %s: row %s", cmd, role, lines[0])
	}
	bwKeys := []string{"bw_peak_bps", "bw_avg_bps", "msg_rate_pps"}
	latKeys := []string{"t_min_ns", "t_max_ns", "t_typical_ns", "t_avg_ns", "t_stdev_ns", "p99_ns", "p999_ns"}
	has, hasNot := latKeys, bwKeys
	if bw {
		has, hasNot = bwKeys, latKeys
	}
	for _, k := range hasNot {
		if _, ok := row[k]; ok {
			t.Errorf("%s %s: %q in a %s row: %s", cmd, role, k, map[bool]string{true: "bandwidth", false: "latency"}[bw], lines[0])
		}
	}
	for _, k := range has {
		if v := num(k); v < 0 || math.IsInf(v, 0) {
			t.Errorf("%s %s: %s = %v", cmd, role, k, v)
		}
	}
	if bw {
		// bits/s = messages/s × bytes × 8, within the rounding of perftest's
		// MiB/s (2 decimals) and Mpps (6 decimals).
		avg, rate := num("bw_avg_bps"), num("msg_rate_pps")
		if avg <= 0 || rate <= 0 {
			t.Errorf("%s %s: no bandwidth: %s", cmd, role, lines[0])
		} else if want := rate * float64(size) * 8; math.Abs(avg-want) > 0.01*want+0.01*(1<<20)*8+float64(size)*8 {
			t.Errorf("%s %s: bw_avg_bps %v but msg_rate_pps × bytes × 8 = %v: units disagree", cmd, role, avg, want)
		}
		if num("bw_peak_bps") < avg*0.99 && role == "client" && cmd != "send-bw" {
			t.Errorf("%s %s: peak %v below average %v", cmd, role, num("bw_peak_bps"), avg)
		}
		return
	}
	mn, mx, typ, avg := num("t_min_ns"), num("t_max_ns"), num("t_typical_ns"), num("t_avg_ns")
	if !(0 < mn && mn <= typ && typ <= mx && mn <= avg && num("p99_ns") <= num("p999_ns")) {
		t.Errorf("%s %s: latencies out of order (min ≤ typical ≤ max, min ≤ avg, p99 ≤ p99.9): %s", cmd, role, lines[0])
	}
	// ns, not µs: a round trip between two processes through the kernel
	// takes more than a microsecond.
	if mn < 1000 {
		t.Errorf("%s %s: t_min_ns %v: less than 1 µs, is the unit ns?", cmd, role, mn)
	}
}
