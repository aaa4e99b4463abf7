package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/verbs"
)

// waitServeLog waits until serve's stderr (stop's third result, read
// without stopping through errOf) holds want.
func waitServeLog(t *testing.T, errOf func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errOf(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("serve's stderr never said %q:\n%s", want, errOf())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startServeLog is startServe that also returns a reader of serve's
// stderr so far.
func startServeLog(t *testing.T, addr netip.Addr, args ...string) (stop func() (int, string, string), errOf func() string) {
	t.Helper()
	out, errOut := newLockedBuffer("\x00"), newLockedBuffer("listening on")
	f := &Factory{IO: &ui.IO{In: new(bytes.Buffer), Out: out, ErrOut: errOut}, Now: time.Now}
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) { return openDevice(a, nil) }
	ctx, cancel := context.WithCancel(context.Background())
	codec := make(chan int, 1)
	go func() { codec <- run(ctx, f, append([]string{"serve", "--bind", addr.String()}, args...)) }()
	var once sync.Once
	var code int
	stop = func() (int, string, string) {
		once.Do(func() {
			cancel()
			select {
			case code = <-codec:
			case <-time.After(20 * time.Second):
				t.Errorf("serve did not stop:\n%s", errOut)
			}
		})
		return code, out.String(), errOut.String()
	}
	t.Cleanup(func() { stop() })
	return stop, errOut.String
}

// TestServeHostsTests runs tbrdma clients of pingpong and of the perftest
// family, one after the other, against one "tbrdma serve": each must
// succeed with its own parameters (sizes above the server commands'
// defaults, which a server that ignored the hint would fail on), clients
// that abort or send no hint must not stop serve, and serve must still
// answer ping afterwards.
func TestServeHostsTests(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	stop, errOf := startServeLog(t, sa)
	waitServeLog(t, errOf, "port 18515 (TCP, pingpong and perftest clients)")

	client := func(args ...string) string {
		t.Helper()
		f, out, errOut := testFactory()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		args = append(args, "--bind", ca.String(), sa.String())
		start := time.Now()
		code := run(ctx, f, args)
		t.Logf("tbrdma %s: exit %d after %v", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
		if code != ExitOK {
			t.Fatalf("tbrdma %s: exit %d\nstdout:\n%s\nstderr:\n%s\nserve:\n%s", strings.Join(args, " "), code, out, errOut, errOf())
		}
		return out.String()
	}
	check := func(out string, re *regexp.Regexp) {
		t.Helper()
		if !re.MatchString(out) {
			t.Errorf("output lacks %v:\n%s", re, out)
		}
	}

	// 8192-byte messages: serve's default receive (4096) would fail.
	out := client("pingpong", "-n", "50", "-s", "8192", "-m", "2048")
	check(out, regexp.MustCompile(`(?m)^819200 bytes in \d+\.\d\d seconds = .* Mbit/sec\n50 iters in `))
	out = client("write-bw", "-n", "200", "-s", "16384")
	check(out, bwRow(16384, 200, false))
	out = client("read-lat", "-n", "100", "-s", "64")
	check(out, latRow(64, 100))
	// send-bw's server posts receives of the client's size: 65536 here,
	// over the 2-byte default of a server without the hint.
	out = client("send-bw", "-n", "100", "-s", "65536")
	check(out, bwRow(65536, 100, false))
	out = client("atomic-lat", "-n", "120")
	check(out, latRow(8, 120))
	if !raceEnabled { // write-lat polls memory the engine writes: a data race by design, as in perftest
		out = client("write-lat", "-n", "100", "-s", "32")
		check(out, latRow(32, 100))
	}
	out = client("send-lat", "-n", "100", "-s", "512")
	check(out, latRow(512, 100))
	// -a: every size from 2 to 2^23, the server's buffer sized for them.
	out = client("read-bw", "-a", "-n", "5")
	for _, size := range allSizes() {
		check(out, bwRow(size, 5, false))
	}
	// -q: the session runs as many QPs as the client (its hint says).
	out = client("write-bw", "-q", "4", "-n", "50", "-s", "16384")
	check(out, bwRow(16384, 4*50, false))
	out = client("send-bw", "-q", "3", "-n", "40", "-s", "8192")
	check(out, bwRow(8192, 3*40, false))
	// perftest_report.go's flags are the client's own: serve runs its
	// default side (its send-lat posts inline up to perftest's 236 bytes).
	out = client("send-bw", "-l", "10", "-I", "128", "-n", "100", "-s", "128")
	check(out, bwRow(128, 100, false))
	out = client("send-lat", "-H", "-I", "0", "-n", "50", "-s", "200")
	check(out, regexp.MustCompile(`(?m)^#, usec\n(\d+, [\d.e+-]+\n){47}-{87}\n`))
	check(out, latRow(200, 50))
	waitServeLog(t, errOf, "write-bw: 16384 bytes, 50 iterations on each of 4 QPs")
	// The server side counted the client's 120 FETCH_AND_ADDs.
	waitServeLog(t, errOf, "the peer's 120 FETCH_AND_ADD left 120 in the target, as expected")

	// A client that stops after the hint, one without a hint (a stock
	// perftest), one that sends garbage: each a line on serve's stderr.
	dialServe := func() net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(ca, 0))}
		c, err := d.Dial("tcp", netip.AddrPortFrom(sa, 18515).String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	version := func(offer bool) []byte {
		b := make([]byte, 16)
		copy(b, "6.06")
		if offer {
			copy(b[14:], "tq")
		}
		return b
	}
	{
		c := dialServe()
		c.Write(version(true))
		in := make([]byte, 16)
		if _, err := io.ReadFull(c, in); err != nil {
			t.Fatalf("serve's version answer: %v", err)
		}
		if string(in[14:]) != "th" {
			t.Errorf("serve's version answer %q does not ask for the hint", in)
		}
		h := "tbtest=write-bw s=4096 n=1000 a=0 t=128 Q=100 r=0 o=0 A=FETCH_AND_ADD"
		c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(h))), h...))
		c.Close() // before the system data exchange
	}
	waitServeLog(t, errOf, ca.String()+": write-bw failed: system data exchange")
	t.Log("aborted after the hint: serve says so")
	{
		c := dialServe()
		c.Write(version(false))
		io.Copy(io.Discard, c) // serve answers, then closes
		c.Close()
	}
	waitServeLog(t, errOf, "a client without tbrdma's test hint (a stock perftest 6.06?)")
	t.Log("no hint: serve says so")
	{
		c := dialServe()
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		io.Copy(io.Discard, c)
		c.Close()
	}
	waitServeLog(t, errOf, `perftest failed: version exchange: peer sent "GET / HTTP/1.1\r\n", not a perftest version`)
	// A client interrupted in the middle of its run (its QP goes away
	// with it).
	{
		f, _, _ := testFactory()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, f, []string{"read-lat", "-n", "1000000", "--bind", ca.String(), sa.String()})
		}()
		waitServeLog(t, errOf, "read-lat: 2 bytes, 1000000 iterations")
		cancel()
		if code := <-done; code != ExitInterrupted {
			t.Errorf("interrupted read-lat: exit %d, want %d", code, ExitInterrupted)
		}
		waitServeLog(t, errOf, ca.String()+": read-lat failed")
		t.Log("interrupted read-lat: serve says so")
	}

	// serve still answers, tests and ping alike.
	out = client("write-bw", "-n", "100", "-s", "4096")
	check(out, bwRow(4096, 100, false))
	out = client("ping", "-c", "2", "-i", "0.01")
	check(out, regexp.MustCompile(`2 packets transmitted, 2 received, 0% packet loss`))

	code, _, serr := stop()
	t.Logf("serve's stderr:\n%s", serr)
	if code != ExitOK {
		t.Errorf("serve exit %d after SIGINT:\n%s", code, serr)
	}
	for _, want := range []string{"pingpong: 8192 bytes, 50 iterations", "pingpong done",
		"write-bw: 16384 bytes, 200 iterations", "write-bw done", "send-bw: 65536 bytes, 100 iterations",
		"atomic-lat done", "send-lat done", "read-lat done"} {
		if !strings.Contains(serr, want) {
			t.Errorf("serve's stderr lacks %q:\n%s", want, serr)
		}
	}
}

// TestServeHint checks the hint's round trip and that malformed hints
// are refused with a reason.
func TestServeHint(t *testing.T) {
	f, _, _ := testFactory()
	o := parsePerftest(t, f, sendBWTest, "-s", "300", "-n", "77", "-t", "16", "-r", "64", "peer")
	got, err := perftestFromHint(o.hint())
	if err != nil {
		t.Fatalf("%s: %v", o.hint(), err)
	}
	if got.Kind != sendBWTest || got.Size != 300 || got.Iters != 77 || got.TxDepth != 16 || got.RxDepth != 64 || got.CQMod != o.CQMod || got.QPs != 1 {
		t.Errorf("%s: got %+v", o.hint(), got)
	}
	o = parsePerftest(t, f, writeBWTest, "-q", "6", "peer")
	if got, err := perftestFromHint(o.hint()); err != nil || got.QPs != 6 {
		t.Errorf("%s: %+v, %v", o.hint(), got, err)
	}
	// A hint without q, a tbrdma client from before -q: one QP.
	if got, err := perftestFromHint("tbtest=write-bw s=1 n=5 a=0 t=1 Q=1 r=0 o=0"); err != nil || got.QPs != 1 {
		t.Errorf("hint without q: %+v, %v", got, err)
	}
	p := parsePingpong(t, f, "-s", "100", "-n", "9", "-m", "4096", "-c", "peer")
	pp, err := pingpongFromHint(p.hint())
	if err != nil || pp.Size != 100 || pp.Iters != 9 || pp.MTU != 4096 || !pp.Chk {
		t.Errorf("%s: %+v, %v", p.hint(), pp, err)
	}
	for _, h := range []string{"", "tbtest=", "tbtest=nope s=1", "write-bw s=1",
		"tbtest=write-bw s=1 n=5 a=0 t=1 Q=1 r=0 o=0 s=2", "tbtest=write-bw s=-1 n=5 a=0 t=1 Q=1 r=0 o=0",
		"tbtest=write-bw n=5 a=0 t=1 Q=1 r=0 o=0", "tbtest=atomic-lat s=16 n=5 a=0 t=1 Q=1 r=0 o=1",
		"tbtest=write-bw s=1 n=5 a=0 t=1 Q=1 r=0 o=0 junk", "tbtest=write-bw s=99999999999999999999 n=5 a=0 t=1 Q=1 r=0 o=0",
		"tbtest=write-bw s=1 n=5 a=0 t=1 Q=1 r=0 o=0 q=0", "tbtest=write-bw s=1 n=5 a=0 t=1 Q=1 r=0 o=0 q=1025",
		"tbtest=read-lat s=1 n=5 a=0 t=1 Q=0 r=0 o=1 q=2", "tbtest=write-bw s=1073741824 n=5 a=0 t=1 Q=1 r=0 o=0 q=2"} {
		if _, err := perftestFromHint(h); err == nil {
			t.Errorf("perftestFromHint(%q): no error", h)
		}
	}
	for _, h := range []string{"tbtest=write-bw s=1", "tbtest=pingpong s=1 n=1 m=1000 c=0", "tbtest=pingpong s=1 n=1 m=1024 c=0 ud=1"} {
		if _, err := pingpongFromHint(h); err == nil {
			t.Errorf("pingpongFromHint(%q): no error", h)
		}
	}
	if o, err := pingpongFromHint(""); err != nil || o.Size != 4096 || o.Iters != 1000 {
		t.Errorf("pingpong without a hint: %+v, %v", o, err)
	}
}

// A client with --large-segments gets them through serve as from a
// dedicated server (the agreement note, packets far above 4096 bytes, the
// bytes READ are serve's pattern); a client without them on the same serve
// keeps the path MTU.
func TestServeLargeSegments(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	_, errOf := startServeLog(t, sa)
	waitServeLog(t, errOf, "port 18515 (TCP, pingpong and perftest clients)")
	const size = 200000
	client := func(args ...string) (buf []byte, stderr string, stats transport.Stats) {
		t.Helper()
		f, _, errOut := testFactory()
		var ctx *verbs.Context
		open := f.OpenDevice
		f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) {
			c, err := open(a)
			ctx = c
			return c, err
		}
		o := parsePerftest(t, f, readBWTest, append(args, "-s", itoa(size), "-n", "20", "--bind", ca.String(), sa.String())...)
		o.Inspect = func(b []byte) { buf = bytes.Clone(b) }
		if err := runPerftest(context.Background(), o); err != nil {
			t.Fatalf("read-bw %v through serve: %v\nstderr:\n%s\nserve:\n%s", args, err, errOut, errOf())
		}
		return buf, errOut.String(), ctx.TransportStats()
	}
	checkData := func(buf []byte) {
		t.Helper()
		for i := range size {
			if buf[i] != byte(i%251+1) {
				t.Fatalf("byte %d READ is %d, want serve's pattern %d", i, buf[i], byte(i%251+1))
			}
		}
	}

	buf, cerr, st := client("--large-segments")
	if !strings.Contains(cerr, "large segments: 61440-byte packets, agreed with the peer") {
		t.Fatalf("client's stderr lacks the agreement note:\n%s", cerr)
	}
	checkData(buf)
	if st.PacketsIn == 0 || st.BytesIn/st.PacketsIn < 8192 {
		t.Fatalf("client received %d bytes in %d packets: segments were not large", st.BytesIn, st.PacketsIn)
	}

	buf, cerr, st = client()
	if strings.Contains(cerr, "large segments") {
		t.Fatalf("a client without --large-segments mentions them:\n%s", cerr)
	}
	checkData(buf)
	if st.PacketsIn == 0 || st.BytesIn/st.PacketsIn > 4096+64 {
		t.Fatalf("client without --large-segments received %d bytes in %d packets: larger than the path MTU", st.BytesIn, st.PacketsIn)
	}
}

// A pingpong --ud client, which serve does not host, is refused at once
// with serve's reason on both ends (not left to time out on its SENDs);
// a plain pingpong client right after is served.
func TestServeRefusesUDPingpong(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	_, errOf := startServeLog(t, sa)
	waitServeLog(t, errOf, "port 18515 (TCP, pingpong and perftest clients)")
	f, _, errOut := testFactory()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	code := run(ctx, f, []string{"pingpong", "--ud", "-n", "5", "--bind", ca.String(), sa.String()})
	took := time.Since(start)
	const why = `tbrdma serve does not host pingpong --ud: on the server's machine run "tbrdma pingpong --ud -p 18516"`
	if code == ExitOK || !strings.Contains(errOut.String(), "the server refused the test: "+why) {
		t.Fatalf("pingpong --ud through serve: exit %d after %v, stderr:\n%s", code, took, errOut)
	}
	if strings.Contains(errOut.String(), "stopped answering") {
		t.Fatalf("the client waited for its SENDs instead of reading the refusal:\n%s", errOut)
	}
	waitServeLog(t, errOf, "refused client "+ca.String()+": "+why)

	f, out, errOut := testFactory()
	if code := run(ctx, f, []string{"pingpong", "-n", "5", "--bind", ca.String(), sa.String()}); code != ExitOK {
		t.Fatalf("pingpong after the refusal: exit %d\n%s\n%s", code, out, errOut)
	}
}
