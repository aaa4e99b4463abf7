package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// Exit codes of tbrdma (documented in docs/cli.md).
const (
	ExitOK          = 0   // the command did what was asked
	ExitFailed      = 1   // the test failed, the peer failed or went away, or another error
	ExitUsage       = 2   // bad flags or arguments
	ExitInterrupted = 130 // interrupted (SIGINT or SIGTERM), as a shell reports 128+SIGINT
)

// FlagError is a usage error: Main prints it with the command's usage and
// exits with ExitUsage.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// FlagErrorf returns a FlagError.
func FlagErrorf(format string, args ...any) error {
	return &FlagError{Err: fmt.Errorf(format, args...)}
}

// errSilent ends a command with ExitFailed after it has already explained
// itself (in the words of the stock tool it mirrors). It is the test
// loops' perf.ErrReported, so that their failures end the same way.
var errSilent = perf.ErrReported

// exitCode maps the error a command returned to an exit code. interrupted
// reports whether the process was signalled.
func exitCode(err error, interrupted bool) int {
	var fe *FlagError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &fe):
		return ExitUsage
	case interrupted && (errors.Is(err, context.Canceled) || errors.Is(err, errInterrupted)):
		return ExitInterrupted
	}
	return ExitFailed
}

// errInterrupted is returned by commands that stop because their context
// was cancelled by a signal.
var errInterrupted = errors.New("interrupted")
