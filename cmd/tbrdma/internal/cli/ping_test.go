package cli

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/verbs"
)

// rdmaAddr returns a random loopback address in 127.80-99.x.y whose UDP
// port 4791 is free: ping and serve keep rdma_cm's port 7174, so each test
// needs addresses of its own, and tests of other packages (and other runs)
// pick random loopback addresses too.
func rdmaAddr(t *testing.T) netip.Addr {
	t.Helper()
	for range 50 {
		a := netip.AddrFrom4([4]byte{127, byte(80 + rand.IntN(20)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 4791)))
		if err == nil {
			c.Close()
			return a
		}
	}
	t.Fatal("no free loopback address")
	return netip.Addr{}
}

// silentAddr is a loopback address (rdmaAddr) whose UDP 4791 is held by a
// socket that reads and drops every datagram until the test ends: a peer
// that never answers, not even with the ICMP port unreachable that an
// address with nothing on the port gives (which ends a connection at
// once).
func silentAddr(t *testing.T) netip.Addr {
	t.Helper()
	a := rdmaAddr(t)
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 4791)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 9000)
		for {
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return a
}

// lockedBuffer is a buffer written by several goroutines; ready is closed
// once it holds mark.
type lockedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	mark  string
	ready chan struct{}
}

func newLockedBuffer(mark string) *lockedBuffer {
	return &lockedBuffer{mark: mark, ready: make(chan struct{})}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	had := strings.Contains(l.b.String(), l.mark)
	n, err := l.b.Write(p)
	if !had && strings.Contains(l.b.String(), l.mark) {
		close(l.ready)
	}
	return n, err
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe runs "tbrdma serve --bind addr args..." through run, as main
// does; stop cancels it (as SIGINT would) and returns its exit code and
// output.
func startServe(t *testing.T, addr netip.Addr, args ...string) (stop func() (code int, stdout, stderr string)) {
	t.Helper()
	out, errOut := newLockedBuffer("\x00"), newLockedBuffer("listening on")
	f := &Factory{IO: &ui.IO{In: new(bytes.Buffer), Out: out, ErrOut: errOut}, Now: time.Now}
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) { return openDevice(a, nil) }
	ctx, cancel := context.WithCancel(context.Background())
	codec := make(chan int, 1)
	go func() { codec <- run(ctx, f, append([]string{"serve", "--bind", addr.String()}, args...)) }()
	select {
	case <-errOut.ready:
	case code := <-codec:
		cancel()
		t.Fatalf("serve exited %d:\n%s", code, errOut)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("serve did not listen:\n%s", errOut)
	}
	var once sync.Once
	var code int
	stop = func() (int, string, string) {
		once.Do(func() {
			cancel()
			select {
			case code = <-codec:
			case <-time.After(10 * time.Second):
				t.Fatalf("serve did not stop:\n%s", errOut)
			}
		})
		return code, out.String(), errOut.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}

func TestPingServeLoopback(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	stop := startServe(t, sa, "-v")
	f, out, errOut := testFactory()
	code := run(context.Background(), f, []string{"ping", "-c", "5", "-i", "0.01", "--bind", ca.String(), sa.String()})
	if code != ExitOK {
		t.Fatalf("ping exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	s := regexp.QuoteMeta(sa.String())
	want := `^PING ` + s + ` \(` + s + `\) 64 bytes of data over RDMA \(rdma_cm port 7174\)\.\n`
	for seq := 1; seq <= 5; seq++ {
		want += `64 bytes from ` + s + `: seq=` + itoa(seq) + ` time=\d+(\.\d+)? ms\n`
	}
	want += `\n--- ` + s + ` rdma ping statistics ---\n` +
		`5 packets transmitted, 5 received, 0% packet loss, time \d+ms\n` +
		`rtt min/avg/max/mdev = \d+\.\d{3}/\d+\.\d{3}/\d+\.\d{3}/\d+\.\d{3} ms\n$`
	if !regexp.MustCompile(want).MatchString(out.String()) {
		t.Errorf("ping output does not match\n%s\ngot:\n%s", want, out)
	}
	if errOut.Len() > 0 {
		t.Errorf("ping stderr: %s", errOut)
	}

	code, sout, serr := stop()
	if code != ExitOK {
		t.Errorf("serve exit %d, want 0 after SIGINT:\n%s", code, serr)
	}
	for _, re := range []string{
		`(?m)^tbrdma serve: listening on ` + s + ` port 7174 \(rdma_cm, RDMA_PS_TCP\)$`,
		`(?m)^tbrdma serve: ` + regexp.QuoteMeta(ca.String()) + ` port \d+ connected$`,
		`(?m)^tbrdma serve: ` + regexp.QuoteMeta(ca.String()) + ` port \d+ closed after 5 pings: peer disconnected$`,
	} {
		if !regexp.MustCompile(re).MatchString(serr) {
			t.Errorf("serve stderr lacks %s:\n%s", re, serr)
		}
	}
	if n := strings.Count(sout, "server ping data: rdma-ping-"); n != 5 || !strings.HasPrefix(sout, "server ping data: rdma-ping-0: ABCDEF") {
		t.Errorf("serve -v output:\n%s", sout)
	}
}

// TestPingQuietDeadline runs ping(8)'s -q -w against serve: the run ends at
// the deadline with no reply lines, only the PING line and the summary; with
// -c more than the deadline allows, the exit status is 1 as ping(8)'s.
func TestPingQuietDeadline(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	startServe(t, sa)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"-q", "-w", "1", "-i", "0.1"}, ExitOK},
		{[]string{"-q", "-n", "-w", "0.5", "-i", "0.1", "-c", "1000"}, ExitFailed},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f, out, errOut := testFactory()
			start := time.Now()
			code := run(context.Background(), f, append(append([]string{"ping"}, c.args...), "--bind", ca.String(), sa.String()))
			took := time.Since(start)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errOut)
			}
			if took > 10*time.Second {
				t.Errorf("ping -w ran %v", took)
			}
			s := out.String()
			if strings.Contains(s, "bytes from") || !strings.HasPrefix(s, "PING ") || !strings.Contains(s, "rdma ping statistics") {
				t.Errorf("-q output: want only the PING line and the summary, got:\n%s", s)
			}
			m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(s)
			if m == nil || m[2] == "0" {
				t.Errorf("summary: want some replies received before the deadline:\n%s", s)
			}
		})
	}
}

// TestPingInterrupted checks ping(8)'s behaviour on Ctrl-C: the summary,
// and exit 0 since replies came; the server disconnects a peer that stays.
func TestPingInterrupted(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	stop := startServe(t, sa)
	f, _, errOut := testFactory()
	out := newLockedBuffer("seq=3 ")
	f.IO.Out = out
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	codec := make(chan int, 1)
	go func() {
		codec <- run(ctx, f, []string{"ping", "-i", "0.01", "-s", "4096", "--bind", ca.String(), sa.String()})
	}()
	select {
	case <-out.ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("no third reply:\n%s\n%s", out, errOut)
	}
	cancel()
	if code := <-codec; code != ExitOK {
		t.Fatalf("exit %d, want 0:\n%s\n%s", code, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^\d+ packets transmitted, \d+ received, .*\nrtt min/avg/max/mdev = `).MatchString(out.String()) {
		t.Errorf("no summary:\n%s", out)
	}
	if _, _, serr := stop(); !strings.Contains(serr, "closed after") {
		t.Errorf("serve stderr:\n%s", serr)
	}
}

func TestPingNoListener(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	startServe(t, sa, "-p", "7175")
	f, out, errOut := testFactory()
	code := run(context.Background(), f, []string{"ping", "-c", "2", "-W", "5", "--bind", ca.String(), sa.String()})
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitFailed, out, errOut)
	}
	want := "tbrdma: no rdma_cm listener on " + sa.String() + " port 7174 (rejected: invalid service ID) — is `rping -s` or `tbrdma serve` running there?\n"
	if errOut.String() != want {
		t.Errorf("stderr %q\nwant   %q", errOut, want)
	}
	if !strings.HasPrefix(out.String(), "PING "+sa.String()) || strings.Contains(out.String(), "bytes from") {
		t.Errorf("stdout:\n%s", out)
	}
}

func TestPingNoAnswer(t *testing.T) {
	sa, ca := silentAddr(t), rdmaAddr(t)
	f, out, errOut := testFactory()
	code := run(context.Background(), f, []string{"ping", "-W", "0.3", "--bind", ca.String(), sa.String()})
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitFailed, out, errOut)
	}
	if want := "tbrdma: no answer from " + sa.String() + " port 7174 within 300ms"; !strings.HasPrefix(errOut.String(), want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
}

// TestPingNoDevice: nothing on the peer's UDP 4791, so its kernel answers
// the REQ with ICMP port unreachable, which ends the connection at once
// (Linux): -W 30 is not waited for, and the message says what to start.
func TestPingNoDevice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ICMP errors reach an unconnected UDP socket on Linux only (IP_RECVERR)")
	}
	sa, ca := rdmaAddr(t), rdmaAddr(t) // nothing on sa
	f, out, errOut := testFactory()
	code := run(context.Background(), f, []string{"ping", "-W", "30", "--bind", ca.String(), sa.String()})
	want := "tbrdma: " + sa.String() + " answered ICMP port unreachable for UDP 4791: no RoCE device listens there; start `tbrdma serve` (or `rping -s`) on it\n"
	if code != ExitFailed || errOut.String() != want {
		t.Errorf("exit %d, stderr %q\nwant %q\n%s", code, errOut, want, out)
	}
}

func TestPingServeUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ping"}, "ping needs one peer address"},
		{[]string{"ping", "a", "b"}, "ping needs one peer address"},
		{[]string{"ping", "-s", "25", "x"}, "invalid -s 25: want 26..65535"},
		{[]string{"ping", "-s", "65536", "x"}, "invalid -s 65536"},
		{[]string{"ping", "-W", "0", "x"}, "invalid -W 0"},
		{[]string{"ping", "-i", "-1", "x"}, `invalid argument "-1" for "-i, --interval"`},
		{[]string{"ping", "-c", "-1", "x"}, "invalid -c -1"},
		{[]string{"ping", "-p", "0", "x"}, "invalid -p 0"},
		{[]string{"ping", "--bind", "nope", "x"}, `invalid --bind "nope"`},
		{[]string{"ping", "-w", "-1", "x"}, `invalid argument "-1" for "-w, --deadline"`},
		{[]string{"ping", "-t", "3", "x"}, "ping(8)'s -t TTL does not apply"},
		{[]string{"ping", "--count", "x", "y"}, "invalid argument"},
		{[]string{"serve", "x"}, "too many arguments"},
		{[]string{"serve", "-p", "70000"}, "invalid -p 70000"},
		{[]string{"serve", "--max-conns", "0"}, "invalid --max-conns 0"},
		{[]string{"serve", "--nope"}, "unknown flag: --nope"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f, _, errOut := testFactory()
			if code := run(context.Background(), f, c.args); code != ExitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, ExitUsage, errOut)
			}
			if !strings.Contains(errOut.String(), c.want) || !strings.Contains(errOut.String(), "Usage:") {
				t.Errorf("stderr lacks %q and usage:\n%s", c.want, errOut)
			}
		})
	}
}

// TestPingSummary checks the summary against ping(8)'s arithmetic: rtts of
// 1, 2, 3 and 6 ms give avg 3, mdev sqrt(50/4 − 9) = 1.871.
func TestPingSummary(t *testing.T) {
	var st pingStats
	st.transmitted = 6
	st.errors = 1
	for _, ms := range []int{1, 2, 3, 6} {
		st.add(time.Duration(ms) * time.Millisecond)
	}
	pio, b, _ := ui.Test() // not a terminal: the styles are stripped
	st.print(pio.StyledOut(), pio.Styles(), "peer", 5012*time.Millisecond)
	want := "\n--- peer rdma ping statistics ---\n" +
		"6 packets transmitted, 4 received, +1 errors, 33.3333% packet loss, time 5012ms\n" +
		"rtt min/avg/max/mdev = 1.000/3.000/6.000/1.871 ms\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	// On a terminal the same text comes with color.
	pio.SetStdoutTTY(true)
	b.Reset()
	st.print(pio.StyledOut(), pio.Styles(), "peer", 5012*time.Millisecond)
	if !strings.Contains(b.String(), "\x1b[") || ansi.Strip(b.String()) != want {
		t.Errorf("on a terminal: %q", b.String())
	}
	pio.SetStdoutTTY(false)
	b.Reset()
	(&pingStats{transmitted: 2}).print(pio.StyledOut(), pio.Styles(), "p", 3*time.Millisecond)
	if want := "\n--- p rdma ping statistics ---\n2 packets transmitted, 0 received, 100% packet loss, time 3ms\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestPingTime(t *testing.T) {
	for us, want := range map[int64]string{52: "0.052", 999: "0.999", 1234: "1.23", 12345: "12.3", 123456: "123", 99960: "100"} {
		if got := pingTime(time.Duration(us) * time.Microsecond); got != want {
			t.Errorf("%dµs: %q, want %q", us, got, want)
		}
	}
}
