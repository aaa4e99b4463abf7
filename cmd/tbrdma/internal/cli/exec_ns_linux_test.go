package cli

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// viewProcess is tbrdmaProcess for "exec --ns=on args..." with a fake
// library; it skips the test where this machine has no device or forbids
// the namespaces (no root and no unprivileged user namespaces).
func viewProcess(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	devs, err := verbs.Devices(nil)
	if err != nil || len(devs) == 0 {
		t.Skip("no network interface with an address: the library would list no device")
	}
	lib := realDir(t) + "/lib"
	fakeLib(t, lib)
	probe := tbrdmaProcess(t, []string{libDirEnv + "=" + lib}, "exec", "--ns=on", "true")
	if out, err := probe.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "cannot create") || strings.Contains(string(out), "cannot make the device files") {
			t.Skipf("namespaces are not available here: %s", bytes.TrimSpace(out))
		}
		t.Fatalf("exec --ns=on true: %v: %s", err, out)
	}
	return tbrdmaProcess(t, []string{libDirEnv + "=" + lib}, append([]string{"exec", "--ns=on"}, args...)...)
}

// TestExecView runs programs in the device view: the files are there for
// the first device, the program is tbrdma's child, and its exit status
// and signals are passed on both ways.
func TestExecView(t *testing.T) {
	devs, _ := verbs.Devices(nil)
	_, hostHasIB := os.Stat("/dev/infiniband")

	t.Run("files", func(t *testing.T) {
		cmd := viewProcess(t, "sh", "-c", `test -c /dev/infiniband/uverbs0 && test -r /dev/infiniband/uverbs0 && test -w /dev/infiniband/uverbs0 &&
			test -c /dev/infiniband/rdma_cm && test -c /dev/null && echo $$ &&
			cat /sys/class/infiniband/`+devs[0].Name+`/ports/1/gid_attrs/types/1 /sys/class/infiniband_verbs/uverbs0/ibdev &&
			test -d /sys/class/net/`+devs[0].Netdev)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: stdout %q, stderr %q", err, out.String(), errOut.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 3 || lines[1] != "RoCE v2" || lines[2] != devs[0].Name {
			t.Fatalf("got %q, want the PID, RoCE v2 and %s", lines, devs[0].Name)
		}
		if pid, _ := strconv.Atoi(lines[0]); pid == cmd.Process.Pid || pid == 0 {
			t.Errorf("program PID %q: want a child of tbrdma (%d)", lines[0], cmd.Process.Pid)
		}
		if _, err := os.Stat("/dev/infiniband"); errors.Is(hostHasIB, os.ErrNotExist) && err == nil {
			t.Error("/dev/infiniband appeared outside the program's namespace")
		}
	})

	t.Run("exit status", func(t *testing.T) {
		err := viewProcess(t, "sh", "-c", "exit 42").Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 42 {
			t.Errorf("got %v, want exit status 42", err)
		}
	})

	t.Run("killed", func(t *testing.T) {
		// SIGSEGV, whose default action the Go runtime's handler would
		// otherwise replace with a Go crash report.
		var errOut bytes.Buffer
		cmd := viewProcess(t, "sh", "-c", "kill -SEGV $$")
		cmd.Stderr = &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("got %v, want death by SIGSEGV", err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSEGV || errOut.Len() > 0 {
			t.Errorf("status %v, stderr %q: want killed by SIGSEGV, nothing printed", ee.ProcessState, errOut.String())
		}
	})

	t.Run("signal forwarded", func(t *testing.T) {
		cmd := viewProcess(t, "sh", "-c", `trap "exit 7" TERM; echo ready; while :; do sleep 0.05; done`)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		ready := make(chan bool, 1)
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			ready <- line == "ready\n"
		}()
		select {
		case ok := <-ready:
			if !ok {
				t.Fatal("the program did not start")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the program did not say ready within 10 s")
		}
		cmd.Process.Signal(syscall.SIGTERM)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Errorf("got %v, want exit status 7 (the program's SIGTERM trap)", err)
		}
	})

	t.Run("bad mode", func(t *testing.T) {
		var errOut bytes.Buffer
		cmd := tbrdmaProcess(t, nil, "exec", "--ns=maybe", "true")
		cmd.Stderr = &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitUsage || !strings.Contains(errOut.String(), `--ns: "maybe" is not auto, on or off`) {
			t.Errorf("got %v, stderr %q; want exit 2 and the reason", err, errOut.String())
		}
	})
}
