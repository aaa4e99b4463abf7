//go:build !linux

package cli

// execView is nil where the device view cannot be made: the C library is
// built for Linux only (docs/cabi.md, macOS), and exec replaces itself
// with the program.
var execView func(o *execOptions, path string, env []string) (int, bool)
