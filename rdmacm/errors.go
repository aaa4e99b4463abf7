package rdmacm

import (
	"errors"
	"fmt"
	"net"

	"github.com/tbrdma/tbrdma/verbs"
)

// Errors.
var (
	// ErrClosed: the ID or event channel was destroyed. It matches
	// net.ErrClosed.
	ErrClosed = fmt.Errorf("rdmacm: closed: %w", net.ErrClosed)
	// ErrInvalidState: the call does not fit the ID's state (Connect
	// before ResolveRoute, Accept on an ID that is not a connection
	// request, ...).
	ErrInvalidState = errors.New("rdmacm: invalid state")
	// ErrInvalidArgument: a bad address, port space, or oversized private
	// data.
	ErrInvalidArgument = verbs.ErrInvalidArgument
	// ErrNotSupported: a port space or QP type this package does not serve.
	ErrNotSupported = errors.New("rdmacm: not supported")
	// ErrAddrInUse: the port is already bound on this device.
	ErrAddrInUse = errors.New("rdmacm: address in use")
)

// RejectError is the error of a REJECTED event: the peer's REJ reason and
// private data.
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rdmacm: connection rejected: %s (%d)", e.Reason, uint16(e.Reason))
}

// TimeoutError is the error of an UNREACHABLE event, and of an address
// resolution that did not finish in time.
type TimeoutError struct{ Op string }

func (e *TimeoutError) Error() string { return "rdmacm: " + e.Op + ": timed out" }
func (e *TimeoutError) Timeout() bool { return true }

// etimedout is librdmacm's status of UNREACHABLE (-ETIMEDOUT).
const etimedout = -110
