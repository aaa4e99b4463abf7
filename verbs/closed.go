package verbs

import (
	"errors"
	"net"
	"syscall"
)

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// closedError is ErrClosed's type: it is net.ErrClosed for errors.Is.
type closedError struct{}

func (closedError) Error() string        { return "verbs: closed" }
func (closedError) Is(target error) bool { return target == net.ErrClosed }

// busyError is ErrBusy's type: it is syscall.EBUSY for errors.Is.
type busyError struct{}

func (busyError) Error() string { return "resource busy" }
func (busyError) Is(target error) bool {
	en, ok := target.(syscall.Errno)
	return ok && en == syscall.EBUSY
}
