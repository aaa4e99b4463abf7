//go:build unix

package cli

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// processAlive reports whether a process with the PID exists (kill -0).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ownedByUs checks that fi belongs to this process's user.
func ownedByUs(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Getuid() {
		return errors.New("owned by another user: remove it, or set XDG_RUNTIME_DIR")
	}
	return nil
}
