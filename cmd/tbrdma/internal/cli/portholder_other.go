//go:build !linux

package cli

import (
	"fmt"
	"net/netip"
)

// portLookupCommand is the command that names the holder of proto's port.
func portLookupCommand(proto string, port int) string {
	if proto == "udp" {
		return fmt.Sprintf("lsof -nP -iUDP:%d", port)
	}
	return fmt.Sprintf("lsof -nP -iTCP:%d -sTCP:LISTEN", port)
}

// findPortHolder does not look: only Linux's /proc tells which process
// holds a port without running another program.
func findPortHolder(string, netip.Addr, int) (portHolder, bool) { return portHolder{}, false }
