package cli

import (
	"errors"
	"fmt"

	"github.com/tbrdma/tbrdma/transport"
)

// unreachableText explains a connection that an ICMP destination
// unreachable ended at once (Linux reports them, transport.UnreachableError):
// who answered what, what it means, and the next step. start names what to
// run on the peer ("tbrdma serve"), for port unreachable: the host is up
// but no RoCE device listens on UDP 4791. ok is false for other errors.
func unreachableText(err error, start string) (msg string, ok bool) {
	var ue *transport.UnreachableError
	if !errors.As(err, &ue) {
		return "", false
	}
	if ue.PortUnreachable() {
		return fmt.Sprintf("%v; start %s on it", ue, start), true
	}
	return fmt.Sprintf("%v; check the peer's address, that it is up, and the link to it", ue), true
}
