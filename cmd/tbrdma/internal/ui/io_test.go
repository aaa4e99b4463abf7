package ui

import (
	"fmt"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

func TestStyledOut(t *testing.T) {
	line := func(io *IO) string {
		st := io.Styles()
		fmt.Fprintf(io.StyledOut(), "    %s\t%s\t%s\n", Pad(st.Header, "state", 8), Pad(st.OK, "ACTIVE", 8), st.Bad.Render("DOWN"))
		return io.Out.(fmt.Stringer).String()
	}
	const plain = "    state   \tACTIVE  \tDOWN\n"

	io, _, _ := Test() // a pipe: styles stripped, columns aligned
	if got := line(io); got != plain {
		t.Errorf("not a terminal: %q, want %q", got, plain)
	}
	io, _, _ = Test()
	io.SetStdoutTTY(true)
	got := line(io)
	if !strings.Contains(got, "\x1b[") || ansi.Strip(got) != plain {
		t.Errorf("terminal: %q, want %q in color", got, plain)
	}
	io, _, _ = Test()
	io.SetStdoutTTY(true)
	io.SetNoColor(true) // --no-color
	if got := line(io); got != plain {
		t.Errorf("--no-color: %q, want %q", got, plain)
	}
}

func TestNoColorEnv(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	io := System()
	io.SetStdoutTTY(true)
	if io.ColorEnabled() {
		t.Error("NO_COLOR=1: color enabled")
	}
	t.Setenv("NO_COLOR", "")
	io = System()
	io.SetStdoutTTY(true)
	if !io.ColorEnabled() {
		t.Error("NO_COLOR empty, a terminal: color disabled")
	}
}

func TestDarkBackground(t *testing.T) {
	for env, want := range map[string]bool{"": true, "COLORFGBG=15;0": true, "COLORFGBG=0;15": false, "COLORFGBG=0;default;7": false} {
		if got := darkBackground([]string{env}); got != want {
			t.Errorf("%q: dark %v, want %v", env, got, want)
		}
	}
}
