package wire

import (
	"errors"
	"fmt"
	"io"
)

// ErrShortPacket reports input too short for what it must hold.
var ErrShortPacket = fmt.Errorf("wire: short packet: %w", io.ErrUnexpectedEOF)

// Reason names why a packet was rejected, for drop counters.
type Reason uint8

// Rejection reasons. ReasonNone is not a rejection.
const (
	ReasonNone    Reason = iota
	ReasonShort          // shorter than its headers, pad and ICRC
	ReasonTVer           // BTH transport version not 0
	ReasonOpcode         // opcode unknown or unsupported (RD, CNP, XRC, vendor)
	ReasonPad            // pad count larger than the payload or on a payload-less opcode
	ReasonPayload        // payload on an opcode that carries none, or too long
	ReasonQPN            // destination QPN 0
	ReasonICRC           // ICRC trailer does not match
	ReasonMAD            // malformed management datagram
	numReasons
)

var reasonNames = [...]string{
	ReasonNone:    "none",
	ReasonShort:   "short",
	ReasonTVer:    "tver",
	ReasonOpcode:  "opcode",
	ReasonPad:     "pad",
	ReasonPayload: "payload",
	ReasonQPN:     "qpn",
	ReasonICRC:    "icrc",
	ReasonMAD:     "mad",
}

// NumReasons is the number of Reason values, for sizing counter arrays.
const NumReasons = int(numReasons)

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// ParseError is the error of a rejected packet. It carries a Reason for
// counters. Errors for short input also match ErrShortPacket.
type ParseError struct {
	Reason Reason
	Msg    string
}

func (e *ParseError) Error() string { return "wire: " + e.Reason.String() + ": " + e.Msg }

// Is lets errors.Is(err, ErrShortPacket) match a short-packet ParseError.
func (e *ParseError) Is(target error) bool {
	return target == ErrShortPacket && e.Reason == ReasonShort
}

// Unwrap returns io.ErrUnexpectedEOF for short packets.
func (e *ParseError) Unwrap() error {
	if e.Reason == ReasonShort {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// Preallocated errors so that rejecting a packet never allocates.
var (
	errShort     = &ParseError{ReasonShort, "packet shorter than its headers, pad and ICRC"}
	errTVer      = &ParseError{ReasonTVer, "BTH transport version is not 0"}
	errOpcode    = &ParseError{ReasonOpcode, "unknown or unsupported opcode"}
	errPad       = &ParseError{ReasonPad, "pad count inconsistent with payload"}
	errPayload   = &ParseError{ReasonPayload, "payload on an opcode that carries none"}
	errQPN       = &ParseError{ReasonQPN, "destination QPN 0"}
	errMADShort  = &ParseError{ReasonShort, "MAD shorter than 256 bytes"}
	errMADFormat = &ParseError{ReasonMAD, "MAD base version is not 1"}
)

// ReasonOf returns the Reason of err, or ReasonNone when err is not a
// *ParseError. It does not allocate, so drop counters may call it for
// every rejected packet.
func ReasonOf(err error) Reason {
	// errors.As would make its target escape (one allocation per call);
	// AsType does not.
	if pe, ok := errors.AsType[*ParseError](err); ok {
		return pe.Reason
	}
	return ReasonNone
}
