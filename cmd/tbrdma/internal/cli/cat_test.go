package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/stream"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"

	"github.com/spf13/cobra"
)

// runCatWith runs "tbrdma cat args..." as run does, letting tweak set the
// options' test hooks first.
func runCatWith(ctx context.Context, f *Factory, args []string, tweak func(*catOptions)) int {
	cmd := newCmdCat(f, func(o *catOptions) error {
		tweak(o)
		return runCat(ctx, o)
	})
	cmd.SetArgs(args)
	cmd.SetOut(f.IO.Out)
	cmd.SetErr(f.IO.ErrOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &FlagError{Err: err} })
	err := cmd.ExecuteContext(ctx)
	code := exitCode(err, ctx.Err() != nil)
	if err != nil {
		fmt.Fprintf(f.IO.ErrOut, "tbrdma: %v\n", err)
	}
	return code
}

type catResult struct {
	code   int
	stdout []byte
	stderr string
}

// startCatReceiver runs "tbrdma cat --bind addr args..." and returns once
// it listens; wait returns its result. out, if not nil, replaces stdout
// (the result's stdout is then empty).
func startCatReceiver(t *testing.T, addr netip.Addr, out io.Writer, args ...string) (wait func() catResult) {
	t.Helper()
	return startCatReceiverWith(t, addr, out, nil, args...)
}

// startCatReceiverWith is startCatReceiver with tweak (if not nil) applied
// to the options first.
func startCatReceiverWith(t *testing.T, addr netip.Addr, out io.Writer, tweak func(*catOptions), args ...string) (wait func() catResult) {
	t.Helper()
	f, stdout, errOut := testFactory()
	if out != nil {
		f.IO.Out = out
	}
	ready := make(chan struct{})
	done := make(chan catResult, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		code := runCatWith(ctx, f, append([]string{"--bind", addr.String()}, args...), func(o *catOptions) {
			o.ready = func([]netip.AddrPort) { close(ready) }
			o.findServe = nil // no serve of the machine's: catrelay_test.go has its own
			if tweak != nil {
				tweak(o)
			}
		})
		done <- catResult{code, stdout.Bytes(), errOut.String()}
	}()
	select {
	case <-ready:
	case r := <-done:
		cancel()
		t.Fatalf("receiver exited %d before listening:\n%s", r.code, r.stderr)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("receiver did not listen")
	}
	var res *catResult
	t.Cleanup(func() {
		cancel()
		if res == nil {
			<-done
		}
	})
	return func() catResult {
		if res == nil {
			select {
			case r := <-done:
				res = &r
			case <-time.After(30 * time.Second):
				t.Fatal("receiver did not finish")
			}
		}
		return *res
	}
}

// runCatSender runs the sender through run, as main does, with in as stdin.
func runCatSender(t *testing.T, in io.Reader, args ...string) catResult {
	t.Helper()
	f, out, errOut := testFactory()
	f.IO.In = in
	code := run(context.Background(), f, append([]string{"cat"}, args...))
	return catResult{code, out.Bytes(), errOut.String()}
}

// smallReads returns at most 4 KiB per Read, as a pipe often does.
type smallReads struct{ r io.Reader }

func (s smallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 4096)]) }

func TestCatLoopback(t *testing.T) {
	random := func(n int) []byte {
		b := make([]byte, n)
		r := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
		r.Read(b)
		return b
	}
	for _, c := range []struct {
		name  string
		data  []byte
		small bool
	}{
		{"empty", nil, false},
		{"one byte", []byte{'x'}, false},
		{"one chunk", random(catSlotSize), false},
		{"5MiB", random(5 << 20), false},
		{"20MiB+7 wraps the ring", random(20<<20 + 7), false},
		{"3MiB in 4KiB reads", random(3 << 20), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := rdmaAddr(t), rdmaAddr(t)
			// Sized in advance: growing the buffer would cost more than the transfer.
			got := bytes.NewBuffer(make([]byte, 0, len(c.data)))
			wait := startCatReceiver(t, sa, got)
			var in io.Reader = bytes.NewReader(c.data)
			if c.small {
				in = smallReads{in}
			}
			t0 := time.Now()
			s := runCatSender(t, in, "--bind", ca.String(), sa.String())
			d := time.Since(t0)
			r := wait()
			if s.code != ExitOK || r.code != ExitOK {
				t.Fatalf("sender exit %d, receiver exit %d\nsender stderr:\n%s\nreceiver stderr:\n%s", s.code, r.code, s.stderr, r.stderr)
			}
			if !bytes.Equal(got.Bytes(), c.data) {
				t.Errorf("receiver wrote %d bytes, want the %d sent (equal prefix: %v)", got.Len(), len(c.data), bytes.HasPrefix(c.data, got.Bytes()))
			}
			if s.stderr != "" || r.stderr != "" || len(s.stdout) != 0 {
				t.Errorf("unexpected output: sender stdout %q, stderr %q; receiver stderr %q", s.stdout, s.stderr, r.stderr)
			}
			if len(c.data) >= 1<<20 {
				t.Logf("%d bytes in %v: %.1f MiB/s (sender's run: connect, stream, confirmation)", len(c.data), d.Round(time.Millisecond), float64(len(c.data))/d.Seconds()/(1<<20))
			}
		})
	}
}

// TestCatChecksumMismatch fakes the sender's trailer: the receiver
// must refuse the stream and say what differed, the sender must fail on
// its answer.
func TestCatChecksumMismatch(t *testing.T) {
	data := bytes.Repeat([]byte("tbrdma cat\n"), 300000)
	for _, c := range []struct {
		name   string
		tamper func(*catTrailer)
		want   string
	}{
		{"digest", func(m *catTrailer) { m.sum[0] ^= 1 }, "tbrdma: cat: integrity check failed — SHA-256: received "},
		{"length", func(m *catTrailer) { m.bytes-- }, fmt.Sprintf("tbrdma: cat: integrity check failed — length: received %d bytes, the sender sent %d\n", len(data), len(data)-1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := rdmaAddr(t), rdmaAddr(t)
			wait := startCatReceiver(t, sa, nil)
			f, _, errOut := testFactory()
			f.IO.In = bytes.NewReader(data)
			code := runCatWith(context.Background(), f, []string{"--bind", ca.String(), sa.String()}, func(o *catOptions) { o.finHook = c.tamper })
			r := wait()
			if code != ExitFailed || r.code != ExitFailed {
				t.Fatalf("sender exit %d, receiver exit %d, want 1 and 1\nsender:\n%s\nreceiver:\n%s", code, r.code, errOut, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, c.want) {
				t.Errorf("receiver stderr %q\nwant prefix     %q", r.stderr, c.want)
			}
			if want := "tbrdma: cat: the receiver reports an integrity failure: it got " + fmt.Sprint(len(data)) + " bytes"; !strings.HasPrefix(errOut.String(), want) {
				t.Errorf("sender stderr %q\nwant prefix   %q", errOut, want)
			}
		})
	}
}

// TestCatSenderFails: a read error cuts the stream short; the receiver
// must not take the partial stream for a whole one.
func TestCatSenderFails(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startCatReceiver(t, sa, nil)
	in := io.MultiReader(bytes.NewReader(make([]byte, 3<<20)), iotest.ErrReader(errors.New("disk on fire")))
	s := runCatSender(t, in, "--bind", ca.String(), sa.String())
	r := wait()
	if s.code != ExitFailed || !strings.Contains(s.stderr, "tbrdma: cat: reading the input after 3145728 bytes: disk on fire (the receiver was told the stream is incomplete)") {
		t.Errorf("sender exit %d:\n%s", s.code, s.stderr)
	}
	if r.code != ExitFailed || !strings.Contains(r.stderr, "tbrdma: cat: the stream is incomplete: the sender could not read its input after 3145728 bytes") {
		t.Errorf("receiver exit %d:\n%s", r.code, r.stderr)
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errors.New("no space left on device")
	}
	return len(p), nil
}

// TestCatReceiverFails: the receiver cannot write its output; both fail.
func TestCatReceiverFails(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startCatReceiver(t, sa, &failWriter{n: 2 << 20})
	s := runCatSender(t, bytes.NewReader(make([]byte, 16<<20)), "--bind", ca.String(), sa.String())
	r := wait()
	if r.code != ExitFailed || !strings.Contains(r.stderr, "tbrdma: cat: writing the output: no space left on device") {
		t.Errorf("receiver exit %d:\n%s", r.code, r.stderr)
	}
	if s.code != ExitFailed || !strings.Contains(s.stderr, "tbrdma: cat: the receiver could not write its output") {
		t.Errorf("sender exit %d:\n%s", s.code, s.stderr)
	}
}

func TestCatNoReceiver(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	startCatReceiver(t, sa, nil, "-p", "18517")
	s := runCatSender(t, strings.NewReader("x"), "--bind", ca.String(), sa.String())
	want := "tbrdma: cat: no rdma_cm listener on " + sa.String() + " port 18516 (rejected: invalid service ID) — is `tbrdma cat` without a peer running there?\n"
	if s.code != ExitFailed || s.stderr != want {
		t.Errorf("exit %d, stderr %q\nwant %q", s.code, s.stderr, want)
	}
	s = runCatSender(t, strings.NewReader("x"), "-W", "0.3", "--bind", ca.String(), silentAddr(t).String())
	if s.code != ExitFailed || !strings.Contains(s.stderr, "no answer from ") || !strings.Contains(s.stderr, "within 300ms") {
		t.Errorf("exit %d, stderr %q", s.code, s.stderr)
	}
	if runtime.GOOS == "linux" { // nothing on UDP 4791: ICMP port unreachable ends it at once
		nobody := rdmaAddr(t)
		s = runCatSender(t, strings.NewReader("x"), "-W", "30", "--bind", ca.String(), nobody.String())
		want = "tbrdma: cat: " + nobody.String() + " answered ICMP port unreachable for UDP 4791: no RoCE device listens there; start `tbrdma cat` without a peer on it\n"
		if s.code != ExitFailed || s.stderr != want {
			t.Errorf("exit %d, stderr %q\nwant %q", s.code, s.stderr, want)
		}
	}
}

func TestCatReceiverInterrupted(t *testing.T) {
	f, _, errOut := testFactory()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if code := run(ctx, f, []string{"cat", "--bind", rdmaAddr(t).String()}); code != ExitInterrupted {
		t.Errorf("exit %d, want %d:\n%s", code, ExitInterrupted, errOut)
	}
}

func TestCatUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cat", "a", "b"}, "too many arguments"},
		{[]string{"cat", "-p", "0", "x"}, "invalid -p 0"},
		{[]string{"cat", "-p", "65536"}, "invalid -p 65536"},
		{[]string{"cat", "-W", "0", "x"}, "invalid -W 0"},
		{[]string{"cat", "-W", "NaN"}, `invalid argument "NaN" for "-W, --timeout"`},
		{[]string{"cat", "--bind", "nope"}, `invalid --bind "nope"`},
		{[]string{"cat", "--nope"}, "unknown flag: --nope"},
		{[]string{"cat", "-p", "x"}, "invalid argument"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f, out, errOut := testFactory()
			if code := run(context.Background(), f, c.args); code != ExitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, ExitUsage, errOut)
			}
			if !strings.Contains(errOut.String(), c.want) || !strings.Contains(errOut.String(), "Usage:") {
				t.Errorf("stderr lacks %q and usage:\n%s", c.want, errOut)
			}
			if out.Len() > 0 {
				t.Errorf("stdout: %q", out)
			}
		})
	}
}

func TestCatSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := ui.FormatBytes(n); got != want {
			t.Errorf("ui.FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestCatSenderInterrupted: Ctrl-C on the sender mid-stream; the receiver
// must report the stream cut short, not take it for a whole one.
func TestCatSenderInterrupted(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startCatReceiver(t, sa, nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	f, _, errOut := testFactory()
	f.IO.In = pr
	ctx, cancel := context.WithCancel(context.Background())
	codec := make(chan int, 1)
	go func() { codec <- run(ctx, f, []string{"cat", "--bind", ca.String(), sa.String()}) }()
	if _, err := pw.Write(make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let it reach the receiver
	cancel()
	if code := <-codec; code != ExitInterrupted {
		t.Errorf("sender exit %d, want %d:\n%s", code, ExitInterrupted, errOut)
	}
	r := wait()
	if r.code != ExitFailed || r.stderr != "tbrdma: cat: the stream is incomplete: the sender disconnected after 100000 bytes without its final length and checksum\n" {
		t.Errorf("receiver exit %d:\n%s", r.code, r.stderr)
	}
	if len(r.stdout) != 100000 {
		t.Errorf("receiver wrote %d bytes, want 100000", len(r.stdout))
	}
}

// dropACKs is a sender's endpoint that, once drop is set, sends no RC
// ACKs: the receiver's last messages then go unacknowledged, as when the
// ACKs are lost and the sender has left.
type dropACKs struct {
	transport.Conn
	drop *atomic.Bool
	out  []transport.Message
}

func (d *dropACKs) WriteBatch(msgs []transport.Message) (int, error) {
	if !d.drop.Load() {
		return d.Conn.WriteBatch(msgs)
	}
	d.out = d.out[:0]
	for _, m := range msgs {
		if len(m.Buf) > 0 && wire.Opcode(m.Buf[0]) == wire.Acknowledge {
			continue
		}
		d.out = append(d.out, m)
	}
	if len(d.out) > 0 {
		if _, err := d.Conn.WriteBatch(d.out); err != nil {
			return 0, err
		}
	}
	return len(msgs), nil
}

// TestCatUnacknowledgedConfirmation: the receiver has the whole stream,
// checked against the sender's trailer, and has sent its answer; the
// transport acknowledgement of that answer never comes (lost, and the
// sender gone). The output is whole, so the receiver succeeds; the
// sender, which got the answer, succeeds too.
// (In CI, under --fault, the receiver failed here with "transport retry
// counter exceeded".)
func TestCatUnacknowledgedConfirmation(t *testing.T) {
	data := bytes.Repeat([]byte("tbrdma cat\n"), 100000)
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startCatReceiver(t, sa, nil)
	f, _, errOut := testFactory()
	f.IO.In = bytes.NewReader(data)
	var drop atomic.Bool
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) {
		return openDeviceWith(a, nil, func(c transport.Conn) transport.Conn { return &dropACKs{Conn: c, drop: &drop} })
	}
	code := runCatWith(context.Background(), f, []string{"--bind", ca.String(), sa.String()}, func(o *catOptions) {
		o.finHook = func(*catTrailer) { drop.Store(true) }
	})
	r := wait()
	if code != ExitOK || r.code != ExitOK {
		t.Fatalf("sender exit %d, receiver exit %d, want 0 and 0\nsender:\n%s\nreceiver:\n%s", code, r.code, errOut, r.stderr)
	}
	if !bytes.Equal(r.stdout, data) {
		t.Fatalf("received %d bytes, sent %d", len(r.stdout), len(data))
	}
	if r.stderr != "" {
		t.Errorf("receiver stderr %q, want none", r.stderr)
	}
}

// TestCatOutputHoldsBack: the receiver's output holds back the last
// catTrailerSize bytes of the stream, whatever the sizes of the writes,
// and hashes exactly what it wrote out.
func TestCatOutputHoldsBack(t *testing.T) {
	data := make([]byte, 1000)
	rand.NewChaCha8([32]byte{1}).Read(data)
	for _, n := range []int{0, 1, catTrailerSize - 1, catTrailerSize, catTrailerSize + 1, 200, 1000} {
		for _, step := range []int{1, 7, catTrailerSize, 64, 1000} {
			var out bytes.Buffer
			w := &catOutput{out: &out, h: sha256.New(), prog: &catProgress{p: &ui.Progress{}}}
			for p := data[:n]; len(p) > 0; {
				k := min(step, len(p))
				if m, err := w.Write(p[:k]); m != k || err != nil {
					t.Fatalf("Write: %d, %v", m, err)
				}
				p = p[k:]
			}
			keep := max(n-catTrailerSize, 0)
			if !bytes.Equal(out.Bytes(), data[:keep]) || !bytes.Equal(w.tail, data[keep:n]) || w.n != uint64(keep) {
				t.Errorf("%d bytes in writes of %d: wrote %d, held %d; want %d and %d", n, step, out.Len(), len(w.tail), keep, n-keep)
			}
			if sum := sha256.Sum256(data[:keep]); !bytes.Equal(w.h.Sum(nil), sum[:]) {
				t.Errorf("%d bytes in writes of %d: the hash is not of what was written", n, step)
			}
		}
	}
}

// dialCat connects to a cat receiver on addr as a bare stream dialer.
func dialCat(t *testing.T, addr netip.Addr) *stream.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := (&stream.Dialer{LocalAddr: rdmaAddr(t)}).Dial(ctx, netip.AddrPortFrom(addr, catDefaultPort).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Abort() })
	return c
}

// TestCatBusy: while a receiver serves one sender, another is told it
// is busy; the first is unaffected.
func TestCatBusy(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startCatReceiver(t, sa, nil)
	first := dialCat(t, sa)
	if _, err := first.Write([]byte(catHello + "some data")); err != nil {
		t.Fatal(err)
	}
	s := runCatSender(t, strings.NewReader("second"), "--bind", ca.String(), sa.String())
	if want := "tbrdma: cat: the receiver " + sa.String() + " is busy with another stream: try again once it is done\n"; s.code != ExitFailed || s.stderr != want {
		t.Errorf("second sender: exit %d, stderr %q\nwant exit 1, %q", s.code, s.stderr, want)
	}
	first.Abort()
	r := wait()
	if r.code != ExitFailed || !strings.Contains(r.stderr, "the stream is incomplete: the sender disconnected after 9 bytes") || string(r.stdout) != "some data" {
		t.Errorf("receiver exit %d, stdout %q, stderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestCatNotACatSender: a stream dialer that does not greet as a cat
// sender is turned away, and the receiver goes on waiting.
func TestCatNotACatSender(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startCatReceiver(t, sa, nil)
	other := dialCat(t, sa)
	other.Write([]byte("GET / HTTP/1.1\r\n"))
	if _, err := io.ReadAll(other); !errors.Is(err, stream.ErrPeerClosed) {
		t.Errorf("the receiver's answer to a stranger: %v, want ErrPeerClosed", err)
	}
	s := runCatSender(t, strings.NewReader("payload"), "--bind", ca.String(), sa.String())
	r := wait()
	if s.code != ExitOK || r.code != ExitOK || string(r.stdout) != "payload" {
		t.Fatalf("sender exit %d (%s), receiver exit %d, stdout %q", s.code, s.stderr, r.code, r.stdout)
	}
	if want := "tbrdma cat: rejected a connection from "; !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "not a tbrdma cat sender") {
		t.Errorf("receiver stderr %q, want the rejected connection", r.stderr)
	}
}

// TestCatOldReceiver: a receiver of the former protocol (tbrdma-cat/1)
// rejects the stream's connection request as "not a tbrdma cat sender";
// the sender says what that means.
func TestCatOldReceiver(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	dev, err := openDevice(sa, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ech.Destroy()
	l, err := ech.CreateID(dev, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Bind(netip.AddrPortFrom(sa, catDefaultPort)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(4); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			ev, err := ech.GetEvent(context.Background())
			if err != nil {
				return
			}
			if ev.Type == rdmacm.EventConnectRequest {
				ev.ID.Reject([]byte("tbrdma cat: not a tbrdma cat sender"))
				ev.ID.Destroy()
			}
		}
	}()
	s := runCatSender(t, strings.NewReader("x"), "--bind", ca.String(), sa.String())
	if s.code != ExitFailed || !strings.Contains(s.stderr, "the receiver speaks another cat protocol (an older tbrdma?") {
		t.Errorf("exit %d, stderr %q", s.code, s.stderr)
	}
}

// closedPipe is an output whose reader went away, as with "| head".
type closedPipe struct{ n int }

func (w *closedPipe) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.EPIPE}
	}
	return len(p), nil
}

// TestCatOutputClosed: the receiver's output closes mid-stream; it tells
// the sender, and both fail.
func TestCatOutputClosed(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startCatReceiver(t, sa, &closedPipe{n: 100})
	s := runCatSender(t, bytes.NewReader(make([]byte, 64<<20)), "--bind", ca.String(), sa.String())
	r := wait()
	if r.code != ExitFailed || !strings.Contains(r.stderr, "tbrdma: cat: the output closed after 0 bytes: write /dev/stdout: broken pipe (stream abandoned; the sender was told)") {
		t.Errorf("receiver exit %d:\n%s", r.code, r.stderr)
	}
	if s.code != ExitFailed || !strings.Contains(s.stderr, "tbrdma: cat: the receiver's output closed after 0 bytes") {
		t.Errorf("sender exit %d:\n%s", s.code, s.stderr)
	}
}
