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
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
			t.Fatalf("%s is not installed (apt-get install ibverbs-utils perftest rdmacm-utils python3-pyverbs): %v", tool, err)
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

// NewLink creates a link on its own /24 of 198.18.0.0/15 (198.18.100.0 and
// up) and deletes it when the test ends.
func NewLink(t testing.TB) *Link {
	t.Helper()
	need(t, "ip")
	subnetMu.Lock()
	n := subnetNext
	subnetNext++
	subnetMu.Unlock()
	id := fmt.Sprintf("%05x", rand.Uint32()&0xfffff)
	l := &Link{NsA: "tbabi-" + id + "-a", NsB: "tbabi-" + id + "-b",
		AddrA: fmt.Sprintf("198.18.%d.1", n), AddrB: fmt.Sprintf("198.18.%d.2", n)}
	vA, vB := "tba"+id+"a", "tba"+id+"b"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", l.NsA).Run()
		exec.Command("ip", "netns", "del", l.NsB).Run()
	})
	ip("netns", "add", l.NsA)
	ip("netns", "add", l.NsB)
	ip("link", "add", vA, "type", "veth", "peer", "name", vB)
	ip("link", "set", vA, "netns", l.NsA)
	ip("link", "set", vB, "netns", l.NsB)
	for _, s := range []struct{ ns, dev, addr string }{{l.NsA, vA, l.AddrA}, {l.NsB, vB, l.AddrB}} {
		ip("-n", s.ns, "link", "set", s.dev, "name", "thunderbolt0")
		ip("-n", s.ns, "link", "set", "thunderbolt0", "mtu", "65520")
		ip("-n", s.ns, "addr", "add", s.addr+"/24", "dev", "thunderbolt0")
		ip("-n", s.ns, "link", "set", "lo", "up")
		ip("-n", s.ns, "link", "set", "thunderbolt0", "up")
	}
	return l
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
			cmd.Process.Kill()
			<-s.done
		}
	})
	return s
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
