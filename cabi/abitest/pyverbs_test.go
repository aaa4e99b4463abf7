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

// pyverbsPython returns a Python that imports pyverbs: Debian's
// python3-pyverbs installs it for the distribution's /usr/bin/python3,
// which need not be the python3 first in PATH (pyenv, a venv).
func pyverbsPython(t *testing.T) string {
	t.Helper()
	cands := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	for _, py := range cands {
		if exec.Command(py, "-c", "import pyverbs.device").Run() == nil {
			return py
		}
	}
	t.Fatalf("no python3 imports pyverbs (tried %v): apt-get install python3-pyverbs", cands)
	return ""
}

// TestPyverbs runs cabi/examples/pyverbs_hello.py, unchanged, with
// `tbrdma exec python3` in two namespaces: an RC QP pair set up from
// Python, a SEND each way and an RDMA WRITE each way, every completion and
// what arrived checked by the script. Both sides must exit 0.
func TestPyverbs(t *testing.T) {
	py := pyverbsPython(t)
	script, err := filepath.Abs(filepath.Join("..", "examples", "pyverbs_hello.py"))
	if err != nil {
		t.Fatal(err)
	}
	tb := tbrdmaBin(t)
	l := NewLink(t)
	// Python loads the library late (dlopen, at "import pyverbs"), when
	// only glibc's small static TLS reserve is left for it.
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("\"cannot allocate memory in static TLS block\": see docs/cabi.md, Known problems")
		}
	})
	srv, cli := Pair(t, 60*time.Second,
		func(ctx context.Context) *exec.Cmd { return CommandNative(ctx, l.NsA, tb, "exec", py, script) },
		func(ctx context.Context) *exec.Cmd { return CommandNative(ctx, l.NsB, tb, "exec", py, script, l.AddrA) },
		"waiting for a client on TCP port 7472")
	for _, s := range []struct {
		side string
		r    Result
		peer string
	}{{"server", srv, "client"}, {"client", cli, "server"}} {
		if s.r.Err != nil {
			t.Errorf("%s: %v\n%s", s.side, s.r.Err, s.r.Out)
			continue
		}
		for _, want := range []string{
			"device tb_thunderbolt0\n",
			"ok     QP in RTS\n",
			"ok     our SEND completed (status 0)\n",
			"ok     SEND arrived: 64 bytes, 'send from the " + s.peer + "' (status 0)\n",
			"ok     our RDMA WRITE completed (status 0)\n",
			"ok     RDMA WRITE arrived: 'write from the " + s.peer + "'\n",
			"pyverbs_hello: all checks passed\n",
		} {
			if !strings.Contains(s.r.Out, want) {
				t.Errorf("%s: output lacks %q:\n%s", s.side, want, s.r.Out)
			}
		}
		if strings.Contains(s.r.Out, "FAILED") || strings.Contains(s.r.Out, "Traceback") {
			t.Errorf("%s:\n%s", s.side, s.r.Out)
		}
	}
}
