// Package ui owns the terminal for the tbrdma CLI: the standard streams and
// whether they are terminals. Commands write through an *IO so that tests
// can capture what they print.
package ui

import (
	"bytes"
	"io"
	"os"
)

// IO holds the streams a command reads and writes.
type IO struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	outTTY, errTTY bool
}

// System returns the process's standard streams.
func System() *IO {
	return &IO{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		outTTY: isTerminal(os.Stdout), errTTY: isTerminal(os.Stderr),
	}
}

// Test returns an IO writing into buffers, with no terminal.
func Test() (io *IO, stdout, stderr *bytes.Buffer) {
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	return &IO{In: new(bytes.Buffer), Out: stdout, ErrOut: stderr}, stdout, stderr
}

// IsStdoutTTY reports whether standard output is a terminal.
func (i *IO) IsStdoutTTY() bool { return i.outTTY }

// IsStderrTTY reports whether standard error is a terminal.
func (i *IO) IsStderrTTY() bool { return i.errTTY }

// SetStdoutTTY overrides the terminal check, for tests.
func (i *IO) SetStdoutTTY(v bool) { i.outTTY = v }

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
