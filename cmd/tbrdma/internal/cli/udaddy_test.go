package cli

import (
	"bytes"
	"context"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// startUdaddyServer runs "tbrdma udaddy -b addr args..." through run, as
// main does, and returns once it listens; wait returns its exit code and
// output.
func startUdaddyServer(t *testing.T, addr netip.Addr, args ...string) (wait func() (code int, stdout, stderr string)) {
	t.Helper()
	out, errOut := newLockedBuffer("\x00"), newLockedBuffer("listening on")
	f := &Factory{IO: &ui.IO{In: new(bytes.Buffer), Out: out, ErrOut: errOut}, Now: time.Now}
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) { return openDevice(a, nil) }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	codec := make(chan int, 1)
	go func() { codec <- run(ctx, f, append([]string{"udaddy", "-b", addr.String()}, args...)) }()
	select {
	case <-errOut.ready:
	case code := <-codec:
		t.Fatalf("udaddy server exited %d:\n%s%s", code, out, errOut)
	case <-time.After(10 * time.Second):
		t.Fatalf("udaddy server did not listen:\n%s%s", out, errOut)
	}
	return func() (int, string, string) {
		select {
		case code := <-codec:
			return code, out.String(), errOut.String()
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatalf("udaddy server did not end:\n%s%s", out, errOut)
			return 0, "", ""
		}
	}
}

func TestUdaddyLoopback(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"C3-S1000", []string{"-C", "3", "-S", "1000"}},
		{"C50-S1", []string{"-C", "50", "-S", "1"}},
		{"S4096", []string{"-C", "2", "-S", "4096"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := rdmaAddr(t), rdmaAddr(t)
			wait := startUdaddyServer(t, sa, c.args...)
			f, out, errOut := testFactory()
			code := run(context.Background(), f, append([]string{"udaddy", "-b", ca.String(), sa.String()}, c.args...))
			if code != ExitOK || errOut.Len() > 0 {
				t.Fatalf("client exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			want := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
				"data transfers complete\ntest complete\nreturn status 0\n"
			if out.String() != want {
				t.Errorf("client stdout:\n%s\nwant:\n%s", out, want)
			}
			scode, sout, serr := wait()
			want = "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
			if scode != ExitOK || sout != want {
				t.Errorf("server exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s", scode, sout, want, serr)
			}
			if wantErr := "tbrdma udaddy: listening on " + sa.String() + " port 7174 (rdma_cm, RDMA_PS_UDP)\n"; serr != wantErr {
				t.Errorf("server stderr %q, want %q", serr, wantErr)
			}
		})
	}
}

// TestUdaddyConnectOnly: -C 0 resolves the service and ends, as udaddy.
func TestUdaddyConnectOnly(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startUdaddyServer(t, sa, "-C", "0", "-p", "7999")
	f, out, errOut := testFactory()
	if code := run(context.Background(), f, []string{"udaddy", "-C", "0", "-p", "7999", "-b", ca.String(), "-s", sa.String()}); code != ExitOK {
		t.Fatalf("client exit %d: %s%s", code, out, errOut)
	}
	if want := "udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status 0\n"; out.String() != want {
		t.Errorf("client stdout:\n%s\nwant:\n%s", out, want)
	}
	if code, sout, serr := wait(); code != ExitOK || sout != "udaddy: starting server\ntest complete\nreturn status 0\n" {
		t.Errorf("server exit %d:\n%s%s", code, sout, serr)
	}
}

// TestUdaddyNoServer: a peer running rdma_cm but no udaddy server (here
// an rping-style RDMA_PS_TCP listener on the same port, as "tbrdma serve")
// answers the SIDR_REQ with status 1; a peer with no device never
// answers. Both end in exit 1 with what to check.
func TestUdaddyNoServer(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	dev, err := openDevice(sa, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ch, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Destroy()
	lid, err := ch.CreateID(dev, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer lid.Destroy()
	if err := lid.Bind(netip.AddrPortFrom(sa, 7174)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(0); err != nil {
		t.Fatal(err)
	}
	f, out, errOut := testFactory()
	code := run(context.Background(), f, []string{"udaddy", "-b", ca.String(), sa.String()})
	if code != ExitFailed || !strings.Contains(errOut.String(), "no udaddy server on "+sa.String()+" port 7174") ||
		!strings.Contains(out.String(), "udaddy: event: UNREACHABLE, error: 1\ntest complete\nreturn status 1\n") {
		t.Errorf("device without server: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	silent := silentAddr(t)
	f, out, errOut = testFactory()
	code = run(context.Background(), f, []string{"udaddy", "-W", "0.5", "-b", ca.String(), silent.String()})
	if code != ExitFailed || !strings.Contains(errOut.String(), "no answer from "+silent.String()+":7174 within 500ms (-W)") ||
		!strings.HasSuffix(out.String(), "test complete\nreturn status 1\n") {
		t.Errorf("nobody answers: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	if runtime.GOOS != "linux" {
		return
	}
	// Nothing on UDP 4791: the ICMP port unreachable ends it at once, as
	// UNREACHABLE with -ECONNREFUSED.
	nobody := rdmaAddr(t)
	f, out, errOut = testFactory()
	code = run(context.Background(), f, []string{"udaddy", "-W", "30", "-b", ca.String(), nobody.String()})
	want := "tbrdma: " + nobody.String() + " answered ICMP port unreachable for UDP 4791: no RoCE device listens there; start `tbrdma udaddy -b " + nobody.String() + "` (or `udaddy -b " + nobody.String() + "`) on it\n"
	if code != ExitFailed || errOut.String() != want || !strings.Contains(out.String(), "udaddy: event: UNREACHABLE, error: -111\n") {
		t.Errorf("nobody there: exit %d\nstdout:\n%s\nstderr:\n%s\nwant stderr %q", code, out, errOut, want)
	}
}

// TestUdaddySizeMismatch: the client's datagrams are larger than the
// server's receive buffers, so the server's receives fail; the client
// gets no reply.
func TestUdaddySizeMismatch(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	wait := startUdaddyServer(t, sa, "-S", "100")
	f, out, errOut := testFactory()
	code := run(context.Background(), f, []string{"udaddy", "-S", "200", "-W", "2", "-b", ca.String(), sa.String()})
	if code != ExitFailed || !strings.Contains(errOut.String(), "no replies from the server within 2s (-W)") {
		t.Errorf("client: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	scode, sout, serr := wait()
	if scode != ExitFailed || strings.Contains(sout, "data transfers complete") || !strings.Contains(sout, "return status 1\n") ||
		!strings.Contains(serr, "local length error") || !strings.Contains(serr, "does the peer use the same -S?") {
		t.Errorf("server: exit %d\nstdout:\n%s\nstderr:\n%s", scode, sout, serr)
	}
}

func TestUdaddyFlags(t *testing.T) {
	f, _, _ := testFactory()
	var got *udaddyOptions
	parse := func(args ...string) (*udaddyOptions, error) {
		got = nil
		cmd := newCmdUdaddy(f, func(o *udaddyOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		return got, cmd.Execute()
	}
	o, err := parse("-b", "198.18.0.1")
	if err != nil || o == nil {
		t.Fatalf("server: %v", err)
	}
	if o.Server != "" || o.Count != 10 || o.Size != 100 || o.Port != 7174 || o.bind != netip.MustParseAddr("198.18.0.1") {
		t.Errorf("defaults: %+v, want udaddy's -C 10 -S 100, port 7174", o)
	}
	if o, err = parse("-s", "198.18.0.2"); err != nil || o.Server != "198.18.0.2" || o.bind.IsValid() {
		t.Errorf("-s: %+v %v", o, err)
	}
	if o, err = parse("-C", "0", "-S", "5", "198.18.0.2"); err != nil || o.Server != "198.18.0.2" || o.messages() != 0 {
		t.Errorf("positional, -C 0: %+v %v", o, err)
	}
	if o, err = parse("-C", "7", "-S", "0", "-s", "h", "h"); err != nil || o.messages() != 0 {
		t.Errorf("-S 0: %+v %v", o, err)
	}
	for _, bad := range [][]string{
		{},                            // a server needs -b
		{"-s", "a", "b"},              // two servers
		{"-S", "4097", "h"},           // above any MTU
		{"-C", "-1", "h"},             // negative count
		{"-p", "0", "h"},              // port
		{"-W", "0", "h"},              // timeout
		{"-b", "nonsense", "h"},       // bind
		{"-b", "127.0.0.1", "a", "b"}, // too many arguments
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%q: accepted", bad)
		} else if _, ok := err.(*FlagError); !ok {
			t.Errorf("%q: %T %v, want a usage error", bad, err, err)
		}
	}
}

// TestUdaddySizeAboveActiveMTU: -S above the port's active MTU is refused
// before the client connects.
func TestUdaddySizeAboveActiveMTU(t *testing.T) {
	ca := rdmaAddr(t)
	f, out, errOut := testFactory()
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) {
		return verbs.NewContext(&verbs.Options{Addr: a, ActiveMTU: verbs.MTU1024})
	}
	code := run(context.Background(), f, []string{"udaddy", "-S", "2048", "-W", "5", "-b", ca.String(), rdmaAddr(t).String()})
	if code != ExitFailed || !strings.Contains(errOut.String(), "message size 2048 is larger than the active MTU 1024") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
