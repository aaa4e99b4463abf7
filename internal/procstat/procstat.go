// Package procstat reads the resource counts of this process that leak
// tests and soak runs watch: open file descriptors and resident memory.
// Both come from /proc on Linux; elsewhere they report "unknown".
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// OpenFDs counts this process's open file descriptors, or returns -1
// where /proc/self/fd does not exist.
func OpenFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// RSS is this process's resident set size in bytes (VmRSS), or 0 where
// /proc/self/status does not exist.
func RSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
