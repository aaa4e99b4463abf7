package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fakeLib makes dir holding the library's files, empty: exec checks only
// that they are there, so no C compiler is needed.
func fakeLib(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range libNames(runtime.GOOS) {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// realDir is t.TempDir with its symbolic links resolved (macOS's /var is
// one), as exec resolves the executable's path.
func realDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// execCall is what a fake Exec was asked to run.
type execCall struct {
	path string
	argv []string
	env  []string
}

// fakeExecSys is an execSys whose environment is env, executable exe and
// working directory cwd, and whose Exec records its call.
func fakeExecSys(env map[string]string, exe, cwd string, call *execCall) execSys {
	return execSys{
		GOOS:       runtime.GOOS,
		Getenv:     func(k string) string { return env[k] },
		Environ:    func() []string { return []string{"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=/opt/old", "HOME=/home/x"} },
		Executable: func() (string, error) { return exe, nil },
		Getwd:      func() (string, error) { return cwd, nil },
		LookPath: func(p string) (string, error) {
			if p == "ib_write_bw" {
				return "/opt/perftest/bin/ib_write_bw", nil
			}
			return exec.LookPath(p)
		},
		Exec: func(path string, argv, env []string) error {
			*call = execCall{path, argv, env}
			return nil
		},
		Exit: func(code int) { panic("Exit called in a test") },
	}
}

// TestExecLibDirOrder removes the library from each place of the search
// order in turn, so that the next one is used.
func TestExecLibDirOrder(t *testing.T) {
	root := realDir(t)
	envDir := filepath.Join(root, "envlib")
	binDir := filepath.Join(root, "inst", "bin")
	besideExe := filepath.Join(binDir, "lib")
	installed := filepath.Join(root, "inst", "lib", "tbrdma")
	checkout := filepath.Join(root, "src", "tbrdma")
	inCheckout := filepath.Join(checkout, "build", "lib")
	cwd := filepath.Join(checkout, "verbs", "internal")
	for _, d := range []string{envDir, besideExe, installed, inCheckout} {
		fakeLib(t, d)
	}
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(checkout, "go.mod"), []byte("module github.com/tbrdma/tbrdma\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The executable is reached through a symbolic link (as in
	// /usr/local/bin/tbrdma -> /opt/…/bin/tbrdma): its real place counts.
	exe := filepath.Join(binDir, "tbrdma")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "tbrdma-link")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{libDirEnv: envDir}
	sys := fakeExecSys(env, link, cwd, new(execCall))
	want := func(step, dir string) {
		t.Helper()
		got, looked := findLibDir(sys)
		if got != dir {
			t.Fatalf("%s: library dir %q, want %q; looked at %+v", step, got, dir, looked)
		}
	}
	want("TBRDMA_LIBDIR set", envDir)

	// Relative: made absolute against the working directory.
	env[libDirEnv] = "../../build/lib"
	want("relative TBRDMA_LIBDIR", inCheckout)

	// Set but without the library: no fallback to the other places.
	env[libDirEnv] = filepath.Join(root, "nowhere")
	want("TBRDMA_LIBDIR without the library", "")
	_, looked := findLibDir(sys)
	if len(looked) != 1 || looked[0].lack != "no such directory" {
		t.Errorf("TBRDMA_LIBDIR set: looked at %+v, want only it", looked)
	}

	delete(env, libDirEnv)
	want("beside the executable", besideExe)
	// Half a library (librdmacm.so.1 missing) is skipped.
	if err := os.Remove(filepath.Join(besideExe, libNames(runtime.GOOS)[1])); err != nil {
		t.Fatal(err)
	}
	want("installed layout", installed)
	if err := os.RemoveAll(installed); err != nil {
		t.Fatal(err)
	}
	want("checkout", inCheckout)

	// A go.mod of another module is no tbrdma checkout.
	if err := os.WriteFile(filepath.Join(checkout, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want("other module", "")
	_, looked = findLibDir(sys)
	var lines []string
	for _, p := range looked {
		lines = append(lines, p.dir+" | "+p.origin+" | "+p.lack)
	}
	wantLines := []string{
		" | $TBRDMA_LIBDIR | not set",
		besideExe + " | lib/ beside " + exe + " | no " + libNames(runtime.GOOS)[1],
		installed + " | ../lib/tbrdma from " + binDir + " | no such directory",
		" | a tbrdma checkout's build/lib | the current directory is not in a tbrdma checkout",
	}
	if !slices.Equal(lines, wantLines) {
		t.Errorf("looked at:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(wantLines, "\n"))
	}
}

func TestExecMissingLibraryMessage(t *testing.T) {
	root := realDir(t)
	exe := filepath.Join(root, "bin", "tbrdma")
	f, out, errOut := testFactory()
	var call execCall
	o := &execOptions{IO: f.IO, Sys: fakeExecSys(nil, exe, root, &call), Argv: []string{"ib_write_bw"}}
	if code := runExec(o); code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
	if call.path != "" || out.Len() != 0 {
		t.Errorf("ran %q with no library; stdout %q", call.path, out)
	}
	msg := errOut.String()
	for _, want := range []string{
		"tbrdma: exec: tbrdma's C library (libibverbs.so.1 and librdmacm.so.1) was not found:\n",
		"  $TBRDMA_LIBDIR: not set\n",
		"  " + filepath.Join(root, "bin", "lib") + " (lib/ beside " + exe + "): no such directory\n",
		"  " + filepath.Join(root, "lib", "tbrdma") + " (../lib/tbrdma from " + filepath.Join(root, "bin") + "): no such directory\n",
		"  a tbrdma checkout's build/lib: the current directory is not in a tbrdma checkout\n",
		"build it with: cabi/build.sh (in a tbrdma checkout; needs gcc libibverbs-dev librdmacm-dev)",
		"or set TBRDMA_LIBDIR to the directory holding libibverbs.so.1 and librdmacm.so.1\n",
	} {
		if runtime.GOOS == "darwin" {
			break // the names differ; checked below
		}
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}

	// On macOS the message says that the library cannot be built there.
	f, _, errOut = testFactory()
	o = &execOptions{IO: f.IO, Sys: fakeExecSys(nil, exe, root, &call), Argv: []string{"ib_write_bw"}}
	o.Sys.GOOS = "darwin"
	if code := runExec(o); code != ExitUsage {
		t.Fatalf("darwin: exit %d", code)
	}
	if msg := errOut.String(); !strings.Contains(msg, "libibverbs.1.dylib and librdmacm.1.dylib") ||
		!strings.Contains(msg, "cannot be built for macOS yet") || strings.Contains(msg, "apt-get") {
		t.Errorf("darwin message:\n%s", msg)
	}
}

// TestExecRuns checks what exec hands to execve: the program found in
// PATH, argv as given, the environment with the library first in
// LD_LIBRARY_PATH.
func TestExecRuns(t *testing.T) {
	lib := filepath.Join(realDir(t), "lib")
	fakeLib(t, lib)
	f, out, errOut := testFactory()
	var call execCall
	o := parseExec(t, f, "ib_write_bw", "-d", "tb_thunderbolt0", "-x", "1", "--help", "--", "198.18.0.1")
	o.Sys = fakeExecSys(map[string]string{libDirEnv: lib}, "/nonexistent/tbrdma", "/", &call)
	if code := runExec(o); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if call.path != "/opt/perftest/bin/ib_write_bw" {
		t.Errorf("path %q", call.path)
	}
	if want := []string{"ib_write_bw", "-d", "tb_thunderbolt0", "-x", "1", "--help", "--", "198.18.0.1"}; !slices.Equal(call.argv, want) {
		t.Errorf("argv %q, want %q", call.argv, want)
	}
	if want := []string{"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=" + lib + ":/opt/old", "HOME=/home/x"}; runtime.GOOS != "darwin" && !slices.Equal(call.env, want) {
		t.Errorf("env %q, want %q", call.env, want)
	}
	if out.Len() != 0 || errOut.Len() != 0 {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
}

// TestExecDarwin: on macOS the library's names and the loader's variable
// differ, and a system binary gets a warning (SIP strips DYLD_*).
func TestExecDarwin(t *testing.T) {
	lib := filepath.Join(realDir(t), "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range libNames("darwin") {
		if err := os.WriteFile(filepath.Join(lib, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path string
		warn bool
	}{{"/usr/bin/python3", true}, {"/opt/homebrew/bin/python3", false}} {
		f, _, errOut := testFactory()
		var call execCall
		sys := fakeExecSys(map[string]string{libDirEnv: lib}, "/x/tbrdma", "/", &call)
		sys.GOOS = "darwin"
		sys.LookPath = func(string) (string, error) { return c.path, nil }
		o := &execOptions{IO: f.IO, Sys: sys, Argv: []string{"python3", "x.py"}}
		if code := runExec(o); code != ExitOK {
			t.Fatalf("%s: exit %d: %s", c.path, code, errOut)
		}
		if !slices.Contains(call.env, "DYLD_LIBRARY_PATH="+lib) || !slices.Contains(call.env, "LD_LIBRARY_PATH=/opt/old") {
			t.Errorf("%s: env %q", c.path, call.env)
		}
		if got := strings.Contains(errOut.String(), "System Integrity Protection"); got != c.warn {
			t.Errorf("%s: warning %v, want %v: %q", c.path, got, c.warn, errOut)
		}
	}
}

func parseExec(t *testing.T, f *Factory, args ...string) *execOptions {
	t.Helper()
	var got *execOptions
	cmd := newCmdExec(f, func(o *execOptions) error { got = o; return nil })
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return got
}

func TestExecArgs(t *testing.T) {
	f, _, _ := testFactory()
	for _, c := range []struct{ args, want []string }{
		{[]string{"--", "prog", "-x"}, []string{"prog", "-x"}},
		{[]string{"prog", "--", "-x"}, []string{"prog", "--", "-x"}},
		{[]string{"python3", "-c", "print(1)", "--print-libdir"}, []string{"python3", "-c", "print(1)", "--print-libdir"}},
	} {
		if o := parseExec(t, f, c.args...); !slices.Equal(o.Argv, c.want) {
			t.Errorf("%q: argv %q, want %q", c.args, o.Argv, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec"}, "exec needs a program to run: tbrdma exec [--] PROGRAM [ARGS...]"},
		{[]string{"exec", "--"}, "exec needs a program to run"},
		{[]string{"exec", "--print-libdir", "prog"}, "--print-libdir takes no program"},
		{[]string{"exec", "--nope", "prog"}, "unknown flag: --nope"},
	} {
		f, out, errOut := testFactory()
		if code := run(context.Background(), f, c.args); code != ExitUsage || !strings.Contains(errOut.String(), c.want) ||
			!strings.Contains(errOut.String(), "Usage: tbrdma exec [--] PROGRAM [ARGS...]") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stderr lacks %q or the usage:\n%s", c.args, code, c.want, errOut)
		}
	}
}

func TestExecPrintLibDir(t *testing.T) {
	lib := filepath.Join(realDir(t), "lib")
	fakeLib(t, lib)
	t.Setenv(libDirEnv, lib)
	f, out, errOut := testFactory()
	if code := run(context.Background(), f, []string{"exec", "--print-libdir"}); code != ExitOK || out.String() != lib+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestExecProgramNotFound(t *testing.T) {
	root := realDir(t)
	lib := filepath.Join(root, "lib")
	fakeLib(t, lib)
	noexec := filepath.Join(root, "data.txt")
	if err := os.WriteFile(noexec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prog string
		code int
		want string
	}{
		{"no-such-program-tbrdma", execNotFound, "tbrdma: exec: no-such-program-tbrdma: command not found\n"},
		{"ibv_no_such_tool", execNotFound, "tbrdma: exec: ibv_no_such_tool: command not found (Debian and Ubuntu: apt-get install ibverbs-utils)\n"},
		{"./no-such-file", execNotFound, "tbrdma: exec: ./no-such-file: no such file\n"},
		{noexec, execCannotRun, "tbrdma: exec: " + noexec + ": permission denied (not executable)\n"},
	} {
		f, _, errOut := testFactory()
		var call execCall
		o := &execOptions{IO: f.IO, Sys: fakeExecSys(map[string]string{libDirEnv: lib}, "/x/tbrdma", root, &call), Argv: []string{c.prog}}
		if code := runExec(o); code != c.code || errOut.String() != c.want || call.path != "" {
			t.Errorf("%s: exit %d (want %d), stderr %q (want %q)", c.prog, code, c.code, errOut, c.want)
		}
	}

	// execve itself failing (here: a file with no #! and no ELF header)
	// is 126.
	f, _, errOut := testFactory()
	o := &execOptions{IO: f.IO, Sys: fakeExecSys(map[string]string{libDirEnv: lib}, "/x/tbrdma", root, new(execCall)), Argv: []string{"ib_write_bw"}}
	o.Sys.Exec = func(string, []string, []string) error { return syscall.ENOEXEC }
	if code := runExec(o); code != execCannotRun || !strings.Contains(errOut.String(), "tbrdma: exec: /opt/perftest/bin/ib_write_bw: ") {
		t.Errorf("ENOEXEC: exit %d, stderr %q", code, errOut)
	}
}

func TestPrependPath(t *testing.T) {
	for _, c := range []struct{ env, want []string }{
		{[]string{"A=1"}, []string{"A=1", "LD_LIBRARY_PATH=/l"}},
		{[]string{"LD_LIBRARY_PATH="}, []string{"LD_LIBRARY_PATH=/l"}},
		{[]string{"LD_LIBRARY_PATH=/a:/b", "B=2"}, []string{"LD_LIBRARY_PATH=/l:/a:/b", "B=2"}},
		{[]string{"LD_LIBRARY_PATH=/l:/a"}, []string{"LD_LIBRARY_PATH=/l:/a"}},
		{[]string{"LD_LIBRARY_PATH=/l"}, []string{"LD_LIBRARY_PATH=/l"}},
		{[]string{"LD_LIBRARY_PATH=/lib2"}, []string{"LD_LIBRARY_PATH=/l:/lib2"}},
		{[]string{"LD_LIBRARY_PATH=/a", "LD_LIBRARY_PATH=/b"}, []string{"LD_LIBRARY_PATH=/l:/a"}},
	} {
		if got := prependPath(c.env, "LD_LIBRARY_PATH", "/l"); !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.env, got, c.want)
		}
	}
	if got := prependPath([]string{"LD_LIBRARY_PATH=/x"}, libPathVar("darwin"), "/l"); !slices.Equal(got, []string{"LD_LIBRARY_PATH=/x", "DYLD_LIBRARY_PATH=/l"}) {
		t.Errorf("darwin: %q", got)
	}
}

// shPath is the sh that exec runs.
func shPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return p
}

// execHelperEnv makes TestExecHelperProcess run tbrdma's CLI on the
// arguments after "--": the test binary becomes a tbrdma process, and exec
// replaces it as it replaces the real one.
const execHelperEnv = "TBRDMA_TEST_EXEC_HELPER"

func TestExecHelperProcess(t *testing.T) {
	if os.Getenv(execHelperEnv) != "1" {
		return
	}
	args := os.Args
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[i+1:]
	}
	os.Exit(run(context.Background(), NewFactory(), args))
}

// tbrdmaProcess returns a command running "tbrdma args..." in a process of
// its own (the test binary as TestExecHelperProcess), with env added.
func tbrdmaProcess(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestExecHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{execHelperEnv + "=1"}, env...)...)
	return cmd
}

// TestExecProcess runs real programs through exec in a process of its own:
// the environment they see, and that their exit status and signals are
// what the parent sees (exec replaced tbrdma, keeping its PID).
func TestExecProcess(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("exec replaces the process on Unix only")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	lib := filepath.Join(realDir(t), "lib")
	fakeLib(t, lib)
	libEnv := libDirEnv + "=" + lib
	key := libPathVar(runtime.GOOS)
	output := func(cmd *exec.Cmd) (string, string, error) {
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}

	t.Run("library path", func(t *testing.T) {
		if runtime.GOOS == "darwin" {
			t.Skip("macOS removes DYLD_LIBRARY_PATH when it starts /bin/sh (SIP)")
		}
		for _, c := range []struct {
			old  string // "-": unset
			want string
		}{{"-", lib}, {"", lib}, {"/opt/x:/opt/y", lib + ":/opt/x:/opt/y"}} {
			env := []string{libEnv}
			cmd := tbrdmaProcess(t, env, "exec", "sh", "-c", `echo "${`+key+`-unset}"`)
			cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
			if c.old != "-" {
				cmd.Env = append(cmd.Env, key+"="+c.old)
			}
			out, errOut, err := output(cmd)
			if err != nil || out != c.want+"\n" {
				t.Errorf("%s=%q: got %q, want %q (%v; stderr %q)", key, c.old, out, c.want+"\n", err, errOut)
			}
		}
	})

	t.Run("same process", func(t *testing.T) {
		// --ns=off: no device view, whose program is tbrdma's child
		// (exec_ns_linux_test.go).
		cmd := tbrdmaProcess(t, []string{libEnv, nsEnv + "=off"}, "exec", "--", "sh", "-c", `echo $$; echo "$0|$1|$2"`, "zero", "--one", "-2")
		out, errOut, err := output(cmd)
		if want := strconv.Itoa(cmd.Process.Pid) + "\nzero|--one|-2\n"; err != nil || out != want {
			t.Errorf("got %q, want %q (%v; stderr %q)", out, want, err, errOut)
		}
	})

	t.Run("exit status", func(t *testing.T) {
		_, errOut, err := output(tbrdmaProcess(t, []string{libEnv}, "exec", "sh", "-c", "exit 42"))
		var ee *exec.ExitError
		if runtime.GOOS == "darwin" {
			errOut = strings.ReplaceAll(errOut, sipWarning(libPathVar("darwin"), shPath(t)), "")
		}
		if !errors.As(err, &ee) || ee.ExitCode() != 42 || errOut != "" {
			t.Errorf("got %v, want exit status 42 (stderr %q)", err, errOut)
		}
	})

	t.Run("signal", func(t *testing.T) {
		_, errOut, err := output(tbrdmaProcess(t, []string{libEnv}, "exec", "sh", "-c", "kill -TERM $$; sleep 10"))
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("got %v, want death by SIGTERM (stderr %q)", err, errOut)
		}
		ws, ok := ee.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Errorf("status %v, want killed by SIGTERM", ee.ProcessState)
		}
	})

	t.Run("not found", func(t *testing.T) {
		_, errOut, err := output(tbrdmaProcess(t, []string{libEnv}, "exec", "no-such-program-tbrdma", "-x"))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != execNotFound || errOut != "tbrdma: exec: no-such-program-tbrdma: command not found\n" {
			t.Errorf("got %v, stderr %q; want exit 127 and the message", err, errOut)
		}
	})

	t.Run("no library", func(t *testing.T) {
		nowhere := filepath.Join(filepath.Dir(lib), "nowhere")
		_, errOut, err := output(tbrdmaProcess(t, []string{libDirEnv + "=" + nowhere}, "exec", "sh", "-c", "echo ran"))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitUsage || !strings.Contains(errOut, nowhere+" ($TBRDMA_LIBDIR): no such directory") {
			t.Errorf("got %v, stderr %q; want exit 2 and the directory", err, errOut)
		}
	})
}
