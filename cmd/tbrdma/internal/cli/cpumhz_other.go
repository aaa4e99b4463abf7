//go:build !linux

package cli

import "errors"

// cpuMHz: without /proc/cpuinfo there is no frequency that perftest would
// take; -C is refused.
func cpuMHz() (float64, error) {
	return 0, errors.New("tbrdma converts to cycles with the CPU MHz of /proc/cpuinfo, which only Linux has: drop -C to report microseconds")
}
