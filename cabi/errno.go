//go:build tbrdma_cabi

package main

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// errno maps an error of packages verbs and rdmacm to the errno rdma-core
// over rdma_rxe returns for the same failure.
func errno(err error) syscall.Errno {
	var en syscall.Errno
	var se *verbs.StateError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &en):
		return en
	case errors.Is(err, verbs.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, verbs.ErrQueueFull), errors.Is(err, verbs.ErrResourceLimit):
		return syscall.ENOMEM
	case errors.As(err, &se):
		return syscall.EINVAL
	case errors.Is(err, verbs.ErrInvalidArgument), errors.Is(err, verbs.ErrInvalidState),
		errors.Is(err, rdmacm.ErrInvalidState):
		return syscall.EINVAL
	case errors.Is(err, rdmacm.ErrAddrInUse):
		return syscall.EADDRINUSE
	case errors.Is(err, rdmacm.ErrNotSupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, rdmacm.ErrDeviceRemoved):
		return syscall.ENODEV
	case errors.Is(err, verbs.ErrNoDevice):
		return syscall.ENODEV
	case errors.Is(err, verbs.ErrClosed), errors.Is(err, net.ErrClosed):
		return syscall.EINVAL
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return syscall.EINVAL
}
