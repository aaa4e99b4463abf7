package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tbrdma/tbrdma/verbs"
)

// How the device view (exec_ns.go) is made on Linux.
//
// A Go process cannot enter a new user or mount namespace itself
// (unshare(2) refuses a multithreaded caller, and the runtime has threads
// before main), so exec starts a helper: itself again (/proc/self/exe),
// cloned into a new mount namespace, and into a new user namespace as
// well when it lacks CAP_SYS_ADMIN. In the user namespace the caller keeps
// its own uid and gid (mapped to themselves) and the helper keeps
// CAP_SYS_ADMIN across its execve as an ambient capability. The helper's
// init (below) builds the view, drops that capability and replaces itself
// with the program; tbrdma waits for it, forwarding signals, and ends as it
// ends: with its exit status, or killed by the same signal.
//
// The helper first tells tbrdma, through a pipe, whether it made the view.
// When it could not (the namespaces were made but not mounted in, as with
// Ubuntu's AppArmor restriction on unprivileged user namespaces), it ends
// without running the program, and in auto mode tbrdma then replaces
// itself with the program as it does without the view: the program never
// runs in a namespace that gives it nothing.

// nsHelperEnv marks the helper and carries the pipe it reports on and
// tbrdma's mount namespace (its inode): "FD,INODE", with ",userns" when the
// helper must drop its capability before it runs the program. The helper
// refuses to mount anything in the namespace it was given (the variable
// set by hand would otherwise shadow the host's /dev). It is removed
// before the program starts.
const nsHelperEnv = "TBRDMA_EXEC_NS_HELPER"

// What the helper writes on its pipe: viewMade, or viewFailed and the
// reason, then a newline.
const (
	viewMade   = "ok"
	viewFailed = "fail "
)

// execView is realExecSys's View on Linux.
var execView = runInView

func init() {
	v, ok := os.LookupEnv(nsHelperEnv)
	if !ok {
		return
	}
	os.Exit(viewHelper(v, os.Args))
}

// runInView runs the program in the device view when o's mode asks for
// it. ran is false when exec should replace itself with the program as
// usual: mode off, nothing to add (auto), or no view could be made (auto,
// after a note on stderr). Otherwise it returns the program's exit status
// (a program killed by a signal kills tbrdma with the same signal).
func runInView(o *execOptions, path string, env []string) (code int, ran bool) {
	mode, err := o.nsMode()
	if err != nil || mode == nsOff {
		return 0, false // the flag was checked at parse time
	}
	devs, err := verbs.Devices(nil)
	if err != nil && mode == nsAuto {
		return 0, false
	}
	if mode == nsAuto && (len(devs) == 0 || viewPresent(devs)) {
		return 0, false
	}
	userns := !hasCap(unix.CAP_SYS_ADMIN)
	// The program gets SIGKILL when the thread that started it ends
	// (Pdeathsig): this one, kept until the program has ended, so that a
	// tbrdma killed outright takes the program with it, as when they were
	// one process.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Signals are caught from before the program starts: one sent as soon
	// as it runs (it may say "ready" before supervise is reached) is then
	// forwarded, not fatal to tbrdma. Stopped again on every return, the
	// fallback to a plain exec included.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	pid, err := startViewHelper(path, o.Argv, env, userns)
	if err != nil {
		if mode == nsOn {
			fmt.Fprintf(o.IO.ErrOut, "tbrdma: exec: %s: %v (--ns=on)\n", o.Argv[0], err)
			return execCannotRun, true
		}
		fmt.Fprint(o.IO.ErrOut, viewNote(o.Argv[0], err.Error()))
		return 0, false
	}
	return supervise(pid, sigs), true
}

// viewNote is the one line exec prints when it runs a program without the
// view it would have given it.
func viewNote(prog, why string) string {
	return fmt.Sprintf("tbrdma: exec: note: running %s without /dev/infiniband and /sys/class/infiniband for tbrdma's devices (%s): "+
		"UCX and OpenMPI will not see them; %s=off skips this (docs/cabi.md, Device files)\n", prog, why, nsEnv)
}

// viewPresent reports whether every device the library lists has the
// files UCX checks: an accessible character device
// /dev/infiniband/uverbsN and a sysfs directory with the GID types.
func viewPresent(devs []*verbs.Device) bool {
	for i, d := range devs {
		var st unix.Stat_t
		dev := "/dev/infiniband/" + uverbsName(i)
		if unix.Stat(dev, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Access(dev, unix.R_OK|unix.W_OK) != nil {
			return false
		}
		if _, err := os.Stat(filepath.Join("/sys/class/infiniband", d.Name, "ports/1/gid_attrs/types")); err != nil {
			return false
		}
	}
	return true
}

// hasCap reports whether the calling thread has capability c in its
// effective set.
func hasCap(c uint) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// startViewHelper starts the helper for path, argv and env, with the
// descriptors the program would have had from exec (those tbrdma
// inherited without close-on-exec, stdin, stdout and stderr included;
// closed ones stay closed) and its report pipe, and waits for its report.
// It returns the helper's PID once the view is made; otherwise the helper
// has ended and the error says why.
func startViewHelper(path string, argv, env []string, userns bool) (int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, err
	}
	r := os.NewFile(uintptr(p[0]), "view report")
	defer r.Close()
	w := p[1]
	defer func() {
		if w >= 0 {
			unix.Close(w)
		}
	}()
	files := make([]uintptr, w+1)
	for fd := range files {
		files[fd] = ^uintptr(0) // closed in the child: CLOEXEC, or not open
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && (fl&unix.FD_CLOEXEC == 0 || fd <= 2) {
			files[fd] = uintptr(fd)
		}
	}
	files[w] = uintptr(w)
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil {
		return 0, fmt.Errorf("cannot tell the mount namespace: %w", err)
	}
	marker := fmt.Sprintf("%d,%d", w, st.Ino)
	sys := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if userns {
		marker += ",userns"
		uid, gid := os.Geteuid(), os.Getegid()
		sys.Cloneflags |= syscall.CLONE_NEWUSER
		sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		sys.GidMappingsEnableSetgroups = false
		sys.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return 0, err
		}
	}
	helperEnv := append(env[:len(env):len(env)], nsHelperEnv+"="+marker)
	pid, err := syscall.ForkExec(exe, append([]string{"tbrdma-exec", path}, argv...), &syscall.ProcAttr{
		Env: helperEnv, Files: files, Sys: sys,
	})
	if err != nil {
		if userns {
			return 0, fmt.Errorf("cannot create a user and mount namespace: %w", err)
		}
		return 0, fmt.Errorf("cannot create a mount namespace: %w", err)
	}
	unix.Close(w)
	w = -1
	line, _ := bufio.NewReader(r).ReadString('\n')
	if line == viewMade+"\n" {
		return pid, nil
	}
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	if why, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), viewFailed); ok {
		return 0, errors.New(why)
	}
	how := fmt.Sprintf("exit status %d", ws.ExitStatus())
	if ws.Signaled() {
		how = "killed by " + ws.Signal().String()
	}
	return 0, fmt.Errorf("the namespace helper ended without a word (%s)", how)
}

// forwarded are the signals tbrdma passes on to the program it waits for.
// Stop and continue signals are left alone: both are in the terminal's
// process group and stop and continue together.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM}

// supervise waits for the program, forwarding the signals sigs receives
// (signal.Notify of forwarded), and returns its exit status; a program
// killed by a signal kills tbrdma the same way.
// SIGINT and SIGQUIT are not forwarded while tbrdma's process group (the
// program's too) is the terminal's foreground group: the terminal has
// sent them to both, and a second ^C makes mpirun, for one, give up its
// orderly abort.
func supervise(pid int, sigs <-chan os.Signal) int {
	type result struct {
		ws  syscall.WaitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			done <- result{ws, err}
			return
		}
	}()
	for {
		select {
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && terminalForeground() {
				continue
			}
			syscall.Kill(pid, sig)
		case r := <-done:
			switch {
			case r.err != nil:
				fmt.Fprintf(os.Stderr, "tbrdma: exec: wait for the program: %v\n", r.err)
				return execCannotRun
			case r.ws.Signaled():
				dieOfSignal(r.ws.Signal())
				return 128 + int(r.ws.Signal())
			default:
				return r.ws.ExitStatus()
			}
		}
	}
}

// terminalForeground reports whether stdin is a terminal whose foreground
// process group is tbrdma's.
func terminalForeground() bool {
	pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pg == syscall.Getpgrp()
}

// dieOfSignal ends tbrdma with sig, as the program ended: the signal's
// default action (the Go runtime's handler bypassed, for SIGQUIT and
// SIGSEGV too), without a core dump of tbrdma's own. It returns only if
// the signal did not end the process.
func dieOfSignal(sig syscall.Signal) {
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	// struct sigaction with SIG_DFL, no flags and an empty mask: all zero.
	var sa [4]uint64
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
	syscall.Kill(os.Getpid(), sig)
	time.Sleep(100 * time.Millisecond)
}

// viewHelper is the helper's whole life: args are [name, path, argv...].
// It returns an exit status only when the program could not be started.
func viewHelper(marker string, args []string) int {
	os.Unsetenv(nsHelperEnv)
	f := strings.Split(marker, ",")
	var fd int
	var parentNS uint64
	var st unix.Stat_t
	if len(f) >= 2 {
		fd, _ = strconv.Atoi(f[0])
		parentNS, _ = strconv.ParseUint(f[1], 10, 64)
	}
	if fd < 3 || parentNS == 0 || len(args) < 3 {
		fmt.Fprintf(os.Stderr, "tbrdma: exec: bad %s=%q or arguments %q\n", nsHelperEnv, marker, args)
		return execCannotRun
	}
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil || st.Ino == parentNS {
		fmt.Fprintf(os.Stderr, "tbrdma: exec: %s is set, but this process is not in a mount namespace of its own: unset it\n", nsHelperEnv)
		return execCannotRun
	}
	userns := len(f) >= 3 && f[2] == "userns"
	path, argv := args[1], args[2:]
	report := os.NewFile(uintptr(fd), "view report")
	unix.CloseOnExec(fd)
	devs, err := verbs.Devices(nil)
	if err == nil {
		err = makeView(devs)
	}
	if err != nil {
		// tbrdma says it, and runs the program without the view (auto).
		fmt.Fprintf(report, "%scannot make the device files: %s\n", viewFailed, strings.ReplaceAll(err.Error(), "\n", " "))
		return 0
	}
	fmt.Fprintf(report, "%s\n", viewMade)
	report.Close()
	if userns {
		// Capabilities are per thread: drop them on the one that execs.
		runtime.LockOSThread()
		dropCaps()
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "tbrdma: exec: %s: %v\n", path, err)
	if errors.Is(err, syscall.ENOENT) {
		return execNotFound
	}
	return execCannotRun
}

// dropCaps clears the calling thread's ambient and inheritable
// capabilities, so that the program, which runs as a user other than root
// in the user namespace, starts with none.
func dropCaps() {
	unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) == nil {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		unix.Capset(&hdr, &data[0])
	}
}

// makeView builds the view in the helper's mount namespace: /sys/class
// and /dev become read-only tmpfs copies of themselves (each entry bound
// from the original) with the device files added. On failure it undoes
// what it mounted, leaving the namespace as it found it.
func makeView(devs []*verbs.Device) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("mount --make-rslave /: %w", err)
	}
	files := sysfsView(devs, netdevDeviceFile, cpuMask(possibleCPUs()))
	skipIB := func(name string) bool { return name == "infiniband" || name == "infiniband_verbs" }
	if err := shadowDir("/sys/class", skipIB, func(string) error {
		for _, f := range files {
			p := filepath.Join("/sys/class", f.name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(f.data), 0o444); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := shadowDir("/dev", func(name string) bool { return name == "infiniband" }, func(old string) error {
		if err := os.Mkdir("/dev/infiniband", 0o755); err != nil {
			return err
		}
		names := []string{"rdma_cm"}
		for i := range devs {
			names = append(names, uverbsName(i))
		}
		for _, n := range names {
			if err := bindOnto(old+"/null", "/dev/infiniband/"+n, false); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		unix.Unmount("/sys/class", unix.MNT_DETACH)
		return err
	}
	return nil
}

// shadowDir mounts a tmpfs over dir holding every entry of the original
// (symbolic links copied, everything else bound from it, submounts
// included) except those skip names, lets fill add to it (old is a path to
// the original directory), and makes the tmpfs read-only.
func shadowDir(dir string, skip func(string) bool, fill func(old string) error) (err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	const flags = unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount("tbrdma", dir, "tmpfs", flags, "mode=0755"); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	}()
	old := fmt.Sprintf("/proc/self/fd/%d", fd)
	for _, e := range ents {
		if skip(e.Name()) {
			continue
		}
		src, dst := old+"/"+e.Name(), filepath.Join(dir, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, dst)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		if err := bindOnto(src, dst, e.IsDir()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := fill(old); err != nil {
		return fmt.Errorf("fill %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dir, err)
	}
	return nil
}

// bindOnto creates dst (a directory or an empty file) and binds src onto
// it, with the mounts under src.
func bindOnto(src, dst string, dir bool) error {
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	} else {
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dst, err)
	}
	return nil
}

// netdevDeviceFile reads /sys/class/net/NETDEV/device/FILE.
func netdevDeviceFile(netdev, file string) (string, bool) {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", netdev, "device", file))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// possibleCPUs is the number of CPUs the kernel may bring up (the highest
// in /sys/devices/system/cpu/possible, plus one).
func possibleCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		_, hi, _ := strings.Cut(r, "-")
		if hi == "" {
			hi = r
		}
		if v, err := strconv.Atoi(hi); err == nil && v+1 > n {
			n = v + 1
		}
	}
	if n == 0 {
		return runtime.NumCPU()
	}
	return n
}
