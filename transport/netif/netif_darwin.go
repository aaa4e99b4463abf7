package netif

import (
	"context"
	"os/exec"
	"time"
)

// networksetupTimeout bounds the networksetup run; it normally takes a few
// tens of milliseconds.
const networksetupTimeout = 3 * time.Second

// annotate names each interface after its hardware port. Without
// networksetup (or if it fails) no interface is reported as Thunderbolt.
func annotate(ifs []Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), networksetupTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/sbin/networksetup", "-listallhardwareports").Output()
	if err != nil {
		applyHardwarePorts(ifs, nil)
		return
	}
	applyHardwarePorts(ifs, parseHardwarePorts(string(out)))
}
