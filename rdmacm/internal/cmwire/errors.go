package cmwire

import (
	"errors"
	"fmt"
	"io"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Reason names why a CM MAD or CMA header was rejected, for drop counters.
type Reason uint8

// Rejection reasons. ReasonNone is not a rejection.
const (
	ReasonNone         Reason = iota
	ReasonShort               // shorter than a MAD, a message body or a CMA header
	ReasonBaseVersion         // MAD base version not 1
	ReasonClass               // management class not CM (0x07)
	ReasonClassVersion        // CM class version not 2
	ReasonMethod              // method not Send (0x03)
	ReasonAttribute           // attribute ID not one of the nine CM messages decoded here
	ReasonCMAVersion          // CMA header version not 0
	ReasonCMAIPVersion        // CMA header IP version byte not 0x40 or 0x60
	ReasonCMAAddress          // IPv4 address in a CMA header with non-zero padding
	numReasons
)

// NumReasons is the number of Reason values, for sizing counter arrays.
const NumReasons = int(numReasons)

var reasonNames = [...]string{
	ReasonNone:         "none",
	ReasonShort:        "short",
	ReasonBaseVersion:  "base_version",
	ReasonClass:        "class",
	ReasonClassVersion: "class_version",
	ReasonMethod:       "method",
	ReasonAttribute:    "attribute",
	ReasonCMAVersion:   "cma_version",
	ReasonCMAIPVersion: "cma_ip_version",
	ReasonCMAAddress:   "cma_address",
}

// String returns the counter name of r.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// ParseError is the error of a rejected MAD or CMA header. Errors for
// short input also match wire.ErrShortPacket and io.ErrUnexpectedEOF.
type ParseError struct {
	Reason Reason
	Msg    string
}

func (e *ParseError) Error() string { return "cmwire: " + e.Reason.String() + ": " + e.Msg }

// Is lets errors.Is(err, wire.ErrShortPacket) match a short-input error.
func (e *ParseError) Is(target error) bool {
	return target == wire.ErrShortPacket && e.Reason == ReasonShort
}

// Unwrap returns io.ErrUnexpectedEOF for short input.
func (e *ParseError) Unwrap() error {
	if e.Reason == ReasonShort {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// ReasonOf returns the Reason of err, or ReasonNone when err is not a
// *ParseError. It does not allocate.
func ReasonOf(err error) Reason {
	if pe, ok := errors.AsType[*ParseError](err); ok {
		return pe.Reason
	}
	return ReasonNone
}

// Preallocated errors: rejecting a MAD never allocates.
var (
	errShortMAD     = &ParseError{ReasonShort, "MAD shorter than 256 bytes"}
	errShortBody    = &ParseError{ReasonShort, "CM message body shorter than 232 bytes"}
	errShortPath    = &ParseError{ReasonShort, "path shorter than 44 bytes"}
	errShortCMA     = &ParseError{ReasonShort, "CMA header shorter than 36 bytes"}
	errBaseVersion  = &ParseError{ReasonBaseVersion, "MAD base version is not 1"}
	errClass        = &ParseError{ReasonClass, "management class is not CM (0x07)"}
	errClassVersion = &ParseError{ReasonClassVersion, "CM class version is not 2"}
	errMethod       = &ParseError{ReasonMethod, "method is not Send (0x03)"}
	errAttribute    = &ParseError{ReasonAttribute, "attribute ID is not a CM message"}
	errCMAVersion   = &ParseError{ReasonCMAVersion, "CMA header version is not 0"}
	errCMAIPVersion = &ParseError{ReasonCMAIPVersion, "CMA header IP version is not 4 or 6"}
	errCMAAddress   = &ParseError{ReasonCMAAddress, "IPv4 address in CMA header has non-zero padding"}
)
