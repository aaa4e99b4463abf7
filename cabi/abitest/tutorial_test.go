//go:build tbrdma_abitest

package abitest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTutorialC is docs/tutorial-c.md as a learner follows it: build
// cabi/examples/rdma_hello.c with cc against the system's rdma-core
// headers and libibverbs, then run it with `tbrdma exec` in two namespaces,
// server in A and client in B. Both must pass all their checks (RDMA
// WRITE, READ back, FETCH_AND_ADD, and what the peer did to their memory)
// and exit 0.
func TestTutorialC(t *testing.T) {
	need(t, "cc")
	src, err := filepath.Abs(filepath.Join("..", "examples", "rdma_hello.c"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "rdma_hello")
	// The tutorial's command, plus warnings: the example must be clean.
	if out, err := exec.Command("cc", "-Wall", "-Wextra", "-Werror", src, "-o", bin, "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("cc rdma_hello.c: %v\n%s", err, out)
	}
	tb := tbrdmaBin(t)
	l := NewLink(t)

	// Without tbrdma the system's libibverbs finds no device (the kernel
	// has no RDMA here): the program says so and fails.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r := Run(t, CommandNative(ctx, l.NsA, bin)); r.Err == nil || !strings.Contains(r.Out, "no RDMA device found") {
		t.Errorf("rdma_hello without tbrdma: %v, want exit 1 and \"no RDMA device found\":\n%s", r.Err, r.Out)
	}

	srv, cli := Pair(t, 30*time.Second,
		func(ctx context.Context) *exec.Cmd { return CommandNative(ctx, l.NsA, tb, "exec", bin) },
		func(ctx context.Context) *exec.Cmd { return CommandNative(ctx, l.NsB, tb, "exec", bin, l.AddrA) },
		"waiting for a client on TCP port 7471")
	checks := []string{
		"device tb_thunderbolt0\n",
		"ok     RDMA WRITE of our greeting completed\n",
		"ok     RDMA READ returned what we wrote\n",
		"ok     FETCH_AND_ADD returned the old value 100\n",
		"ok     our inbox holds the peer's greeting\n",
		"ok     our counter is 101\n",
		"rdma_hello: all checks passed\n",
	}
	for _, s := range []struct {
		side  string
		r     Result
		local string
		inbox string
	}{
		{"server", srv, l.AddrA, `inbox:  "hello from the client"`},
		{"client", cli, l.AddrB, `inbox:  "hello from the server"`},
	} {
		if s.r.Err != nil {
			t.Errorf("%s: %v\n%s", s.side, s.r.Err, s.r.Out)
			continue
		}
		for _, want := range append(checks, "GID ::ffff:"+s.local+"\n", s.inbox+"\n") {
			if !strings.Contains(s.r.Out, want) {
				t.Errorf("%s: output lacks %q:\n%s", s.side, want, s.r.Out)
			}
		}
		if strings.Contains(s.r.Out, "FAILED") {
			t.Errorf("%s: a check failed:\n%s", s.side, s.r.Out)
		}
	}
}
