// Package ui owns the terminal for the tbrdma CLI: the standard streams,
// whether they are terminals, whether human output is styled (color), and
// the live progress line on a terminal's standard error (Progress).
// Commands write through an *IO so that tests can capture what they print.
package ui

import (
	"bytes"
	"io"
	"os"

	"github.com/charmbracelet/colorprofile"
)

// IO holds the streams a command reads and writes.
type IO struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	outTTY, errTTY bool
	noColor        bool     // NO_COLOR is set, or --no-color was given
	env            []string // the environment, for the color profile
}

// System returns the process's standard streams. NO_COLOR (set and not
// empty, https://no-color.org) turns color off.
func System() *IO {
	return &IO{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		outTTY: isTerminal(os.Stdout), errTTY: isTerminal(os.Stderr),
		noColor: os.Getenv("NO_COLOR") != "",
		env:     os.Environ(),
	}
}

// Test returns an IO writing into buffers, with no terminal (and the
// environment of a 256-color terminal, for tests that pretend to be one with
// SetStdoutTTY).
func Test() (io *IO, stdout, stderr *bytes.Buffer) {
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	return &IO{In: new(bytes.Buffer), Out: stdout, ErrOut: stderr, env: []string{"TERM=xterm-256color"}}, stdout, stderr
}

// IsStdoutTTY reports whether standard output is a terminal.
func (i *IO) IsStdoutTTY() bool { return i.outTTY }

// IsStderrTTY reports whether standard error is a terminal.
func (i *IO) IsStderrTTY() bool { return i.errTTY }

// SetStdoutTTY overrides the terminal check, for tests.
func (i *IO) SetStdoutTTY(v bool) { i.outTTY = v }

// SetStderrTTY overrides the terminal check, for tests.
func (i *IO) SetStderrTTY(v bool) { i.errTTY = v }

// SetNoColor turns color off (the root command's --no-color).
func (i *IO) SetNoColor(v bool) { i.noColor = v }

// ColorEnabled reports whether human output on stdout is styled: only on a
// terminal, and neither NO_COLOR nor --no-color.
func (i *IO) ColorEnabled() bool { return i.outTTY && !i.noColor }

// StyledOut returns stdout for styled human output: lipgloss's color
// profile writer, which passes the styles' ANSI codes (downsampled to what
// the terminal supports) when color is enabled and strips every escape
// sequence otherwise, leaving the plain text byte for byte.
func (i *IO) StyledOut() io.Writer {
	p := colorprofile.NoTTY
	if i.ColorEnabled() {
		p = colorprofile.Env(i.env) // TERM, COLORTERM, CLICOLOR_FORCE…
	}
	return &colorprofile.Writer{Forward: i.Out, Profile: p}
}

// Styles returns the styles for stdout (see styles.go).
func (i *IO) Styles() *Styles { return NewStyles(darkBackground(i.env)) }

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
