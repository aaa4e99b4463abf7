package cli

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkRelayPeer lets only this process's user register with serve's cat
// relay: the peer's credentials (SO_PEERCRED), on top of the socket's mode
// 0600 in a directory of mode 0700.
func checkRelayPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("cannot tell who is asking (SO_PEERCRED: %v)", cerr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("user %d may not receive through this serve, which runs as user %d: run tbrdma cat as that user", cred.Uid, os.Getuid())
	}
	return nil
}
