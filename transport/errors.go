package transport

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
)

// ErrPortInUse is matched (errors.Is) by the error Open returns when the
// local address and port are already bound by another socket.
var ErrPortInUse = errors.New("address already in use")

// PortInUseError is returned by Open when addr is already bound. It matches
// ErrPortInUse and unwraps to the system error.
type PortInUseError struct {
	Addr netip.AddrPort
	Err  error // the bind error from the operating system
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("transport: UDP %v is already in use: another process holds it "+
		"(a kernel rdma_rxe device binds UDP %d on every address, or another tbrdma may be running); "+
		"stop it, or choose another address or port",
		e.Addr, e.Addr.Port())
}

// Is reports whether target is ErrPortInUse.
func (e *PortInUseError) Is(target error) bool { return target == ErrPortInUse }

// Unwrap returns the operating system's error.
func (e *PortInUseError) Unwrap() error { return e.Err }

// OffloadError says why a kernel offload (UDP GSO or GRO) is not used. It
// matches ErrNotSupported unless the offload was turned off by an option.
type OffloadError struct {
	Offload string // "UDP GSO" or "UDP GRO"
	Err     error  // the cause; errDisabledByOption when an option turned it off
}

func (e *OffloadError) Error() string {
	return "transport: " + e.Offload + " disabled: " + e.Err.Error()
}

// Is lets errors.Is(err, ErrNotSupported) match an offload the system lacks.
func (e *OffloadError) Is(target error) bool {
	return target == ErrNotSupported && e.Err != errDisabledByOption
}

// Unwrap returns the cause.
func (e *OffloadError) Unwrap() error { return e.Err }

var errDisabledByOption = errors.New("turned off by Options")

// RefusedError is WriteBatch's error when the system refused one datagram
// of the batch (a firewall rule that drops it on output, which UDP reports
// as EPERM; a route that cannot take it): the message at the count
// WriteBatch returned, and with UDP GSO the Packets-1 after it that shared
// its datagram, were not sent, as if lost on the link. The messages after
// them were not tried; the caller may go on with them.
type RefusedError struct {
	Packets int   // messages the refused datagram carried, at least 1
	Err     error // the system's error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("transport: a datagram of %d packets was refused: %v", e.Packets, e.Err)
}

// Unwrap returns the system's error.
func (e *RefusedError) Unwrap() error { return e.Err }

// errNotSupportedOnOS reports a feature this operating system lacks.
var errNotSupportedOnOS = fmt.Errorf("%w on %s", ErrNotSupported, runtime.GOOS)
