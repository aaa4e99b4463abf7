//go:build tbrdma_cabi

package main

import (
	"bufio"

	"os"
	"strconv"
	"strings"
	"syscall"
)

// checkMapped reports whether [addr, addr+n) is mapped in this process,
// and writable when write is set, as the kernel's ib_umem_get checks when
// it pins the pages of a registration (EFAULT otherwise). tbrdma pins
// nothing: it reads and writes the application's memory in place, so a
// region that is not mapped would fault inside the engine.
func checkMapped(addr uintptr, n uint64, write bool) error {
	end := uint64(addr) + n
	if end < uint64(addr) {
		return syscall.EINVAL
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil // cannot tell (no procfs): trust the caller, as before
	}
	defer f.Close()
	next := uint64(addr)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() && next < end {
		lo, hi, perm, ok := parseMapsLine(sc.Text())
		if !ok || hi <= next {
			continue
		}
		if lo > next {
			return syscall.EFAULT // a hole
		}
		if perm[0] != 'r' || (write && perm[1] != 'w') {
			return syscall.EFAULT
		}
		next = hi
	}
	if next < end {
		return syscall.EFAULT
	}
	return nil
}

// parseMapsLine parses "lo-hi perms ..." of /proc/self/maps.
func parseMapsLine(line string) (lo, hi uint64, perm string, ok bool) {
	rng, rest, found := strings.Cut(line, " ")
	if !found || len(rest) < 4 {
		return 0, 0, "", false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, "", false
	}
	var err error
	if lo, err = strconv.ParseUint(a, 16, 64); err != nil {
		return 0, 0, "", false
	}
	if hi, err = strconv.ParseUint(b, 16, 64); err != nil {
		return 0, 0, "", false
	}
	return lo, hi, rest[:4], true
}
