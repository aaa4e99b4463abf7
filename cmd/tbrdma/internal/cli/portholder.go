package cli

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// portHolder is the process that holds a local port: its PID and command
// name (comm), and for a tbrdma process its subcommand (serve, write-bw …).
type portHolder struct {
	PID     int
	Command string
	Sub     string
}

func (h portHolder) String() string {
	name := h.Command
	if h.Sub != "" {
		name += " " + h.Sub
	}
	return fmt.Sprintf("%s (pid %d)", name, h.PID)
}

// portInUseHint explains a listen error on a TCP port: "" unless the
// address is in use. It names the process that holds the port when it can
// find it (findPortHolder: /proc on Linux; elsewhere, or for another
// user's process, it says how to look) and ends with next, what to do.
func portInUseHint(err error, addr netip.Addr, port int, next string) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	return portHolderText("tcp", addr, port) + ": " + next
}

// portHolderText says who holds proto's port on addr (the zero Addr: any
// address): "another tbrdma serve (pid 123) holds TCP port 18515", or, when
// it cannot tell, how to find out.
func portHolderText(proto string, addr netip.Addr, port int) string {
	what := fmt.Sprintf("%s port %d", strings.ToUpper(proto), port)
	h, ok := findPortHolder(proto, addr, port)
	switch {
	case ok && strings.HasPrefix(h.Command, "tbrdma"):
		return fmt.Sprintf("another %v holds %s", h, what)
	case ok:
		return fmt.Sprintf("%v holds %s", h, what)
	}
	return fmt.Sprintf("another process holds %s (%s names it)", what, portLookupCommand(proto, port))
}
