package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The live-counter files of the commands the tests start
	// (cli/livecounters.go) go to a directory of this run, removed at
	// the end: a command the test kills (SIGKILL, as exec.CommandContext
	// does when its context ends) cannot remove its own.
	liveDir, err := os.MkdirTemp("", "tbrdma-e2e-xdg-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	os.Setenv("XDG_RUNTIME_DIR", liveDir)
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.RemoveAll(liveDir)
	os.Exit(code)
}

// tbrdma returns the path of the tbrdma binary, built (once per test run)
// from this tree with go build.
func tbrdma(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go command in PATH: %w", err)
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "tbrdma-e2e-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "tbrdma")
		heartbeat("building tbrdma")
		out, err := exec.Command(goBin, "build", "-o", binPath, "github.com/tbrdma/tbrdma/cmd/tbrdma").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// progress prints one line on stderr (long tests say where they are,
// shown with -v and when the package fails).
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
}

// heartbeat is progress for the lines that must show as the tests run
// (which test starts, the build): "go test" with package arguments (go
// test ./...) collects a test binary's stdout and stderr through a pipe
// and shows them only when the package fails, so the line also goes to
// the go command's own stderr (parentStderr).
func heartbeat(format string, args ...any) {
	line := fmt.Sprintf("e2e: "+format+"\n", args...)
	os.Stderr.WriteString(line)
	if w := parentStderr(); w != nil {
		w.WriteString(line)
	}
}

var (
	progressOnce sync.Once
	progressOut  *os.File
)

// parentStderr returns the stderr of the go command that runs this test
// binary (/proc/<parent>/fd/2) when our stderr is the pipe "go test"
// buffers, without -v; nil otherwise (go test -v and -json show what the
// test binary writes; the binary run by hand writes to the terminal) or
// when the parent's stderr cannot be opened (a socket).
func parentStderr() *os.File {
	progressOnce.Do(func() {
		if testing.Verbose() {
			return // go test -v and -json show our output (one package: as it comes)
		}
		fi, err := os.Stderr.Stat()
		if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			return
		}
		parent := fmt.Sprintf("/proc/%d", os.Getppid())
		exe, err := os.Readlink(parent + "/exe")
		if err != nil || filepath.Base(exe) != "go" {
			return
		}
		progressOut, _ = os.OpenFile(parent+"/fd/2", os.O_WRONLY|os.O_APPEND, 0)
	})
	return progressOut
}

var (
	runStart  = time.Now()
	announced sync.Map // test names announced
)

// announce prints the test's name once as it starts (a heartbeat: the
// end-to-end tests take minutes in all).
func announce(t *testing.T) {
	if _, dup := announced.LoadOrStore(t.Name(), true); !dup {
		heartbeat("%4.0fs %s", time.Since(runStart).Seconds(), t.Name())
	}
}

// link is two network namespaces, "machines" A and B, joined by a veth
// pair named thunderbolt0 on both sides.
type link struct {
	nsA, nsB     string
	addrA, addrB string // 198.18.7.1 and 198.18.7.2 (/29)
	// absent is an address on the link that nobody has.
	absent string
	// ipv6 reports whether the link has IPv6 (link-local addresses).
	ipv6 bool
}

// Fixed MAC addresses, so that node GUIDs and link-local addresses (and
// so the golden files) do not change from run to run.
const (
	macA = "02:00:c6:12:07:01"
	macB = "02:00:c6:12:07:02"
)

// needNetns skips the test unless it can create network namespaces, and
// announces it (every test that starts commands in namespaces calls it).
func needNetns(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the end-to-end tests start processes in network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (run: sudo go test ./cmd/tbrdma/e2e)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) from iproute2 for network namespaces (apt-get install iproute2)")
	}
	announce(t)
}

// newLink creates the namespaces and the veth pair (unique names per run,
// so that parallel runs do not collide) and deletes them when the test
// ends, whatever happened.
func newLink(t *testing.T) *link {
	t.Helper()
	needNetns(t)
	id := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	l := &link{nsA: "tbe2e-" + id + "-a", nsB: "tbe2e-" + id + "-b",
		addrA: "198.18.7.1", addrB: "198.18.7.2", absent: "198.18.7.3"}
	vA, vB := "tbe"+id+"a", "tbe"+id+"b"

	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := ip("netns", "add", l.nsA); err != nil {
		t.Skipf("cannot create a network namespace (%v): run as root on Linux with netns support", err)
	}
	t.Cleanup(func() { ip("netns", "del", l.nsA) })
	if err := ip("netns", "add", l.nsB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ip("netns", "del", l.nsB) })
	if err := ip("link", "add", vA, "type", "veth", "peer", "name", vB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ip("link", "del", vA) }) // if it never left; deleting a namespace deletes it too
	for _, s := range []struct{ ns, veth, mac, addr string }{{l.nsA, vA, macA, l.addrA}, {l.nsB, vB, macB, l.addrB}} {
		steps := [][]string{
			{"link", "set", s.veth, "netns", s.ns},
			{"-n", s.ns, "link", "set", "lo", "up"},
			{"-n", s.ns, "link", "set", s.veth, "name", "thunderbolt0"},
			{"-n", s.ns, "link", "set", "thunderbolt0", "address", s.mac, "mtu", "65520"},
		}
		for _, st := range steps {
			if err := ip(st...); err != nil {
				t.Fatal(err)
			}
		}
		// No duplicate address detection: the link-local address is
		// usable (by mDNS) as soon as the link is up.
		out, err := exec.Command("ip", "netns", "exec", s.ns, "sh", "-c",
			"echo 0 > /proc/sys/net/ipv6/conf/thunderbolt0/accept_dad").CombinedOutput()
		if err != nil {
			t.Logf("accept_dad: %v: %s (no IPv6?)", err, out)
		}
		l.ipv6 = err == nil
		for _, st := range [][]string{
			{"-n", s.ns, "link", "set", "thunderbolt0", "up"},
			{"-n", s.ns, "addr", "add", s.addr + "/29", "dev", "thunderbolt0"},
		} {
			if err := ip(st...); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("link: %s (%s) <-> %s (%s) on thunderbolt0", l.nsA, l.addrA, l.nsB, l.addrB)
	return l
}

// needHostname skips the test unless commands can run with a host name of
// their own (unshare(1) from util-linux and hostname(1)).
func needHostname(t *testing.T) {
	t.Helper()
	for _, c := range []string{"unshare", "hostname"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s(1) to give B a host name of its own (apt-get install util-linux hostname)", c)
		}
	}
}

// cleanEnv is the environment of the commands: the test's, without what
// changes the rendering (color, terminal) so that outputs are stable.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "COLORTERM", "COLORFGBG", "TERM", "TTY_FORCE":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// command returns tbrdma args... in namespace ns (with the host name
// hostname when it is not "": a UTS namespace of its own, as another
// machine has).
func (l *link) command(ctx context.Context, t *testing.T, ns, hostname string, args ...string) *exec.Cmd {
	bin := tbrdma(t)
	argv := []string{"netns", "exec", ns}
	if hostname != "" {
		argv = append(argv, "unshare", "--uts", "sh", "-c", `hostname "$0" && exec "$@"`, hostname)
	}
	argv = append(argv, bin)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// result is what a finished command left.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs tbrdma args... in ns and waits for it, at most timeout.
func (l *link) run(t *testing.T, ns string, timeout time.Duration, args ...string) result {
	t.Helper()
	tbrdma(t) // build first: the timeout is for the command, not for go build
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := l.command(ctx, t, ns, "", args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String(), code: exitCode(err)}
	if ctx.Err() != nil {
		t.Fatalf("tbrdma %s in %s did not end within %v\n%v", strings.Join(args, " "), ns, timeout, r)
	}
	t.Logf("%s: tbrdma %s: exit %d in %v", ns, strings.Join(args, " "), r.code, time.Since(start).Round(time.Millisecond))
	return r
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// proc is a tbrdma running in the background.
type proc struct {
	cmd    *exec.Cmd
	stdout lockedBuffer
	mu     sync.Mutex
	stderr bytes.Buffer
	lines  chan string // stderr, line by line
	done   chan struct{}
	err    error
}

// start starts tbrdma args... in ns; it is killed when the test ends if it
// still runs.
func (l *link) start(t *testing.T, ns, hostname string, args ...string) *proc {
	t.Helper()
	return l.startOut(t, ns, hostname, nil, args...)
}

// startOut is start with stdout on out (nil: the proc's buffer).
func (l *link) startOut(t *testing.T, ns, hostname string, out *os.File, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{cmd: l.command(ctx, t, ns, hostname, args...), lines: make(chan string, 100), done: make(chan struct{})}
	p.cmd.Stdout = &p.stdout
	if out != nil {
		p.cmd.Stdout = out
	}
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// waitLine waits until the process prints a line on stderr containing
// substr and returns it.
func (p *proc) waitLine(t *testing.T, substr string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case s := <-p.lines:
			if strings.Contains(s, substr) {
				return s
			}
		case <-p.done:
			t.Fatalf("exited (%v) before printing %q:\n%s", p.err, substr, p.errText())
		case <-deadline:
			t.Fatalf("no %q on stderr within %v:\n%s", substr, timeout, p.errText())
		}
	}
}

func (p *proc) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// wait waits for the process to end, at most timeout, and returns its exit
// code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return exitCode(p.err)
	case <-time.After(timeout):
		t.Fatalf("did not exit within %v:\n%s", timeout, p.errText())
	}
	return -1
}

// waitListenTCP waits until a socket listens on TCP port in ns (read from
// the namespace's /proc/net/tcp{,6}: a probe connection would be the one
// connection a perftest server accepts).
func (l *link) waitListenTCP(t *testing.T, ns string, port int, p *proc) {
	t.Helper()
	want := fmt.Sprintf(":%04X ", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/tcp", "/proc/net/tcp6").Output()
		if err != nil {
			t.Fatalf("read /proc/net/tcp in %s: %v", ns, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			// sl local_address rem_address st: st 0A is LISTEN.
			if len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && f[3] == "0A" {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("the server exited (%v) before listening on TCP %d:\n%s", p.err, port, p.errText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on TCP %d in %s after 10s:\n%s", port, ns, p.errText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pty is a pseudo-terminal: the tbrdma under test writes to tty (its
// stdout is then a terminal), the test reads what it wrote from master.
type pty struct {
	master, tty *os.File
}

func openPTY(t *testing.T) *pty {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal (/dev/ptmx: %v)", err)
	}
	master := os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		t.Fatalf("pty number: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatalf("open pty: %v", err)
	}
	// Raw output: no \n -> \r\n.
	if tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err == nil {
		tio.Oflag &^= unix.OPOST
		unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio)
	}
	p := &pty{master: master, tty: tty}
	t.Cleanup(func() { master.Close(); tty.Close() })
	return p
}

// runTTY runs tbrdma args... in ns (ns "" : this namespace) with stdout on
// a pseudo-terminal and env added to the clean environment, and returns
// what it printed there and on stderr.
func runTTY(t *testing.T, l *link, ns string, env []string, args ...string) result {
	t.Helper()
	p := openPTY(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var cmd *exec.Cmd
	if ns == "" {
		cmd = exec.CommandContext(ctx, tbrdma(t), args...)
	} else {
		cmd = l.command(ctx, t, ns, "", args...)
	}
	cmd.Env = cleanEnv(append([]string{"TERM=xterm-256color"}, env...)...)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = p.tty, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.tty.Close() // the child has it; reading ends (EIO) when it exits
	var out bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		io.Copy(&out, p.master) // EIO at the end
		close(readDone)
	}()
	err := cmd.Wait()
	<-readDone
	if ctx.Err() != nil {
		t.Fatalf("tbrdma %s on a terminal did not end within 30s", strings.Join(args, " "))
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: exitCode(err)}
}

// lockedBuffer is a bytes.Buffer that a process writes while the test
// reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *lockedBuffer) String() string { return string(b.bytes()) }
