package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
)

// libDirEnv names the directory of tbrdma's C library, overriding the
// search of findLibDir.
const libDirEnv = "TBRDMA_LIBDIR"

// Exit statuses of "tbrdma exec" when it cannot become the program, as a
// POSIX shell reports them.
const (
	execCannotRun = 126 // found, but execve failed (not executable, bad format)
	execNotFound  = 127 // no such program
)

// buildHint says how to get the library; docs/cabi.md and the tests quote it.
const buildHint = "build it with: cabi/build.sh (in a tbrdma checkout; needs gcc libibverbs-dev librdmacm-dev)"

// execSys is what "tbrdma exec" needs of the operating system; tests
// replace it.
type execSys struct {
	GOOS       string
	Getenv     func(string) string
	Environ    func() []string
	Executable func() (string, error)
	Getwd      func() (string, error)
	LookPath   func(string) (string, error)
	// Exec replaces the process (execve); it returns only on failure.
	Exec func(path string, argv, env []string) error
	// Exit ends the process when exec cannot run the program.
	Exit func(code int)
	// View, when set, runs the program in the device view if its mode
	// asks for it and returns its exit status with ran set
	// (exec_ns_linux.go); ran false: Exec it as usual.
	View func(o *execOptions, path string, env []string) (code int, ran bool)
}

func realExecSys() execSys {
	return execSys{
		GOOS:       runtime.GOOS,
		Getenv:     os.Getenv,
		Environ:    os.Environ,
		Executable: os.Executable,
		Getwd:      os.Getwd,
		LookPath:   exec.LookPath,
		Exec:       syscall.Exec,
		Exit:       os.Exit,
		View:       execView,
	}
}

type execOptions struct {
	IO  *ui.IO
	Sys execSys

	PrintLibDir bool
	NS          string   // --ns: auto, on, off; "" for $TBRDMA_EXEC_NS
	Argv        []string // the program and its arguments, as given
}

// nsMode is the device view's mode: --ns, else $TBRDMA_EXEC_NS, else auto.
func (o *execOptions) nsMode() (nsMode, error) {
	if o.NS != "" {
		m, err := parseNSMode(o.NS)
		if err != nil {
			return "", fmt.Errorf("--ns: %w", err)
		}
		return m, nil
	}
	m, err := parseNSMode(o.Sys.Getenv(nsEnv))
	if err != nil {
		return "", fmt.Errorf("$%s: %w", nsEnv, err)
	}
	return m, nil
}

func newCmdExec(f *Factory, runF func(*execOptions) error) *cobra.Command {
	opts := &execOptions{IO: f.IO, Sys: realExecSys()}
	cmd := &cobra.Command{
		Use:   "exec [--] PROGRAM [ARGS...]",
		Short: "Run an unmodified RDMA program (perftest, ibv_*, rping, pyverbs, your own) over tbrdma's C library",
		Long: `Run PROGRAM over tbrdma's C library, a drop-in libibverbs.so.1 and
librdmacm.so.1: exec finds the library, puts its directory first in
LD_LIBRARY_PATH (DYLD_LIBRARY_PATH on macOS) and replaces itself with
PROGRAM, so the program's exit status and signals are its own. Everything
after PROGRAM is the program's, flags included; tbrdma's global flags
(--debug, --fault, --psk-file) do not reach it.

The library directory is the first of these that holds both files:
  1. $TBRDMA_LIBDIR (when set, the only place looked at)
  2. lib/ beside the tbrdma executable (cabi/build.sh OUTDIR writes OUTDIR/tbrdma
     and OUTDIR/lib)
  3. ../lib/tbrdma from the executable's directory (an installed layout:
     bin/tbrdma, lib/tbrdma/)
  4. build/lib of the tbrdma checkout holding the current directory

No library: exit 2 with the places looked at and how to build it. No such
PROGRAM: exit 127; PROGRAM cannot be executed: exit 126, as a shell.

On Linux, when the host has no /dev/infiniband and /sys/class/infiniband
entries for tbrdma's devices (UCX, and so OpenMPI, skips a device without
them), exec runs PROGRAM in a private mount namespace (and user namespace,
without root) that has them; tbrdma then waits for PROGRAM and passes its
exit status and signals on. --ns=off (or TBRDMA_EXEC_NS=off) never does,
--ns=on always does (docs/cabi.md, Device files).`,
		Example: `  cabi/build.sh && build/tbrdma exec ibv_devices
  build/tbrdma exec ib_write_bw -d tb_thunderbolt0 -x 1 198.18.0.1
  tbrdma exec -- python3 script.py --verbose
  LD_LIBRARY_PATH=$(tbrdma exec --print-libdir) ib_write_bw -x 1`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case opts.PrintLibDir && len(args) > 0:
				return FlagErrorf("--print-libdir takes no program (got %q)", args)
			case !opts.PrintLibDir && len(args) == 0:
				return FlagErrorf("exec needs a program to run: tbrdma exec [--] PROGRAM [ARGS...]")
			}
			if _, err := opts.nsMode(); err != nil {
				return FlagErrorf("%v", err)
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			opts.Argv = args
			if runF != nil {
				return runF(opts)
			}
			if code := runExec(opts); code != ExitOK {
				// runExec has said why. An exec that cannot run its
				// program ends as a shell would, with 2, 126 or 127,
				// not with the CLI's error codes.
				opts.Sys.Exit(code)
			}
			return nil
		},
	}
	// Flags after PROGRAM are PROGRAM's.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVar(&opts.PrintLibDir, "print-libdir", false, "print the library directory exec would use and exit (2 if there is none)")
	cmd.Flags().StringVar(&opts.NS, "ns", "", "give PROGRAM /dev/infiniband and /sys/class/infiniband entries for tbrdma's devices in a private namespace: `MODE` auto (when the host lacks them), on or off (default $"+nsEnv+", else auto)")
	return cmd
}

// runExec becomes the program. It returns only when it could not (with the
// exit status to end with, after saying why on stderr) or, for
// --print-libdir and with a test's Exec, with ExitOK.
func runExec(o *execOptions) int {
	dir, looked := findLibDir(o.Sys)
	if dir == "" {
		fmt.Fprint(o.IO.ErrOut, missingLibMessage(o.Sys.GOOS, looked))
		return ExitUsage
	}
	if o.PrintLibDir {
		fmt.Fprintln(o.IO.Out, dir)
		return ExitOK
	}
	prog := o.Argv[0]
	path, err := o.Sys.LookPath(prog)
	if errors.Is(err, exec.ErrDot) {
		err = nil // found through "." in $PATH: run it, as a shell and env(1) do
	}
	if err != nil {
		code, why := execNotFound, "command not found"
		switch {
		case errors.Is(err, fs.ErrPermission):
			code, why = execCannotRun, "permission denied (not executable)"
		case strings.Contains(prog, "/"):
			why = "no such file"
		}
		fmt.Fprintf(o.IO.ErrOut, "tbrdma: exec: %s: %s%s\n", prog, why, packageHint(prog))
		return code
	}
	key := libPathVar(o.Sys.GOOS)
	if o.Sys.GOOS == "darwin" && sipProtected(path) {
		fmt.Fprint(o.IO.ErrOut, sipWarning(key, path))
	}
	env := prependPath(o.Sys.Environ(), key, dir)
	if o.Sys.View != nil {
		if code, ran := o.Sys.View(o, path, env); ran {
			return code
		}
	}
	err = o.Sys.Exec(path, o.Argv, env)
	if err == nil {
		return ExitOK // a test's Exec; the real one does not return
	}
	fmt.Fprintf(o.IO.ErrOut, "tbrdma: exec: %s: %v\n", path, err)
	if errors.Is(err, syscall.ENOENT) {
		return execNotFound // e.g. a script whose interpreter is missing
	}
	return execCannotRun
}

// libNames are the files of the library on goos: one file, libibverbs,
// and librdmacm as a symbolic link to it (cabi/build.sh).
func libNames(goos string) []string {
	if goos == "darwin" {
		// What a macOS build would be called; none can be built yet
		// (docs/cabi.md).
		return []string{"libibverbs.1.dylib", "librdmacm.1.dylib"}
	}
	return []string{"libibverbs.so.1", "librdmacm.so.1"}
}

// libPathVar is the dynamic loader's search path variable on goos.
func libPathVar(goos string) string {
	if goos == "darwin" {
		return "DYLD_LIBRARY_PATH"
	}
	return "LD_LIBRARY_PATH"
}

// libPlace is one directory findLibDir looked at.
type libPlace struct {
	dir    string // "" when the place does not apply (variable unset, no checkout)
	origin string // how the place was chosen, for the message
	lack   string // what it lacks; "" for the one used
}

// findLibDir returns the first directory holding the library, in the
// order of the exec command's help (and docs/cabi.md), and every place it
// looked at.
func findLibDir(sys execSys) (string, []libPlace) {
	names := libNames(sys.GOOS)
	check := func(p libPlace) libPlace {
		if p.dir != "" {
			p.lack = libLack(p.dir, names)
		}
		return p
	}
	cwd, cwdErr := sys.Getwd()
	if v := sys.Getenv(libDirEnv); v != "" {
		// Explicit: the only place, so that a wrong value fails instead
		// of silently running another build.
		dir := v
		if !filepath.IsAbs(dir) && cwdErr == nil {
			dir = filepath.Join(cwd, dir) // the program may change directory
		}
		p := check(libPlace{dir: filepath.Clean(dir), origin: "$" + libDirEnv})
		if p.lack == "" {
			return p.dir, []libPlace{p}
		}
		return "", []libPlace{p}
	}
	places := []libPlace{{origin: "$" + libDirEnv, lack: "not set"}}
	if exe, err := sys.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		bin := filepath.Dir(exe)
		places = append(places,
			libPlace{dir: filepath.Join(bin, "lib"), origin: "lib/ beside " + exe},
			libPlace{dir: filepath.Join(bin, "..", "lib", "tbrdma"), origin: "../lib/tbrdma from " + bin})
	} else {
		places = append(places, libPlace{origin: "beside the tbrdma executable", lack: "cannot tell where it is: " + err.Error()})
	}
	if root := checkoutRoot(cwd, cwdErr); root != "" {
		places = append(places, libPlace{dir: filepath.Join(root, "build", "lib"), origin: "build/lib of the tbrdma checkout " + root})
	} else {
		places = append(places, libPlace{origin: "a tbrdma checkout's build/lib", lack: "the current directory is not in a tbrdma checkout"})
	}
	seen := map[string]bool{}
	for i, p := range places {
		if p.dir == "" {
			continue
		}
		if seen[p.dir] {
			places[i].lack = "looked at above"
			continue
		}
		seen[p.dir] = true
		places[i] = check(p)
		if places[i].lack == "" {
			return p.dir, places[:i+1]
		}
	}
	return "", places
}

// libLack says which of names dir lacks ("" when it has them all).
func libLack(dir string, names []string) string {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "no such directory"
	}
	var missing []string
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || !fi.Mode().IsRegular() {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return "no " + strings.Join(missing, ", no ")
}

// checkoutRoot returns the top of the tbrdma checkout holding dir (the
// directory of the go.mod of module github.com/tbrdma/tbrdma), or "".
func checkoutRoot(dir string, err error) string {
	if err != nil {
		return ""
	}
	for {
		if isTbrdmaModule(filepath.Join(dir, "go.mod")) {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

func isTbrdmaModule(gomod string) bool {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == "github.com/tbrdma/tbrdma"
		}
	}
	return false
}

// missingLibMessage explains that no library was found: where exec looked
// and how to build it.
func missingLibMessage(goos string, looked []libPlace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tbrdma: exec: tbrdma's C library (%s) was not found:\n", strings.Join(libNames(goos), " and "))
	for _, p := range looked {
		if p.dir != "" {
			fmt.Fprintf(&b, "  %s (%s): %s\n", p.dir, p.origin, p.lack)
		} else {
			fmt.Fprintf(&b, "  %s: %s\n", p.origin, p.lack)
		}
	}
	if goos == "darwin" {
		b.WriteString("tbrdma: exec: the C library cannot be built for macOS yet (cabi/build.sh builds the Linux one; see docs/cabi.md)\n")
		return b.String()
	}
	fmt.Fprintf(&b, "tbrdma: exec: %s, then run the tbrdma it builds (build/tbrdma exec …),\n", buildHint)
	fmt.Fprintf(&b, "  or set %s to the directory holding %s\n", libDirEnv, strings.Join(libNames(goos), " and "))
	return b.String()
}

// packageHint names the Debian package of a stock rdma-core tool.
func packageHint(prog string) string {
	base := filepath.Base(prog)
	pkg := ""
	switch {
	case strings.HasPrefix(base, "ibv_"):
		pkg = "ibverbs-utils"
	case strings.HasPrefix(base, "ib_"):
		pkg = "perftest"
	case base == "rping" || base == "udaddy" || base == "ucmatose" || base == "rstream" || base == "mckey" || base == "cmtime":
		pkg = "rdmacm-utils"
	}
	if pkg == "" || strings.Contains(prog, "/") {
		return ""
	}
	return " (Debian and Ubuntu: apt-get install " + pkg + ")"
}

// sipProtected reports whether macOS's System Integrity Protection starts
// path with the DYLD_* variables removed.
func sipProtected(path string) bool {
	for _, p := range []string{"/usr/bin/", "/bin/", "/sbin/", "/usr/sbin/", "/usr/libexec/", "/System/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

func sipWarning(key, path string) string {
	return fmt.Sprintf("tbrdma: exec: warning: macOS removes %s when it starts a system binary such as %s (System Integrity Protection), so it will not load tbrdma's library; use a copy outside /usr and /System\n", key, path)
}

// prependPath returns env with dir first in the colon-separated list
// variable key. An unset or empty list becomes dir alone: an empty entry
// would mean the current directory to the dynamic loader.
func prependPath(env []string, key, dir string) []string {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k != key {
			out = append(out, kv)
			continue
		}
		if found {
			continue // a duplicate: the loader reads the first
		}
		found = true
		switch {
		case v == "":
			v = dir
		case v == dir || strings.HasPrefix(v, dir+":"):
		default:
			v = dir + ":" + v
		}
		out = append(out, key+"="+v)
	}
	if !found {
		out = append(out, key+"="+dir)
	}
	return out
}
