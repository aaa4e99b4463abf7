package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/verbs"
)

// startRelayServe runs "tbrdma serve --bind addr" with its cat relay on a
// socket of the test's; stop cancels it (as SIGINT would) and returns its
// exit code and stderr, errOf reads its stderr so far.
func startRelayServe(t *testing.T, addr netip.Addr, key []byte) (sock string, stop func() (int, string), errOf func() string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "serve.sock")
	errOut := newLockedBuffer("listening on")
	f := &Factory{IO: &ui.IO{In: new(bytes.Buffer), Out: io.Discard, ErrOut: errOut}, Now: time.Now}
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) { return openDevice(a, nil) }
	if key != nil {
		withPSK(f, key)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newCmdServe(f, func(o *serveOptions) error {
		o.CatRelay = sock
		return runServe(ctx, o)
	})
	cmd.SetArgs([]string{"--bind", addr.String(), "--no-advertise", "--oob-port", "0"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	codec := make(chan int, 1)
	go func() { codec <- exitCode(cmd.ExecuteContext(ctx), ctx.Err() != nil) }()
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
	stop = func() (int, string) {
		once.Do(func() {
			cancel()
			select {
			case code = <-codec:
			case <-time.After(20 * time.Second):
				t.Errorf("serve did not stop:\n%s", errOut)
			}
		})
		return code, errOut.String()
	}
	t.Cleanup(func() { stop() })
	return sock, stop, errOut.String
}

// viaServe makes a receiver find the serve of sock on addr, as
// findServeRelay finds a serve process by its live-counter file.
func viaServe(sock string, addr netip.Addr) func(*catOptions) {
	return func(o *catOptions) {
		o.findServe = func([]netip.Addr) (catServeRef, bool) {
			return catServeRef{PID: os.Getpid(), Path: sock, Addrs: []netip.Addr{addr}}, true
		}
	}
}

// waitFor polls f until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
	}
}

// TestCatThroughServe: a receiver on an address whose UDP 4791 serve holds
// gets the stream through serve, byte for byte, as silently as from a
// receiver of its own; serve logs the stream and its verdict.
func TestCatThroughServe(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	sock, stop, errOf := startRelayServe(t, sa, nil)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("relay socket: %v, %v; want mode 0600", fi, err)
	}
	for _, n := range []int{0, 1, 20<<20 + 7} {
		data := make([]byte, n)
		rand.NewChaCha8([32]byte{byte(n)}).Read(data)
		got := bytes.NewBuffer(make([]byte, 0, n))
		wait := startCatReceiverWith(t, sa, got, viaServe(sock, sa))
		s := runCatSender(t, smallReads{bytes.NewReader(data)}, "--bind", ca.String(), sa.String())
		r := wait()
		if s.code != ExitOK || r.code != ExitOK || s.stderr != "" || r.stderr != "" {
			t.Fatalf("%d bytes: sender exit %d (%q), receiver exit %d (%q)", n, s.code, s.stderr, r.code, r.stderr)
		}
		if !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("%d bytes: the receiver wrote %d other bytes", n, got.Len())
		}
		waitFor(t, "verdict in serve's log", func() bool {
			return strings.Contains(errOf(), fmt.Sprintf("the stream from %v: %d bytes written out, verdict ok", ca, n))
		})
	}
	if code, log := stop(); code != ExitOK || !strings.Contains(log, "waits for a stream on "+sa.String()+" port 18516 (relayed)") {
		t.Errorf("serve: exit %d, stderr:\n%s", code, log)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("serve left its relay socket %s behind", sock)
	}
}

// TestCatThroughServeOutputClosed: "| head" on the receiver through serve
// ends both ends as it does without serve.
func TestCatThroughServeOutputClosed(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	sock, _, _ := startRelayServe(t, sa, nil)
	wait := startCatReceiverWith(t, sa, &closedPipe{n: 100}, viaServe(sock, sa))
	s := runCatSender(t, bytes.NewReader(make([]byte, 64<<20)), "--bind", ca.String(), sa.String())
	r := wait()
	if r.code != ExitFailed || !strings.Contains(r.stderr, "tbrdma: cat: the output closed after 0 bytes: write /dev/stdout: broken pipe (stream abandoned; the sender was told)") {
		t.Errorf("receiver exit %d:\n%s", r.code, r.stderr)
	}
	if s.code != ExitFailed || !strings.Contains(s.stderr, "tbrdma: cat: the receiver's output closed after 0 bytes") {
		t.Errorf("sender exit %d:\n%s", s.code, s.stderr)
	}
}

// TestCatThroughServeBusy: a second receiver on the same port is refused
// at once; a second sender, while the first streams, is told the receiver
// is busy.
func TestCatThroughServeBusy(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	sock, _, _ := startRelayServe(t, sa, nil)
	wait := startCatReceiverWith(t, sa, nil, viaServe(sock, sa))
	f, _, errOut := testFactory()
	code := runCatWith(context.Background(), f, []string{"--bind", sa.String()}, viaServe(sock, sa))
	if want := "already waits for a stream on port 18516 through it"; code != ExitFailed || !strings.Contains(errOut.String(), want) {
		t.Errorf("second receiver: exit %d, stderr %q; want 1 and %q", code, errOut, want)
	}
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

// gate is an output that signals its first write, then blocks until the
// test ends, as a receiver that stops in the middle.
type gate struct {
	once  sync.Once
	first chan struct{}
	hold  chan struct{}
}

func (g *gate) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.first) })
	<-g.hold
	return len(p), nil
}

// TestCatThroughServeReceiverGone: a receiver that goes away mid-stream
// (its socket to serve closes, as when it is killed) has serve drop the
// sender, which fails naming the receiver.
func TestCatThroughServeReceiverGone(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	sock, _, errOf := startRelayServe(t, sa, nil)
	g := &gate{first: make(chan struct{}), hold: make(chan struct{})}
	f, _, errOut := testFactory()
	f.IO.Out = g
	ctx, cancel := context.WithCancel(context.Background())
	codec := make(chan int, 1)
	go func() { codec <- runCatWith(ctx, f, []string{"--bind", sa.String()}, viaServe(sock, sa)) }()
	waitFor(t, "registration", func() bool { return strings.Contains(errOf(), "(relayed)") })
	sent := make(chan catResult, 1)
	go func() {
		sent <- runCatSender(t, bytes.NewReader(make([]byte, 256<<20)), "--bind", ca.String(), sa.String())
	}()
	select {
	case <-g.first:
	case <-time.After(10 * time.Second):
		t.Fatal("no data reached the receiver")
	}
	cancel() // closes its socket to serve, as its death would
	close(g.hold)
	if code := <-codec; code != ExitInterrupted {
		t.Errorf("receiver exit %d, want %d: %s", code, ExitInterrupted, errOut)
	}
	select {
	case s := <-sent:
		if s.code != ExitFailed || !strings.Contains(s.stderr, "tbrdma: cat: the receiver disconnected after ") {
			t.Errorf("sender exit %d, stderr %q; want 1 and the receiver's disconnection", s.code, s.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sender did not end within 30s of the receiver going away")
	}
	waitFor(t, "serve's log of the dropped sender", func() bool {
		return strings.Contains(errOf(), "the cat went away without a verdict")
	})
}

// TestCatThroughServeStopped: serve stopping ends its receivers, waiting
// or streaming, with exit 1 and a message naming serve.
func TestCatThroughServeStopped(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		sa := rdmaAddr(t)
		sock, stop, _ := startRelayServe(t, sa, nil)
		wait := startCatReceiverWith(t, sa, nil, viaServe(sock, sa))
		stop()
		r := wait()
		if want := fmt.Sprintf("tbrdma: cat: tbrdma serve (pid %d), which relays for this cat, went away (", os.Getpid()); r.code != ExitFailed || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("receiver exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
		}
	})
	t.Run("streaming", func(t *testing.T) {
		sa, ca := rdmaAddr(t), rdmaAddr(t)
		sock, stop, _ := startRelayServe(t, sa, nil)
		g := &gate{first: make(chan struct{}), hold: make(chan struct{})}
		wait := startCatReceiverWith(t, sa, g, viaServe(sock, sa))
		sent := make(chan catResult, 1)
		go func() {
			sent <- runCatSender(t, bytes.NewReader(make([]byte, 256<<20)), "--bind", ca.String(), sa.String())
		}()
		<-g.first
		go stop()
		time.AfterFunc(100*time.Millisecond, func() { close(g.hold) })
		r := wait()
		if r.code != ExitFailed || !strings.Contains(r.stderr, "which relays for this cat, went away") {
			t.Errorf("receiver exit %d, stderr %q", r.code, r.stderr)
		}
		if s := <-sent; s.code != ExitFailed || !strings.Contains(s.stderr, "receiver") {
			t.Errorf("sender exit %d, stderr %q", s.code, s.stderr)
		}
	})
}

// TestCatThroughServePSK: serve's --psk-file key guards the connections it
// accepts for cat as its others: a sender without it is refused.
func TestCatThroughServePSK(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	key := []byte("0123456789abcdef0123")
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	sock, _, _ := startRelayServe(t, sa, key)
	got := new(bytes.Buffer)
	wait := startCatReceiverWith(t, sa, got, viaServe(sock, sa))
	if s := runCatSender(t, strings.NewReader("x"), "--bind", ca.String(), sa.String()); s.code != ExitFailed {
		t.Errorf("sender without the key: exit %d, stderr %q; want 1", s.code, s.stderr)
	}
	s := runCatSender(t, strings.NewReader("keyed"), "--psk-file", keyFile, "--bind", ca.String(), sa.String())
	r := wait()
	if s.code != ExitOK || r.code != ExitOK || got.String() != "keyed" {
		t.Errorf("sender with the key: exit %d (%q), receiver exit %d (%q), got %q", s.code, s.stderr, r.code, r.stderr, got)
	}
}

// TestCatRelayHostile: serve answers a registration that is not one with
// an error, and the receiver's frame reader refuses what is out of bounds,
// without panicking on any input.
func TestCatRelayHostile(t *testing.T) {
	for _, in := range []string{"", "\n", "{", `{"proto":"tbrdma-catrelay/0"}` + "\n", `{"proto":"tbrdma-catrelay/1","port":0,"timeout":1}` + "\n",
		`{"proto":"tbrdma-catrelay/1","port":1,"timeout":1e9}` + "\n", `{"proto":"tbrdma-catrelay/1","port":9,"timeout":1,"addrs":["x"]}` + "\n",
		strings.Repeat("x", 10000)} {
		a, b, err := unixPair(t)
		if err != nil {
			t.Fatal(err)
		}
		s := &catRelayServer{ports: map[int]int{}}
		done := make(chan struct{})
		go func() { s.handle(context.Background(), b); close(done) }()
		a.Write([]byte(in))
		a.CloseWrite()
		var rep catRelayReply
		line, _ := bufio.NewReader(a).ReadBytes('\n')
		if err := json.Unmarshal(line, &rep); len(line) > 0 && (err != nil || rep.Error == "" || len(rep.Bound) > 0) {
			t.Errorf("registration %.40q: answer %q (%v), want an error", in, line, err)
		}
		<-done
		a.Close()
	}
	frames := [][]byte{{}, {'D'}, {'D', 0, 0x10, 0, 1}, {'R', 0, 0, 0x10, 1}, {'Z', 0, 0, 0, 0}, {'A', 0, 0, 0, 3, 'x', 'y', 'z'}, {'R', 0, 0, 0, 2, 'a'}}
	for i := range 200 {
		b := make([]byte, i%40)
		rand.NewChaCha8([32]byte{byte(i)}).Read(b)
		frames = append(frames, b)
	}
	for _, fr := range frames {
		if _, err := catAwaitSender(io.Discard, bufio.NewReader(bytes.NewReader(fr))); err == nil {
			t.Errorf("frames %q: a sender accepted", fr)
		}
		rs := &catRelayed{r: bufio.NewReader(bytes.NewReader(fr)), gone: func(err error) error { return err }, buf: make([]byte, catRelayMaxFrame)}
		rs.WriteTo(io.Discard) // must not panic
	}
}

// unixPair is a connected pair of unix stream sockets.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn, error) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	a, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		return nil, nil, err
	}
	b, err := ln.AcceptUnix()
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, nil
}

// TestFindServeRelay: a receiver finds the serve whose live-counter file
// has its address open and whose relay socket exists, and removes the
// sockets of serves that are gone.
func TestFindServeRelay(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	live := liveDir()
	if err := ensureLiveDir(live); err != nil {
		t.Fatal(err)
	}
	pid := os.Getppid() // alive, and not us
	f := liveFile{SchemaVersion: liveSchema, PID: pid, Command: "serve", Netns: netnsID(), Updated: time.Now().UTC(),
		Contexts: []liveContext{{Addr: "198.18.0.1"}, {Addr: "198.18.0.5"}}}
	if err := writeLiveFile(live, filepath.Join(live, fmt.Sprintf("%d.json", pid)), &f); err != nil {
		t.Fatal(err)
	}
	a1, a5, other := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.5"), netip.MustParseAddr("198.18.0.9")
	if _, ok := findServeRelay([]netip.Addr{a1}); ok {
		t.Error("found a serve without a relay socket")
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: catRelayPath(live, pid), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A dead process's socket (PIDs above pid_max are never alive).
	dead := catRelayPath(live, 1<<30)
	dl, err := net.ListenUnix("unix", &net.UnixAddr{Name: dead, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dl.SetUnlinkOnClose(false)
	dl.Close()
	ref, ok := findServeRelay([]netip.Addr{other, a5, a1})
	if !ok || ref.PID != pid || ref.Path != catRelayPath(live, pid) || len(ref.Addrs) != 2 {
		t.Errorf("found %+v, %v; want pid %d with 198.18.0.5 and 198.18.0.1", ref, ok, pid)
	}
	if _, ok := findServeRelay([]netip.Addr{other}); ok {
		t.Error("found a serve for an address it does not have")
	}
	if _, err := os.Lstat(dead); err == nil {
		t.Error("the relay socket of a dead serve is still there")
	}
}

// TestServeRelaySkipped: a receiver without --bind goes through the serve
// that holds one of its addresses, and names the others it skips.
func TestServeRelaySkipped(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.1.1")
	o := &catOptions{Addrs: func() ([]netip.Addr, error) { return []netip.Addr{a, b}, nil }}
	var asked []netip.Addr
	o.findServe = func(list []netip.Addr) (catServeRef, bool) {
		asked = list
		return catServeRef{PID: 7, Addrs: []netip.Addr{a}}, true
	}
	ref, ok := o.serveRelay()
	if !ok || len(ref.Skipped) != 1 || ref.Skipped[0] != b || len(asked) != 2 {
		t.Errorf("ref %+v, %v (asked about %v); want %v skipped", ref, ok, asked, b)
	}
	o.bind = a
	if ref, ok := o.serveRelay(); !ok || len(ref.Skipped) != 0 {
		t.Errorf("with --bind: ref %+v, %v; want none skipped", ref, ok)
	}
	o.findServe = nil
	if _, ok := o.serveRelay(); ok {
		t.Error("a relay without a way to find serve")
	}
}
