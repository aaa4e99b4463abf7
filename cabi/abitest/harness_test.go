//go:build tbrdma_abitest

// Package abitest runs stock, unmodified rdma-core programs (ibverbs-utils,
// perftest, rdmacm-utils, pyverbs) over tbrdma's C library between two
// network namespaces joined by a thunderbolt0 veth pair, with no RDMA in the
// kernel. It needs root, the library (cabi/build.sh; TBRDMA_BUILD names the
// directory build.sh wrote, default build/ at the top of the checkout) and
// the Debian packages ibverbs-utils perftest rdmacm-utils python3-pyverbs;
// .ci/run installs them and runs:
//
//	go test -tags tbrdma_abitest ./cabi/abitest
//
// The build tag keeps it out of `go test ./...`, which must pass on a
// machine without a C compiler, the rdma-core headers or root.
package abitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// progress prints one line on stderr, so a long run says where it is
// without -v.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "abitest: "+format+"\n", args...)
}

// buildDir is where cabi/build.sh put the library (lib/) and tbrdma.
func buildDir(t testing.TB) string {
	t.Helper()
	d := os.Getenv("TBRDMA_BUILD")
	if d == "" {
		d = filepath.Join("..", "..", "build")
	}
	d, err := filepath.Abs(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "lib", "libibverbs.so.1")); err != nil {
		t.Fatalf("no tbrdma C library in %s/lib: build it with cabi/build.sh (or set TBRDMA_BUILD): %v", d, err)
	}
	return d
}

func libDir(t testing.TB) string { return filepath.Join(buildDir(t), "lib") }

// tbrdmaBin is the tbrdma binary build.sh built beside the library.
func tbrdmaBin(t testing.TB) string { return filepath.Join(buildDir(t), "tbrdma") }

// need skips nothing: in this package a missing tool is a failure, since
// .ci/run installs everything the tests use.
func need(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("abitest needs root (network namespaces): run it as root, as .ci/run does")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (.ci/run installs every package abitest needs: CABI_APT_PACKAGES): %v", tool, err)
		}
	}
}

// Link is two network namespaces, A and B, joined by a veth pair named
// thunderbolt0 on both sides (MTU 65520), with AddrA and AddrB on it.
type Link struct {
	NsA, NsB     string
	AddrA, AddrB string
}

var subnetMu sync.Mutex
var subnetNext = 100

// allocSubnet returns the third octet of a /24 of 198.18.0.0/15 that no
// other link of this test binary uses.
func allocSubnet() int {
	subnetMu.Lock()
	defer subnetMu.Unlock()
	n := subnetNext
	subnetNext++
	return n
}

// NewLink creates a link on its own /24 of 198.18.0.0/15 (198.18.100.0 and
// up) and deletes it when the test ends.
func NewLink(t testing.TB) *Link {
	t.Helper()
	need(t, "ip")
	n := allocSubnet()
	id := fmt.Sprintf("%05x", rand.Uint32()&0xfffff)
	l := &Link{NsA: "tbabi-" + id + "-a", NsB: "tbabi-" + id + "-b",
		AddrA: fmt.Sprintf("198.18.%d.1", n), AddrB: fmt.Sprintf("198.18.%d.2", n)}
	addNetns(t, l.NsA)
	addNetns(t, l.NsB)
	veth(t, l.NsA, "thunderbolt0", l.AddrA, l.NsB, "thunderbolt0", l.AddrB)
	return l
}

// addNetns creates namespace ns with lo up, deleted when the test ends.
func addNetns(t testing.TB, ns string) {
	t.Helper()
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "netns", "add", ns)
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
}

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// veth joins namespaces a and b with a veth pair named devA in a and devB
// in b, addresses addrA and addrB (/24), MTU 65520 as on Thunderbolt.
func veth(t testing.TB, a, devA, addrA, b, devB, addrB string) {
	t.Helper()
	id := fmt.Sprintf("%05x", rand.Uint32()&0xfffff)
	tmpA, tmpB := "tbm"+id+"a", "tbm"+id+"b"
	ipCmd(t, "link", "add", tmpA, "type", "veth", "peer", "name", tmpB)
	for _, s := range []struct{ ns, tmp, dev, addr string }{{a, tmpA, devA, addrA}, {b, tmpB, devB, addrB}} {
		ipCmd(t, "link", "set", s.tmp, "netns", s.ns)
		ipCmd(t, "-n", s.ns, "link", "set", s.tmp, "name", s.dev)
		ipCmd(t, "-n", s.ns, "link", "set", s.dev, "mtu", "65520")
		ipCmd(t, "-n", s.ns, "addr", "add", s.addr+"/24", "dev", s.dev)
		ipCmd(t, "-n", s.ns, "link", "set", s.dev, "up")
	}
}

// Command returns a command that runs argv in namespace ns over the
// library (LD_LIBRARY_PATH), as `tbrdma exec` would run it.
func Command(ctx context.Context, t testing.TB, ns string, argv ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"netns", "exec", ns, "env", "LD_LIBRARY_PATH=" + libDir(t)}, argv...)
	return exec.CommandContext(ctx, "ip", args...)
}

// CommandNative runs argv in ns without the library: the tbrdma CLI, or a
// tool that must not load it.
func CommandNative(ctx context.Context, ns string, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
}

// Result is what a finished command left.
type Result struct {
	Out  string // stdout and stderr, interleaved
	Err  error  // nil for exit 0
	Took time.Duration
}

// Started is a command running in the background.
type Started struct {
	cmd   *exec.Cmd
	buf   *syncBuffer
	start time.Time
	done  chan struct{}
	res   Result
}

// Start runs cmd in the background; Wait collects it. A test that ends
// first kills it.
func Start(t testing.TB, cmd *exec.Cmd) *Started {
	t.Helper()
	s := &Started{cmd: cmd, buf: &syncBuffer{}, start: time.Now(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.buf, s.buf
	cmd.WaitDelay = 2 * time.Second
	// The context's end kills what the command started too (a shell's
	// children, tbrdma exec's program), not only the command.
	cmd.Cancel = func() error {
		// A program still running when its time is up is a hang to
		// explain: its threads' stacks go into its output first.
		dumpStacks(s.buf, cmd.Process.Pid)
		killTree(cmd.Process.Pid)
		return nil
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	go func() {
		err := cmd.Wait()
		s.res = Result{Out: s.buf.String(), Err: err, Took: time.Since(s.start)}
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			killTree(cmd.Process.Pid)
			<-s.done
		}
	})
	return s
}

// killTree kills pid and every process under it (SIGKILL), children
// first, so that none is left behind reparented to init.
func killTree(pid int) {
	for _, c := range children(pid) {
		killTree(c)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// children lists the processes whose parent is pid (from /proc).
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, c)
		}
	}
	return kids
}

// Wait waits for the command to end.
func (s *Started) Wait() Result {
	<-s.done
	return s.res
}

// Output is what the command printed so far.
func (s *Started) Output() string { return s.buf.String() }

// WaitFor waits until the command's output contains want (a server saying
// it listens), the command ends, or d passes; it reports whether want came.
func (s *Started) WaitFor(want string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(s.buf.String(), want) {
			return true
		}
		select {
		case <-s.done:
			return strings.Contains(s.buf.String(), want)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// Run runs cmd to the end.
func Run(t testing.TB, cmd *exec.Cmd) Result { return Start(t, cmd).Wait() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Pair runs a server in A and, once the server printed ready (or after a
// short pause when ready is ""), a client in B; both must end within
// timeout. It returns both results.
func Pair(t testing.TB, timeout time.Duration, server, client func(ctx context.Context) *exec.Cmd, ready string) (srv, cli Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s := Start(t, server(ctx))
	if ready != "" {
		if !s.WaitFor(ready, 10*time.Second) {
			cancel()
			r := s.Wait()
			t.Fatalf("server did not print %q within 10s: %v\n%s", ready, r.Err, r.Out)
		}
	} else {
		time.Sleep(500 * time.Millisecond)
	}
	c := Start(t, client(ctx))
	cli = c.Wait()
	srv = s.Wait()
	return srv, cli
}

// End is one side of a pairing: argv run in a namespace over the library
// (Lib) or without it (Native: the tbrdma CLI).
type End struct {
	Lib  bool
	Argv []string
	// Stop, for a server that never ends by itself (tbrdma serve), is
	// sent to it once its client ended; it must then exit 0.
	Stop os.Signal
}

// Lib is argv run over the library (LD_LIBRARY_PATH).
func Lib(argv ...string) End { return End{Lib: true, Argv: argv} }

// Native is argv run without the library.
func Native(argv ...string) End { return End{Argv: argv} }

func (e End) String() string {
	how := "native"
	if e.Lib {
		how = "library"
	}
	return how + ": " + strings.Join(e.Argv, " ")
}

// Cmd is the command that runs e in ns. A program over the library runs
// under stdbuf -oL (coreutils; when installed): its stdout is a pipe here,
// and a program killed at a timeout would otherwise lose what it printed
// into its stdio buffer, the part of the output a failure needs most.
func (e End) Cmd(ctx context.Context, t testing.TB, ns string) *exec.Cmd {
	t.Helper()
	if e.Lib {
		argv := e.Argv
		if sb, err := exec.LookPath("stdbuf"); err == nil {
			argv = append([]string{sb, "-oL"}, argv...)
		}
		return Command(ctx, t, ns, argv...)
	}
	return CommandNative(ctx, ns, e.Argv...)
}

// Ready waits until a server started in ns is ready for its client, or
// fails with the reason (ctx ended, the server ended).
type Ready func(ctx context.Context, ns string, s *Started) error

// TCPListen is ready when a TCP socket listens on port in the namespace
// (the pingpong and perftest side channel), seen with ss, never with a
// probe connection: the server would take it for its client.
func TCPListen(port int) Ready {
	return func(ctx context.Context, ns string, s *Started) error {
		return pollReady(ctx, s, fmt.Sprintf("a TCP listener on port %d", port), func() bool {
			out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns,
				"ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
			return err == nil && len(bytes.TrimSpace(out)) > 0
		})
	}
}

// UDPBound is ready when a UDP socket is bound to port in the namespace
// (RoCEv2's 4791: the device is open) and settle more has passed. An
// rdma_cm listener in user space has no socket of its own to look for.
func UDPBound(port int, settle time.Duration) Ready {
	return func(ctx context.Context, ns string, s *Started) error {
		err := pollReady(ctx, s, fmt.Sprintf("a UDP socket on port %d", port), func() bool {
			return udpBound(ctx, ns, port)
		})
		if err != nil {
			return err
		}
		return settleAfter(ctx, s, settle)
	}
}

// CMListening is ready when the server (or a process under it) has a
// thread blocked in read(2) on an eventfd, the library's
// rdma_get_cm_event waiting on an event channel, while UDP 4791 is bound
// in the namespace; then settle more. A C rdma_cm server calls
// rdma_listen before it waits for its CONNECT_REQUEST, so this sees the
// listener without touching it (rping's event thread waits before the
// listen: settle covers the listen that follows at once). Where
// /proc/PID/syscall cannot tell, it falls back to UDPBound(4791, 1 s).
func CMListening(settle time.Duration) Ready {
	readNo, ok := map[string]int{"amd64": 0, "arm64": 63}[runtime.GOARCH]
	if !ok {
		return UDPBound(4791, time.Second)
	}
	return func(ctx context.Context, ns string, s *Started) error {
		err := pollReady(ctx, s, "an rdma_cm event wait (a thread in read(2) on an eventfd) with UDP 4791 bound", func() bool {
			return waitsOnEventfd(s.cmd.Process.Pid, readNo) && udpBound(ctx, ns, 4791)
		})
		if err != nil {
			return err
		}
		return settleAfter(ctx, s, settle)
	}
}

// settleAfter waits d more once a server looks ready, failing if it ends
// meanwhile.
func settleAfter(ctx context.Context, s *Started, d time.Duration) error {
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return fmt.Errorf("the server ended before its client started")
	}
	return nil
}

func udpBound(ctx context.Context, ns string, port int) bool {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns,
		"ss", "-Hlun", fmt.Sprintf("sport = :%d", port)).Output()
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

// waitsOnEventfd reports whether a thread of pid or of a process under it
// is in the read system call (number readNo) on an eventfd.
func waitsOnEventfd(pid, readNo int) bool {
	for _, c := range children(pid) {
		if waitsOnEventfd(c, readNo) {
			return true
		}
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b)) // number arg0 ... (arg0: the fd, in hex)
		if len(f) < 2 || f[0] != strconv.Itoa(readNo) {
			continue
		}
		fd, err := strconv.ParseInt(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); l == "anon_inode:[eventfd]" {
			return true
		}
	}
	return false
}

// OutputReady is ready when the server printed want.
func OutputReady(want string) Ready {
	return func(ctx context.Context, ns string, s *Started) error {
		return pollReady(ctx, s, fmt.Sprintf("%q in its output", want), func() bool {
			return strings.Contains(s.Output(), want)
		})
	}
}

func pollReady(ctx context.Context, s *Started, what string, ok func() bool) error {
	for {
		if ok() {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("the server ended before %s appeared", what)
		case <-ctx.Done():
			return fmt.Errorf("no %s: %v", what, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// PairResult is what both ends of a pairing left.
type PairResult struct {
	Name           string
	SrvEnd, CliEnd End
	Srv, Cli       Result
	TimedOut       bool // the pairing's timeout ended it
	CliStarted     bool // the client ran (the server was ready)
	Lingered       bool // the server was killed 10 s (3 s if the client failed) after its client ended
}

// Dump is both sides' command lines, exit statuses and output, for a
// failure message.
func (p *PairResult) Dump() string {
	var b strings.Builder
	if p.TimedOut {
		b.WriteString("(the pairing's timeout ended it: processes still running were killed)\n")
	}
	if p.Lingered {
		b.WriteString("(the server was still running 10 s (3 s if the client failed) after its client ended: killed)\n")
	}
	for _, s := range []struct {
		role string
		end  End
		r    Result
	}{{"server", p.SrvEnd, p.Srv}, {"client", p.CliEnd, p.Cli}} {
		if s.role == "client" && !p.CliStarted {
			fmt.Fprintf(&b, "--- client (%s): not started\n", s.end)
			continue
		}
		st := "exit 0"
		if s.r.Err != nil {
			st = s.r.Err.Error()
		}
		fmt.Fprintf(&b, "--- %s (%s) -> %s after %v\n%s", s.role, s.end, st,
			s.r.Took.Round(time.Millisecond), indent(s.r.Out))
	}
	return b.String()
}

func indent(s string) string {
	if s == "" {
		return "    (no output)\n"
	}
	s = strings.TrimRight(s, "\n")
	return "    | " + strings.ReplaceAll(s, "\n", "\n    | ") + "\n"
}

// OK reports whether both ends exited 0.
func (p *PairResult) OK() bool { return p.Srv.Err == nil && p.Cli.Err == nil }

// RunPair runs srv in l.NsA and, once ready says it is up, cli in l.NsB;
// both must end within timeout (then what is left is killed). Once the
// client ended, the server gets at most 10 s more to end (3 s when the
// client failed); a server with Stop is sent that signal first. It prints
// progress lines and the result; with ABITEST_SHOW set in the
// environment it also logs both sides' output when they passed.
func RunPair(t testing.TB, l *Link, name string, timeout time.Duration, srv End, ready Ready, cli End) *PairResult {
	t.Helper()
	p := &PairResult{Name: name, SrvEnd: srv, CliEnd: cli}
	progress("%s: server %s", name, srv)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s := Start(t, srv.Cmd(ctx, t, l.NsA))
	if ready == nil {
		ready = TCPListen(18515)
	}
	if err := ready(ctx, l.NsA, s); err != nil {
		p.TimedOut = ctx.Err() != nil
		cancel()
		p.Srv = s.Wait()
		progress("%s: server not ready: %v", name, err)
		t.Fatalf("%s: server not ready: %v\n%s", name, err, p.Dump())
	}
	progress("%s: client %s", name, cli)
	c := Start(t, cli.Cmd(ctx, t, l.NsB))
	p.CliStarted = true
	p.Cli = c.Wait()
	if srv.Stop != nil {
		s.cmd.Process.Signal(srv.Stop)
	}
	// A server whose client failed may wait for it for ever: 3 s.
	wait := 10 * time.Second
	if p.Cli.Err != nil {
		wait = 3 * time.Second
	}
	linger := time.NewTimer(wait)
	defer linger.Stop()
	select {
	case <-s.done:
	case <-linger.C:
		p.Lingered = true
		cancel()
	case <-ctx.Done():
	}
	p.TimedOut = !p.Lingered && ctx.Err() != nil
	p.Srv = s.Wait()
	verdict := "both exit 0"
	if !p.OK() {
		verdict = fmt.Sprintf("server: %v, client: %v", errText(p.Srv.Err), errText(p.Cli.Err))
	}
	progress("%s: %s (server %v, client %v)", name, verdict,
		p.Srv.Took.Round(time.Millisecond), p.Cli.Took.Round(time.Millisecond))
	if os.Getenv("ABITEST_SHOW") != "" {
		t.Logf("%s:\n%s", name, p.Dump())
	}
	return p
}

func errText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// RunIn runs e alone in ns within timeout.
func RunIn(t testing.TB, ns string, timeout time.Duration, e End) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Run(t, e.Cmd(ctx, t, ns))
}

// dumpStacks writes the C-level stacks of every thread of pid (gdb, when
// installed) to w: which call a hung program is in.
func dumpStacks(w io.Writer, pid int) {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, gdb, "-batch", "-p", fmt.Sprint(pid), "-ex", "thread apply all bt 30").CombinedOutput()
	fmt.Fprintf(w, "\n--- abitest: pid %d still running at the deadline; its threads:\n%s\n", pid, out)
}
