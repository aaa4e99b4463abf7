package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// mismatchEnd is one command of TestMismatchNeverHangs, as a server or a
// client runs it on the loopback interface.
type mismatchEnd struct {
	name string
	args []string // the command and its flags, without addresses
	// cm: the command talks rdma_cm (UDP 4791), not TCP 18515; tcpPS:
	// in rdma_cm's RDMA_PS_TCP port space (ping), not RDMA_PS_UDP
	// (udaddy), whose listeners never see the other's requests.
	cm, tcpPS bool
	// perftest: one of the seven perftest commands.
	perftest bool
}

// Small runs, so that a matching pair ends quickly.
var mismatchServers = []mismatchEnd{
	{"write-bw", []string{"write-bw", "-n", "50"}, false, false, true},
	{"read-bw", []string{"read-bw", "-n", "50"}, false, false, true},
	{"send-bw", []string{"send-bw", "-n", "50"}, false, false, true},
	{"write-lat", []string{"write-lat", "-n", "50"}, false, false, true},
	{"read-lat", []string{"read-lat", "-n", "50"}, false, false, true},
	{"send-lat", []string{"send-lat", "-n", "50"}, false, false, true},
	{"atomic-lat", []string{"atomic-lat", "-n", "50"}, false, false, true},
	{"pingpong", []string{"pingpong", "-n", "10"}, false, false, false},
	{"pingpong --ud", []string{"pingpong", "--ud", "-n", "10", "-s", "1024"}, false, false, false},
	{"udaddy", []string{"udaddy", "-C", "2"}, true, false, false},
}

// The clients: the servers' commands and ping (whose server is serve),
// and rows with flags that differ from the server's of the same test.
// ping and udaddy get -W 1: toward a server that does not listen on
// rdma_cm their defaults (10 s, 60 s) are what they wait.
var mismatchClients = append(append([]mismatchEnd(nil), mismatchServers[:len(mismatchServers)-1]...),
	mismatchEnd{"udaddy", []string{"udaddy", "-C", "2", "-W", "1"}, true, false, false},
	mismatchEnd{"ping", []string{"ping", "-c", "1", "-W", "1"}, true, true, false},
)

// mismatchFlagRows are pairs of one test with different flags.
var mismatchFlagRows = []struct{ server, client mismatchEnd }{
	{mismatchEnd{"write-bw -s 4096", []string{"write-bw", "-n", "50", "-s", "4096"}, false, false, true},
		mismatchEnd{"write-bw -s 65536", []string{"write-bw", "-n", "50", "-s", "65536"}, false, false, true}},
	{mismatchEnd{"write-bw -s 65536", []string{"write-bw", "-n", "50", "-s", "65536"}, false, false, true},
		mismatchEnd{"write-bw -a", []string{"write-bw", "-n", "5", "-a"}, false, false, true}},
	{mismatchEnd{"read-lat", []string{"read-lat", "-n", "50"}, false, false, true},
		mismatchEnd{"read-lat -a", []string{"read-lat", "-n", "5", "-a"}, false, false, true}},
	{mismatchEnd{"send-lat -n 50", []string{"send-lat", "-n", "50"}, false, false, true},
		mismatchEnd{"send-lat -n 60", []string{"send-lat", "-n", "60"}, false, false, true}},
	{mismatchEnd{"atomic-lat", []string{"atomic-lat", "-n", "50"}, false, false, true},
		mismatchEnd{"atomic-lat -A CMP_AND_SWAP", []string{"atomic-lat", "-n", "50", "-A", "CMP_AND_SWAP"}, false, false, true}},
	{mismatchEnd{"write-bw -q 4", []string{"write-bw", "-n", "50", "-q", "4"}, false, false, true},
		mismatchEnd{"write-bw -q 2", []string{"write-bw", "-n", "50", "-q", "2"}, false, false, true}},
	{mismatchEnd{"send-bw", []string{"send-bw", "-n", "50"}, false, false, true},
		mismatchEnd{"send-bw -q 3", []string{"send-bw", "-n", "50", "-q", "3"}, false, false, true}},
	{mismatchEnd{"read-bw -q 2", []string{"read-bw", "-n", "50", "-q", "2"}, false, false, true},
		mismatchEnd{"read-bw", []string{"read-bw", "-n", "50"}, false, false, true}},
	{mismatchEnd{"write-bw -b", []string{"write-bw", "-n", "50", "-b"}, false, false, true},
		mismatchEnd{"write-bw", []string{"write-bw", "-n", "50"}, false, false, true}},
	{mismatchEnd{"send-bw", []string{"send-bw", "-n", "50"}, false, false, true},
		mismatchEnd{"send-bw -b", []string{"send-bw", "-n", "50", "-b"}, false, false, true}},
	{mismatchEnd{"pingpong -s 4096", []string{"pingpong", "-n", "10"}, false, false, false},
		mismatchEnd{"pingpong -s 8192", []string{"pingpong", "-n", "10", "-s", "8192"}, false, false, false}},
	{mismatchEnd{"pingpong -n 10", []string{"pingpong", "-n", "10"}, false, false, false},
		mismatchEnd{"pingpong -n 20", []string{"pingpong", "-n", "20"}, false, false, false}},
}

// mismatchBound is how long either end of a pairing may take.
const mismatchBound = 10 * time.Second

// TestMismatchNeverHangs runs every pairing of a server command and a
// client command (the seven perftest commands, pingpong, pingpong --ud,
// udaddy; ping as a client) on loopback addresses (127.85.x.y, unique to
// this test) and checks that each end exits within mismatchBound, with 0
// or an error message; a pair of TCP commands (perftest, pingpong) of
// different tests or flags fails on both ends with the server's one-line
// reason. A client that cannot
// reach the server at all (rdma_cm toward a TCP server, TCP toward
// udaddy) must fail; that server, which never saw a client, is stopped.
func TestMismatchNeverHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs 120 client/server pairs of the built binary")
	}
	bin := tbrdma(t)
	type row struct{ server, client mismatchEnd }
	var rows []row
	for _, s := range mismatchServers {
		for _, c := range mismatchClients {
			rows = append(rows, row{s, c})
		}
	}
	for _, r := range mismatchFlagRows {
		rows = append(rows, row{r.server, r.client})
	}
	start := time.Now()
	for i, r := range rows {
		name := r.server.name + " <- " + r.client.name
		progress("%5.1fs mismatch %d/%d: %s", time.Since(start).Seconds(), i+1, len(rows), name)
		t.Run(name, func(t *testing.T) {
			sa := netip.AddrFrom4([4]byte{127, 85, byte(i >> 6), byte(4*(i&63) + 1)})
			ca := sa.Next()
			runMismatchPair(t, bin, sa, ca, r.server, r.client)
		})
	}
}

// mismatchResult is how one end ended.
type mismatchResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
	killed         bool
}

func (r mismatchResult) String() string {
	return fmt.Sprintf("exit %d after %v (killed %v)\nstdout:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.killed, r.stdout, r.stderr)
}

// startEnd starts the binary with args; the function it returns waits
// for it to end, which it does at the latest when bound has passed since
// its start (it is killed then).
func startEnd(t *testing.T, bin string, bound time.Duration, args ...string) func() mismatchResult {
	t.Helper()
	return startEndCtx(t, context.Background(), bin, bound, args...)
}

func runMismatchPair(t *testing.T, bin string, sa, ca netip.Addr, s, c mismatchEnd) {
	sargs := append([]string(nil), s.args...)
	if s.cm {
		sargs = append(sargs, "-b", sa.String())
	} else {
		sargs = append(sargs, "--bind", sa.String())
	}
	// The server may wait longer than a client when no client reaches
	// it; it is stopped then.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	waitS := startEndCtx(t, ctx, bin, 3*mismatchBound, sargs...)
	if !waitListening(sa, s.cm, 5*time.Second) {
		stop()
		t.Fatalf("server %v does not listen on %v:\n%v", sargs, sa, waitS())
	}
	cargs := append([]string(nil), c.args...)
	switch {
	case c.name == "udaddy":
		cargs = append(cargs, "-b", ca.String(), sa.String())
	default:
		cargs = append(cargs, "--bind", ca.String(), sa.String())
	}
	cr := startEnd(t, bin, mismatchBound+2*time.Second, cargs...)()
	reached := s.cm == c.cm && s.tcpPS == c.tcpPS
	var sr mismatchResult
	if reached {
		sr = waitWithin(waitS, mismatchBound)
	} else {
		stop()
		sr = waitS()
	}
	same := s.name == c.name
	switch {
	case cr.killed || cr.took > mismatchBound:
		t.Errorf("the client hangs: %v\nserver: %v", cr, sr)
	case reached && (sr.killed || sr.took > mismatchBound+cr.took):
		t.Errorf("the server hangs: %v\nclient: %v", sr, cr)
	case same:
		if cr.code != 0 || sr.code != 0 {
			t.Errorf("a matching pair failed:\nclient: %v\nserver: %v", cr, sr)
		}
	case cr.code == 0 && !reached:
		t.Errorf("the client succeeded against a server it cannot reach: %v", cr)
	case cr.code != 0 && !strings.Contains(cr.stderr, "tbrdma"):
		t.Errorf("the client fails without a message: %v", cr)
	case reached && sr.code != 0 && !strings.Contains(sr.stderr, "tbrdma"):
		t.Errorf("the server fails without a message: %v", sr)
	}
	// Two TCP commands that differ: the server refuses, both ends say why.
	if !s.cm && !c.cm && !same {
		for _, e := range []struct {
			who string
			r   mismatchResult
		}{{"client", cr}, {"server", sr}} {
			if e.r.code == 0 || !strings.Contains(e.r.stderr, "the client runs") || !strings.Contains(e.r.stderr, "start the") {
				t.Errorf("the %s does not explain the mismatch: %v", e.who, e.r)
			}
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("client %v: exit %d, %q; server %v: exit %d, %q", cargs, cr.code, lastLine(cr.stderr), sargs, sr.code, lastLine(sr.stderr))
	}
}

// startEndCtx is startEnd that also kills the process when ctx ends.
func startEndCtx(t *testing.T, ctx context.Context, bin string, bound time.Duration, args ...string) func() mismatchResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, bound)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan mismatchResult, 1)
	go func() {
		cmd.Wait()
		done <- mismatchResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String(), took: time.Since(began), killed: ctx.Err() != nil}
		cancel()
	}()
	var res *mismatchResult
	t.Cleanup(func() {
		cancel()
		if res == nil {
			<-done
		}
	})
	return func() mismatchResult {
		if res == nil {
			r := <-done
			res = &r
		}
		return *res
	}
}

// waitWithin returns wait's result, or, after d, the result once killed.
func waitWithin(wait func() mismatchResult, d time.Duration) mismatchResult {
	c := make(chan mismatchResult, 1)
	go func() { c <- wait() }()
	select {
	case r := <-c:
		return r
	case <-time.After(d):
		r := <-c // startEndCtx's bound kills it
		r.killed = true
		return r
	}
}

// waitListening waits until a socket listens on addr: TCP 18515 in
// LISTEN (/proc/net/tcp), or with cm UDP 4791 (/proc/net/udp).
func waitListening(addr netip.Addr, cm bool, d time.Duration) bool {
	file, port, state := "/proc/net/tcp", 18515, "0A"
	if cm {
		file, port, state = "/proc/net/udp", 4791, "07"
	}
	a := addr.As4()
	want := fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(a[:]), port)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) > 3 && f[1] == want && f[3] == state {
				return true
			}
		}
	}
	return false
}
