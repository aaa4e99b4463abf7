package rdmacm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

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
	// ErrDeviceRemoved: the verbs.Context of the ID was closed
	// (DEVICE_REMOVAL); destroy the ID and open the device again.
	ErrDeviceRemoved = errors.New("rdmacm: device removed")
)

// RejectError is the error of a REJECTED event: the peer's REJ reason and
// private data.
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte
	// Auth is set when the pre-shared key check failed (psk.go): the
	// peer refused our REQ or REP (REJ 28, private data "tbrdma:
	// authentication failed"), or, with Local, this side refused the
	// peer's REP. The error then matches ErrAuthFailed.
	Auth  bool
	Local bool
}

func (e *RejectError) Error() string {
	switch {
	case e.Auth && e.Local:
		return "rdmacm: connection refused: the peer's reply does not prove the pre-shared key: " + ErrAuthFailed.Error()
	case e.Auth:
		return fmt.Sprintf("rdmacm: connection rejected by the peer (%s, %d): %v", e.Reason, uint16(e.Reason), ErrAuthFailed)
	}
	return fmt.Sprintf("rdmacm: connection rejected: %s (%d)", e.Reason, uint16(e.Reason))
}

// Unwrap returns ErrAuthFailed for a failed key check, nil otherwise.
func (e *RejectError) Unwrap() error {
	if e.Auth {
		return ErrAuthFailed
	}
	return nil
}

// SIDRError is the error of an UNREACHABLE event that a SIDR_REP with a
// non-zero status caused (UD port spaces): the status and the replier's
// private data (136 bytes).
type SIDRError struct {
	Status      SIDRStatus
	PrivateData []byte
	// Auth and Local: as in RejectError (the peer refused our key, or,
	// with Local, its SIDR_REP does not prove the key); the error then
	// matches ErrAuthFailed.
	Auth, Local bool
}

func (e *SIDRError) Error() string {
	switch {
	case e.Auth && e.Local:
		return "rdmacm: service ID resolution refused: the peer's SIDR_REP does not prove the pre-shared key: " + ErrAuthFailed.Error()
	case e.Auth:
		return fmt.Sprintf("rdmacm: service ID resolution refused by the peer (%s, %d): %v", e.Status, uint8(e.Status), ErrAuthFailed)
	}
	return fmt.Sprintf("rdmacm: service ID resolution refused: %s (%d)", e.Status, uint8(e.Status))
}

// Unwrap returns ErrAuthFailed for a failed key check, nil otherwise.
func (e *SIDRError) Unwrap() error {
	if e.Auth {
		return ErrAuthFailed
	}
	return nil
}

// RouteError is the error of a ROUTE_ERROR event.
type RouteError struct {
	Dst    netip.Addr
	Reason string
}

func (e *RouteError) Error() string {
	return fmt.Sprintf("rdmacm: no route to %v: %s; bind to an address on the peer's network or pick another peer address", e.Dst, e.Reason)
}

// TimeoutError is the error of an UNREACHABLE event, and of an address
// resolution that did not finish in time.
type TimeoutError struct{ Op string }

func (e *TimeoutError) Error() string { return "rdmacm: " + e.Op + ": timed out" }
func (e *TimeoutError) Timeout() bool { return true }

// Negative errnos librdmacm puts in Event.Status.
const (
	etimedout   = -110 // UNREACHABLE after the retries
	einval      = -22
	enetunreach = -101 // ROUTE_ERROR
	enodev      = -19  // DEVICE_REMOVAL
)
