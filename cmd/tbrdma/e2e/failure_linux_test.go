package e2e

// Bounded failure as a user sees it: a transfer between two namespaces is
// running when the server's side goes away — the process SIGKILLed, its
// thunderbolt0 set down, or its namespace deleted — and the client must
// exit 1 within the time its QP (and, for rdma_cm, its CM) attributes
// imply, saying which peer stopped answering and why.
//
//	go test ./cmd/tbrdma/e2e -count=1 -run '^TestFailureMatrix$' -reliability.out=$PWD/docs/reliability.md
//
// (as root) runs every case three times and rewrites the table between
// "<!-- BEGIN KILL LINKDOWN NETNS TABLE -->" and its END marker; without
// the flag each case runs once and only asserts, and the two rdma_cm
// commands (about 20 s a case) meet one fault each (-failure.all: all
// three); about 2 minutes. docs/reliability.sh runs it together with the
// other generators.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/internal/docsection"
)

var (
	reliabilityOut = flag.String("reliability.out", "", "run each failure case -failure.runs times and rewrite the kill/link-down/namespace-delete table in this Markdown file (docs/reliability.md)")
	failureRuns    = flag.Int("failure.runs", 0, "runs of each failure case (default 1, 3 with -reliability.out)")
	failureAll     = flag.Bool("failure.all", false, "run every command against every fault (the default with -reliability.out; without, the rdma_cm commands meet one fault each)")
)

// The failure link's addresses: a /29 no other test uses (198.18.10.0/29;
// the other tests have 198.18.7.0/29 and, on a second interface,
// 198.18.9.0/29).
const (
	failAddrA = "198.18.10.1" // the client
	failAddrB = "198.18.10.2" // the server, the side that fails
)

// newFailLink creates namespaces A and B joined by a thunderbolt0 veth
// pair with 198.18.10.1 and .2, and deletes them when the test ends.
func newFailLink(t *testing.T) *link {
	t.Helper()
	return newVethLink(t, "f", failAddrA, failAddrB, "198.18.10.3")
}

// newVethLink creates namespaces tb<tag>… A and B joined by a thunderbolt0
// veth pair (MTU 65520) with addrA and addrB (/29; absent is a free address
// of that network), and deletes them when the test ends. It skips the test
// where namespaces cannot be made.
func newVethLink(t *testing.T, tag, addrA, addrB, absent string) *link {
	t.Helper()
	needNetns(t)
	id := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	l := &link{nsA: "tb" + tag + "-" + id + "-a", nsB: "tb" + tag + "-" + id + "-b", addrA: addrA, addrB: addrB, absent: absent}
	vA, vB := "tb"+tag+id+"a", "tb"+tag+id+"b"
	if err := ipCmd("netns", "add", l.nsA); err != nil {
		t.Skipf("cannot create a network namespace (%v): run as root on Linux with netns support", err)
	}
	t.Cleanup(func() { ipCmd("netns", "del", l.nsA) })
	if err := ipCmd("netns", "add", l.nsB); err != nil {
		t.Fatal(err)
	}
	// The namespace-delete case deletes B itself; deleting it again fails
	// harmlessly.
	t.Cleanup(func() { ipCmd("netns", "del", l.nsB) })
	if err := ipCmd("link", "add", vA, "type", "veth", "peer", "name", vB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ipCmd("link", "del", vA) })
	for _, s := range []struct{ ns, veth, addr string }{{l.nsA, vA, l.addrA}, {l.nsB, vB, l.addrB}} {
		for _, st := range [][]string{
			{"link", "set", s.veth, "netns", s.ns},
			{"-n", s.ns, "link", "set", "lo", "up"},
			{"-n", s.ns, "link", "set", s.veth, "name", "thunderbolt0"},
			{"-n", s.ns, "link", "set", "thunderbolt0", "mtu", "65520", "up"},
			{"-n", s.ns, "addr", "add", s.addr + "/29", "dev", "thunderbolt0"},
		} {
			if err := ipCmd(st...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return l
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// fault is one way for the server's side to go away.
type fault struct {
	name  string
	apply func(t *testing.T, l *link, srv *proc)
}

var faults = []fault{
	{name: "peer killed", // SIGKILL of the server
		apply: func(t *testing.T, l *link, srv *proc) { srv.cmd.Process.Kill() }},
	{name: "link down", // ip link set thunderbolt0 down, in the server's namespace
		apply: func(t *testing.T, l *link, srv *proc) {
			if err := ipCmd("-n", l.nsB, "link", "set", "thunderbolt0", "down"); err != nil {
				t.Fatal(err)
			}
		}},
	// A namespace lives on while a process runs in it: deleting B's name
	// and killing what runs there destroys it, and with it B's end of the
	// veth pair, which takes A's thunderbolt0 (and A's address) with it.
	{name: "namespace deleted",
		apply: func(t *testing.T, l *link, srv *proc) {
			if err := ipCmd("netns", "del", l.nsB); err != nil {
				t.Fatal(err)
			}
			srv.cmd.Process.Kill()
		}},
}

// failCommand is one command whose client sees the server's side go away
// in the middle of its transfer.
type failCommand struct {
	name           string
	server, client []string // arguments; the client's end with the server's address
	// qpTimeout is the client QP's local ACK timeout exponent: the CLI's
	// -u default 14 (67 ms), over the TCP exchange and over rdma_cm (-R,
	// as perftest 24.10 and later set it), and for cat's rdma_cm
	// connection what the CM computes from the packet lifetime 18 and
	// rxe's CA ACK delay 15: 19 (2.1 s), as the kernel does.
	qpTimeout int
	// extra is what the client may spend after the error completion by
	// design, part of the bound: perftest -R waits up to 2 s for the
	// peer's answer to its DREQ; cat's sender probes a silent receiver
	// after 1 s without progress and waits 2 s for the DREP.
	extra    time.Duration
	extraWhy string
	// silence: the one-message-at-a-time loops (pingpong, send-lat,
	// write-lat) give up on a peer silent for 5 to 10 s when nothing of
	// theirs is in flight (the fault landed between the peer's
	// acknowledgement and its answer): the bound is then 10 s.
	silence   time.Duration
	tcpPort   int  // the server listens on this TCP port (0: UDP 4791, rdma_cm)
	streamsIn bool // the client reads an endless stdin (cat)
	// quick: without -reliability.out or -failure.all, the ~20 s rdma_cm
	// cases run only against this fault (the others against all three).
	quick string
}

const retryCnt = 7 // every tbrdma command's retry_cnt

// bound is (retry_cnt + 1) × 4.096 µs × 2^timeout + extra, or the
// silence limit when it is longer.
func (c failCommand) bound() time.Duration {
	return max(qpBound(c.qpTimeout)+c.extra, c.silence)
}

// boundText is how the table shows the bound.
func (c failCommand) boundText() string {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	switch {
	case c.silence > 0:
		return fmt.Sprintf("%s (silence limit; %s when a message is in flight)", ms(c.bound()), ms(qpBound(c.qpTimeout)))
	case c.extra > 0:
		return fmt.Sprintf("%s %s = %s", ms(qpBound(c.qpTimeout)), c.extraWhy, ms(c.bound()))
	}
	return ms(c.bound())
}

func qpBound(timeout int) time.Duration {
	return time.Duration(retryCnt+1) * 4096 * time.Nanosecond << timeout
}

var failCommands = []failCommand{
	{name: "write-bw", server: []string{"write-bw", "--bind", failAddrB, "-s", "1048576", "-n", "100000"},
		client: []string{"write-bw", "--bind", failAddrA, "-s", "1048576", "-n", "100000", failAddrB}, qpTimeout: 14, tcpPort: 18515},
	{name: "read-lat", server: []string{"read-lat", "--bind", failAddrB, "-n", "1000000"},
		client: []string{"read-lat", "--bind", failAddrA, "-n", "1000000", failAddrB}, qpTimeout: 14, tcpPort: 18515},
	{name: "send-lat", server: []string{"send-lat", "--bind", failAddrB, "-n", "1000000"},
		client: []string{"send-lat", "--bind", failAddrA, "-n", "1000000", failAddrB}, qpTimeout: 14, tcpPort: 18515,
		silence: 10 * time.Second},
	{name: "write-lat", server: []string{"write-lat", "--bind", failAddrB, "-n", "1000000"},
		client: []string{"write-lat", "--bind", failAddrA, "-n", "1000000", failAddrB}, qpTimeout: 14, tcpPort: 18515,
		silence: 10 * time.Second},
	{name: "pingpong", server: []string{"pingpong", "--bind", failAddrB, "-n", "100000000"},
		client: []string{"pingpong", "--bind", failAddrA, "-n", "100000000", failAddrB}, qpTimeout: 14, tcpPort: 18515,
		silence: 10 * time.Second},
	{name: "write-bw -R", server: []string{"write-bw", "-R", "--bind", failAddrB, "-s", "1048576", "-n", "100000"},
		client: []string{"write-bw", "-R", "--bind", failAddrA, "-s", "1048576", "-n", "100000", failAddrB}, qpTimeout: 14,
		extra: 2 * time.Second, extraWhy: "+ 2 s DREQ wait", quick: "link down"},
	{name: "cat", server: []string{"cat", "--bind", failAddrB},
		client: []string{"cat", "--bind", failAddrA, failAddrB}, qpTimeout: 19, streamsIn: true,
		extra: 3 * time.Second, extraWhy: "+ 1 s probe interval + 2 s DREQ wait", quick: "namespace deleted"},
}

// failResult is one run of one case.
type failResult struct {
	toMsg   time.Duration // fault → the "stopped answering" message on stderr
	elapsed time.Duration // fault → exit
	code    int
	msg     string // the client's stderr line that says "stopped answering"
}

// timedBuffer is a process's stderr that notes when mark first appeared.
type timedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	mark string
	at   time.Time
}

func (b *timedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.at.IsZero() && strings.Contains(b.buf.String(), b.mark) {
		b.at = time.Now()
	}
	return len(p), nil
}

func (b *timedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *timedBuffer) markedAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.at
}

// TestFailureMatrix runs every command against every fault. The client
// must exit 1 within the bound plus a hang detector of bound + 10 s
// (process start-up and exit, a loaded machine: not a figure of the
// stack's speed), and name the server's address and the cause.
func TestFailureMatrix(t *testing.T) {
	needNetns(t)
	runs := *failureRuns
	if runs <= 0 {
		runs = 1
		if *reliabilityOut != "" {
			runs = 3
		}
	}
	type row struct {
		f       fault
		c       failCommand
		results []failResult
	}
	all := *failureAll || *reliabilityOut != ""
	var rows []*row
	for _, f := range faults {
		for _, c := range failCommands {
			if !all && c.quick != "" && c.quick != f.name {
				continue // TestTwoMachines kills cat's receiver already
			}
			r := &row{f: f, c: c}
			rows = append(rows, r)
			t.Run(strings.ReplaceAll(f.name+"/"+c.name, " ", "_"), func(t *testing.T) {
				for i := range runs {
					progress("failure: %s, %s, run %d of %d (bound %v)", f.name, c.name, i+1, runs, c.bound())
					// A subtest per run: its namespaces and processes go
					// when the run ends.
					ok := t.Run(fmt.Sprint("run", i+1), func(t *testing.T) {
						res := runFailure(t, f, c)
						progress("failure: %s, %s: message after %v, exit %d after %v: %s", f.name, c.name, res.toMsg.Round(time.Millisecond), res.code, res.elapsed.Round(time.Millisecond), res.msg)
						r.results = append(r.results, res)
					})
					if !ok {
						return
					}
				}
			})
		}
	}
	if *reliabilityOut != "" && !t.Failed() {
		var b strings.Builder
		b.WriteString("| fault | command | client QP timeout, retry_cnt | computed bound | time to the message: min / median / max | time to exit: min / median / max | runs | exit |\n")
		b.WriteString("|---|---|---|--:|--:|--:|--:|--:|\n")
		seen := map[string]bool{}
		var order []string
		for _, r := range rows {
			var toMsg, toExit []time.Duration
			for _, res := range r.results {
				toMsg, toExit = append(toMsg, res.toMsg), append(toExit, res.elapsed)
				// The message without the figures that vary (bytes sent,
				// the failed work request).
				m := regexp.MustCompile(`after \d+ bytes`).ReplaceAllString(res.msg, "after N bytes")
				m = regexp.MustCompile(`work request \d+`).ReplaceAllString(m, "work request N")
				if !seen[m] {
					seen[m] = true
					order = append(order, m)
				}
			}
			codes := ""
			for i, res := range r.results {
				if i == 0 || res.code != r.results[i-1].code {
					codes += fmt.Sprintf("%d ", res.code)
				}
			}
			fmt.Fprintf(&b, "| %s | `%s` | %d (%v), %d | %s | %s | %s | %d | %s |\n",
				r.f.name, r.c.name, r.c.qpTimeout, (4096 * time.Nanosecond << r.c.qpTimeout).Round(time.Millisecond), retryCnt,
				r.c.boundText(), minMedMax(toMsg), minMedMax(toExit), len(r.results), strings.TrimSpace(codes))
		}
		b.WriteString("\nThe messages (the client's stderr line that names the peer and the cause):\n\n")
		for _, m := range order {
			fmt.Fprintf(&b, "- `%s`\n", strings.ReplaceAll(m, "`", "'"))
		}
		writeDocSection(t, *reliabilityOut, "KILL LINKDOWN NETNS TABLE", b.String())
	}
}

// runFailure runs one case once on a link of its own.
func runFailure(t *testing.T, f fault, c failCommand) failResult {
	t.Helper()
	l := newFailLink(t)
	srv := l.start(t, l.nsB, "", c.server...)
	if c.tcpPort != 0 {
		l.waitListenTCP(t, l.nsB, c.tcpPort, srv)
	} else {
		waitUDP(t, l.nsB, failAddrB, srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := l.command(ctx, t, l.nsA, "", c.client...)
	var out lockedBuffer
	errOut := &timedBuffer{mark: "stopped answering"}
	cl.Stdout, cl.Stderr = &out, errOut
	var stdin io.WriteCloser
	if c.streamsIn {
		var err error
		if stdin, err = cl.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	var end time.Time
	go func() {
		waitErr = cl.Wait()
		end = time.Now()
		close(exited)
	}()
	t.Cleanup(func() { cancel(); <-exited })
	if stdin != nil {
		go func() { // an endless stream, until the client stops reading
			io.Copy(stdin, rand.NewChaCha8([32]byte{9}))
			stdin.Close()
		}()
	}
	// Mid-transfer: the client's thunderbolt0 sends at least 50 packets
	// in 100 ms (the set-up exchanges send a few dozen in all), then the
	// transfer runs on for another 500 ms.
	waitTraffic(t, l.nsA, exited, srv)
	select {
	case <-exited:
		t.Fatalf("the client ended before the fault (%v):\n%s%s", waitErr, out.String(), errOut.String())
	case <-srv.done:
		t.Fatalf("the server ended before the fault (%v):\n%s", srv.err, srv.errText())
	case <-time.After(500 * time.Millisecond):
	}
	if c.streamsIn && srv.bytesOut() == 0 {
		t.Fatalf("cat: nothing received:\n%s", errOut.String())
	}
	faultAt := time.Now()
	f.apply(t, l, srv)
	bound := c.bound()
	hang := 2*bound + 10*time.Second
	select {
	case <-exited:
	case <-time.After(hang):
		t.Fatalf("%s, %s: the client still runs %v after the fault (bound %v): a hang\nstderr:\n%s", f.name, c.name, hang, bound, errOut.String())
	}
	res := failResult{elapsed: end.Sub(faultAt), code: exitCode(waitErr)}
	if at := errOut.markedAt(); !at.IsZero() {
		res.toMsg = at.Sub(faultAt)
	}
	stderr := strings.TrimSpace(errOut.String())
	// The message: the line that says "stopped answering" (perftest's
	// own lines come before it, and write-lat's engine counters after).
	lines := strings.Split(stderr, "\n")
	res.msg = lines[len(lines)-1]
	for _, line := range lines {
		if strings.Contains(line, errOut.mark) {
			res.msg = line
			break
		}
	}
	if res.code != 1 {
		t.Errorf("%s, %s: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", f.name, c.name, res.code, out.String(), stderr)
	}
	if !strings.Contains(res.msg, failAddrB) || !strings.Contains(strings.ToLower(stderr), "stopped answering") {
		t.Errorf("%s, %s: the message does not name the peer %s and the cause (stopped answering):\n%s", f.name, c.name, failAddrB, stderr)
	}
	if res.elapsed > bound+time.Second {
		// Not a failure (the machine may be loaded): the figure goes in the
		// table, and the log says so.
		t.Logf("%s, %s: %v after the fault, more than the bound %v + 1 s", f.name, c.name, res.elapsed, bound)
	}
	return res
}

// waitTraffic waits until thunderbolt0 in ns sends at least 50 packets
// within 100 ms (the data path runs), 30 s at most.
func waitTraffic(t *testing.T, ns string, client <-chan struct{}, srv *proc) {
	t.Helper()
	txPackets := func() int {
		out, err := exec.Command("ip", "-n", ns, "-s", "-j", "link", "show", "thunderbolt0").Output()
		if err != nil {
			t.Fatalf("ip -s link in %s: %v", ns, err)
		}
		var links []struct {
			Stats64 struct {
				TX struct{ Packets int } `json:"tx"`
			} `json:"stats64"`
		}
		if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
			t.Fatalf("ip -s -j link in %s: %v: %s", ns, err, out)
		}
		return links[0].Stats64.TX.Packets
	}
	deadline := time.Now().Add(30 * time.Second)
	first := txPackets()
	last := first
	for time.Now().Before(deadline) {
		select {
		case <-client:
			return // the caller reports it
		case <-srv.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
		cur := txPackets()
		if cur-last >= 50 {
			return
		}
		last = cur
	}
	t.Fatalf("no transfer on thunderbolt0 in %s within 30 s (%d packets sent in all: never 50 within 100 ms)", ns, last-first)
}

// minMedMax formats the minimum, median and maximum of d in milliseconds.
func minMedMax(d []time.Duration) string {
	d = slices.Clone(d)
	slices.Sort(d)
	ms := func(x time.Duration) string { return x.Round(time.Millisecond).String() }
	return ms(d[0]) + " / " + ms(d[len(d)/2]) + " / " + ms(d[len(d)-1])
}

// writeDocSection replaces what lies between "<!-- BEGIN name -->" and
// "<!-- END name -->" in path, and nothing else.
func writeDocSection(t *testing.T, path, name, content string) {
	t.Helper()
	if err := docsection.ReplaceNamed(path, name, content); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s (%s)", path, name)
}
