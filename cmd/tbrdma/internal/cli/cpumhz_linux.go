package cli

import (
	"fmt"
	"os"
)

// cpuMHz is the CPU's frequency for -C, from /proc/cpuinfo as perftest
// reads it.
func cpuMHz() (float64, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0, fmt.Errorf("%w: drop -C to report microseconds", err)
	}
	defer f.Close()
	return parseCPUMHz(f)
}
