package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/verbs"
)

// Loopback addresses for this package's tests: 127.79.x.y, a range no
// other package's tests use, so that tests running at once in other
// processes never fight over UDP port 4791.
var nextAddr atomic.Uint32

func loopbackAddr() netip.Addr {
	n := nextAddr.Add(1)
	return netip.AddrFrom4([4]byte{127, 79, byte(n >> 8), byte(n)})
}

// testFactory returns a factory writing to buffers.
func testFactory() (*Factory, *bytes.Buffer, *bytes.Buffer) {
	io, out, errOut := ui.Test()
	f := &Factory{IO: io, Now: time.Now}
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) { return openDevice(a, nil) }
	return f, out, errOut
}

func TestExitCodes(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"unknown flag", []string{"pingpong", "--nope"}, ExitUsage, "unknown flag: --nope"},
		{"bad value", []string{"pingpong", "-m", "1000"}, ExitUsage, "invalid -m 1000"},
		{"two peers", []string{"pingpong", "a", "b"}, ExitUsage, "too many arguments"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, "unknown command"},
		{"atomic size", []string{"atomic-lat", "-s", "16", "x"}, ExitUsage, "atomic operations are 8 bytes"},
		{"usage printed", []string{"read-lat", "-c", "UD"}, ExitUsage, "Usage: tbrdma read-lat [flags] [peer]\nRun 'tbrdma read-lat --help' for the flags and examples.\n"},
		{"perftest -I on a READ test", []string{"read-lat", "-I", "64", "x"}, ExitUsage, "perftest's -I/--inline_size applies to the WRITE and SEND tests only"},
		{"perftest -l on a latency test", []string{"send-lat", "-l", "4", "x"}, ExitUsage, "perftest's -l/--post_list applies to the bandwidth tests only"},
		{"perftest -H on a bandwidth test", []string{"write-bw", "-H", "x"}, ExitUsage, "perftest's -H/--report-histogram applies to the latency tests only"},
		{"perftest -C on a bandwidth test", []string{"read-bw", "-C", "x"}, ExitUsage, "perftest's -C/--report-cycles applies to the latency tests only"},
		{"-I too large", []string{"write-lat", "-I", "300", "x"}, ExitUsage, "invalid -I 300: want 0..256"},
		{"-Q range on a latency test", []string{"read-lat", "-Q", "0", "x"}, ExitUsage, "invalid -Q 0: want 1..1024"},
		{"-l not dividing -n", []string{"write-bw", "-l", "3", "-n", "10", "x"}, ExitUsage, "-l 3: -n 10 is not a multiple of it"},
		{"-l above -t", []string{"write-bw", "-l", "8", "-t", "4", "x"}, ExitUsage, "-l 8 is more than the send queue (-t 4)"},
		{"-l not a multiple of -Q", []string{"send-bw", "-l", "6", "-Q", "4", "-n", "60", "x"}, ExitUsage, "-l 6 is not a multiple of -Q 4"},
		{"-C with --json", []string{"write-lat", "-C", "--json", "x"}, ExitUsage, "-C reports CPU cycles in perftest's table; --json and --csv report nanoseconds"},
		{"-D with -H", []string{"read-lat", "-D", "5", "-H", "x"}, ExitUsage, "-D reports the average latency only, without samples (as perftest): drop -H, -U and -C"},
		{"-D with -a on a latency test", []string{"send-lat", "-D", "5", "-a", "x"}, ExitUsage, "-D runs one message size, not -a"},
		{"-D and its margin on a latency test", []string{"write-lat", "-D", "2", "-f", "1", "x"}, ExitUsage, "-D 2s must be more than twice the margin (-f 1s)"},
		{"-D 0", []string{"write-bw", "-D", "0", "x"}, ExitUsage, "invalid -D 0s: want a positive number of seconds"},
		{"-D with -a", []string{"write-bw", "-D", "5", "-a", "x"}, ExitUsage, "-D runs one message size, not -a"},
		{"--run_infinitely with -e", []string{"send-bw", "--run_infinitely", "-e", "x"}, ExitUsage, "--run_infinitely works without -e"},
		{"-D and its margin", []string{"read-bw", "-D", "4", "-f", "2", "x"}, ExitUsage, "-D 4s must be more than twice the margin (-f 2s)"},
		{"--run_infinitely on a latency test", []string{"send-lat", "--run_infinitely", "x"}, ExitUsage, "perftest's --run_infinitely applies to the bandwidth tests only"},
		{"perftest -q on a latency test", []string{"write-lat", "-q", "2", "x"}, ExitUsage,
			"tbrdma: unknown shorthand flag: 'q' in -q\nperftest's -q/--qp (several QPs) applies to the bandwidth tests only (write-bw, read-bw, send-bw), as in perftest, whose latency tests refuse it\n"},
		{"--qp on a latency test", []string{"send-lat", "--qp=2", "x"}, ExitUsage, "perftest's -q/--qp (several QPs) applies to the bandwidth tests only"},
		{"-q 0", []string{"write-bw", "-q", "0", "x"}, ExitUsage, "invalid -q 0: 1..1024"},
		{"-q with -R", []string{"read-bw", "-q", "2", "-R", "x"}, ExitUsage, "-q 2 works with the TCP exchange only, not with -R"},
		{"-q buffer", []string{"send-bw", "-q", "1024", "-a", "x"}, ExitUsage, "-q 1024 with -a needs a 16384 MiB buffer"},
		{"help", []string{"pingpong", "--help"}, ExitOK, ""},
		{"peer failed", []string{"pingpong", "-p", "1", "--bind", "127.0.0.1", "127.0.0.1"}, ExitFailed, "couldn't connect to 127.0.0.1:1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, _, errOut := testFactory()
			if got := run(context.Background(), f, c.args); got != c.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", got, c.code, errOut)
			}
			if !strings.Contains(errOut.String(), c.want) {
				t.Errorf("stderr %q lacks %q", errOut, c.want)
			}
		})
	}
}

func TestInterruptedExitCode(t *testing.T) {
	f, _, _ := testFactory()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	a := loopbackAddr()
	if got := run(ctx, f, []string{"pingpong", "-p", "0", "--bind", a.String()}); got != ExitInterrupted {
		t.Fatalf("exit code %d, want %d", got, ExitInterrupted)
	}
}

// parse runs a command's flag parsing and returns the options it built.
func parsePingpong(t *testing.T, f *Factory, args ...string) *pingpongOptions {
	t.Helper()
	var got *pingpongOptions
	cmd := newCmdPingpong(f, func(o *pingpongOptions) error { got = o; return nil })
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return got
}

func parsePerftest(t *testing.T, f *Factory, k *perftestKind, args ...string) *perftestOptions {
	t.Helper()
	var got *perftestOptions
	cmd := newCmdPerftest(f, k, func(o *perftestOptions) error { got = o; return nil })
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return got
}

// startServer runs the one-test server so until ctx ends and returns its
// TCP port and the channel its result arrives on; it fails the test if the
// server ends before it listens.
func startServer(t *testing.T, ctx context.Context, so *perftestOptions) (port int, serr <-chan error) {
	t.Helper()
	portc := make(chan int, 1)
	errc := make(chan error, 1)
	so.Listening = func(a net.Addr) { portc <- a.(*net.TCPAddr).Port }
	go func() { errc <- runPerftest(ctx, so) }()
	select {
	case port = <-portc:
	case err := <-errc:
		t.Fatalf("server: %v", err)
	}
	return port, errc
}

// pair runs a server and a client; startClient gets the server's TCP port.
func pair(t *testing.T, server func(listening func(net.Addr)) error, client func(port int) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	portc := make(chan int, 1)
	var wg sync.WaitGroup
	var serr, cerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		serr = server(func(a net.Addr) { portc <- a.(*net.TCPAddr).Port })
	}()
	select {
	case port := <-portc:
		cerr = client(port)
	case <-ctx.Done():
		t.Fatal("server did not listen")
	}
	wg.Wait()
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v; client: %v", serr, cerr)
	}
}

var (
	localRE  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.79\.\d+\.\d+$`)
	remoteRE = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.79\.\d+\.\d+$`)
)

func TestPingpongLoopback(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"64B", []string{"-n", "20", "-s", "64"}},
		{"8KiB-above-MTU", []string{"-n", "20", "-s", "8192", "-m", "1024", "-c"}},
		{"events-small-rxdepth", []string{"-n", "50", "-s", "1", "-r", "3", "-e"}},
		{"zero-size", []string{"-n", "5", "-s", "0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := loopbackAddr(), loopbackAddr()
			sf, sout, serr := testFactory()
			cf, cout, cerr := testFactory()
			so := parsePingpong(t, sf, append([]string{"--bind", sa.String(), "-p", "0"}, c.args...)...)
			pair(t, func(l func(net.Addr)) error {
				so.Listening = l
				return runPingpong(context.Background(), so)
			}, func(port int) error {
				co := parsePingpong(t, cf, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, c.args...)...)
				return runPingpong(context.Background(), co)
			})
			iters := so.Iters
			for side, out := range map[string]string{"server": sout.String(), "client": cout.String()} {
				if !localRE.MatchString(out) || !remoteRE.MatchString(out) {
					t.Errorf("%s: address lines missing:\n%s", side, out)
				}
				want := regexp.MustCompile(`(?m)^` + itoa(so.Size*iters*2) + ` bytes in \d+\.\d\d seconds = [\d.]+ Mbit/sec\n` +
					itoa(iters) + ` iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter\n`)
				if !want.MatchString(out) {
					t.Errorf("%s: result lines missing:\n%s", side, out)
				}
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s: %s", side, out)
				}
			}
			if serr.Len() > 0 || cerr.Len() > 0 {
				t.Errorf("stderr: server %q, client %q", serr, cerr)
			}
		})
	}
}

func TestPerftestLoopback(t *testing.T) {
	for _, c := range []struct {
		kind *perftestKind
		args []string
		row  *regexp.Regexp
	}{
		{readLatTest, []string{"-n", "20", "-s", "64"}, regexp.MustCompile(`(?m)^ 64      20          [\d.]+ `)},
		{readLatTest, []string{"-n", "10", "-s", "10000", "-m", "1024"}, regexp.MustCompile(`(?m)^ 10000   10          [\d.]+ `)},
		// -e: both receive loops wait in the kernel (SetKernelWait), in one process
		{readLatTest, []string{"-n", "500", "-s", "64", "-e"}, regexp.MustCompile(`(?m)^ 64      500 +[\d.]+ `)},
		{writeBWTest, []string{"-n", "300", "-s", "65536", "-e"}, regexp.MustCompile(`(?m)^ 65536      300              [\d.]+ +[\d.]+ *\t\t   [\d.]+$`)},
		{atomicLatTest, []string{"-n", "20"}, regexp.MustCompile(`(?m)^ 8       20          [\d.]+ `)},
		{atomicLatTest, []string{"-n", "20", "-A", "CMP_AND_SWAP"}, regexp.MustCompile(`(?m)^ 8       20          [\d.]+ `)},
		{writeBWTest, []string{"-n", "50", "-s", "65536"}, regexp.MustCompile(`(?m)^ 65536      50               [\d.]+ +[\d.]+ *\t\t   [\d.]+$`)},
		{writeBWTest, []string{"-n", "300", "-s", "100"}, regexp.MustCompile(`(?m)^ 100        300              [\d.]+ +[\d.]+ *\t\t   [\d.]+$`)},
	} {
		t.Run(c.kind.name+"/"+strings.Join(c.args, ""), func(t *testing.T) {
			sa, ca := loopbackAddr(), loopbackAddr()
			sf, sout, serr := testFactory()
			cf, cout, cerr := testFactory()
			so := parsePerftest(t, sf, c.kind, append([]string{"--bind", sa.String(), "-p", "0"}, c.args...)...)
			var sbuf, cbuf []byte
			so.Inspect = func(b []byte) { sbuf = b }
			pair(t, func(l func(net.Addr)) error {
				so.Listening = l
				return runPerftest(context.Background(), so)
			}, func(port int) error {
				co := parsePerftest(t, cf, c.kind, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, c.args...)...)
				co.Inspect = func(b []byte) { cbuf = b }
				return runPerftest(context.Background(), co)
			})
			if !c.row.MatchString(cout.String()) {
				t.Errorf("client: no result row %v:\n%s", c.row, cout)
			}
			if c.kind.bw && !c.row.MatchString(sout.String()) {
				t.Errorf("server: no result row %v:\n%s", c.row, sout)
			}
			for _, out := range []string{sout.String(), cout.String()} {
				if !strings.Contains(out, " local address: LID 0000 QPN 0x") || !strings.Contains(out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:79:") {
					t.Errorf("address lines missing:\n%s", out)
				}
			}
			if c.kind != atomicLatTest && (serr.Len() > 0 || cerr.Len() > 0) {
				t.Errorf("stderr: server %q, client %q", serr, cerr)
			}
			if c.kind == atomicLatTest && !strings.Contains(cerr.String(), "results checked") {
				t.Errorf("atomic results not checked: %q", cerr)
			}
			if c.kind == readLatTest && (!bytes.Equal(sbuf[:so.Size], cbuf[:so.Size]) || sbuf[0] == 0) {
				t.Errorf("READ data differs: read % x, served % x", cbuf[:8], sbuf[:8])
			}
			if c.kind == atomicLatTest && so.AtomicType == "FETCH_AND_ADD" && !strings.Contains(serr.String(), "as expected") {
				t.Errorf("server did not check the atomics' result: %q", serr)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestPingpongResultLines checks the result lines against ibv_rc_pingpong's
// output for the same elapsed time (testdata/rxe/rc_pingpong.client.txt).
func TestPingpongResultLines(t *testing.T) {
	var b bytes.Buffer
	printPingpongResult(&b, 4096, 5, 34838*time.Microsecond)
	want := "40960 bytes in 0.03 seconds = 9.41 Mbit/sec\n5 iters in 0.03 seconds = 6967.60 usec/iter\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestPingpongServerWithoutBind checks that a server without --bind listens
// on every address and opens its device on the address the client reached.
func TestPingpongServerWithoutBind(t *testing.T) {
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, sout, _ := testFactory()
	cf, _, _ := testFactory()
	so := parsePingpong(t, sf, "-p", "0", "-n", "5", "-s", "100")
	pair(t, func(l func(net.Addr)) error {
		so.Listening = l
		return runPingpong(context.Background(), so)
	}, func(port int) error {
		co := parsePingpong(t, cf, "--bind", ca.String(), "-p", itoa(port), "-n", "5", "-s", "100", sa.String())
		return runPingpong(context.Background(), co)
	})
	if want := "GID ::ffff:" + sa.String() + "\n"; !strings.Contains(sout.String(), "local address:  LID 0x0000, QPN 0x000011, PSN") || !strings.Contains(sout.String(), want) {
		t.Errorf("server output lacks its local address %s:\n%s", sa, sout)
	}
}

func TestExchangeTimeoutHint(t *testing.T) {
	peer := &net.TCPAddr{IP: net.ParseIP("198.18.10.2"), Port: 18515}
	timedOut := fmt.Errorf("version exchange: %w", &net.OpError{Op: "read", Net: "tcp", Addr: peer, Err: os.NewSyscallError("read", syscall.ETIMEDOUT)})
	if h := exchangeTimeoutHint(timedOut); !strings.Contains(h, "peer 198.18.10.2 stopped answering") {
		t.Errorf("timed-out exchange: hint %q", h)
	}
	reset := fmt.Errorf("version exchange: %w", &net.OpError{Op: "read", Net: "tcp", Addr: peer, Err: os.NewSyscallError("read", syscall.ECONNRESET)})
	for _, err := range []error{reset, errors.New("connection timed out"), syscall.ETIMEDOUT} {
		if h := exchangeTimeoutHint(err); h != "" {
			t.Errorf("%v: hint %q, want none", err, h)
		}
	}
}
