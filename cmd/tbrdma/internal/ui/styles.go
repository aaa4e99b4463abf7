package ui

import (
	"strconv"
	"strings"

	"charm.land/lipgloss/v2"
)

// Styles are the CLI's styles for human output, defined once here. Strings
// they render carry ANSI codes; write them through IO.StyledOut, which
// strips the codes when stdout is not a terminal or color is off. Render
// only words and padding, never text with tabs: lipgloss expands tabs.
type Styles struct {
	Header lipgloss.Style // table headers, section titles
	OK     lipgloss.Style // ACTIVE, success, 0% loss
	Bad    lipgloss.Style // DOWN, failure, loss
	Warn   lipgloss.Style // intermediate states
	Muted  lipgloss.Style // secondary text
}

// NewStyles returns the styles for a dark (or light) terminal background.
func NewStyles(dark bool) *Styles {
	ld := lipgloss.LightDark(dark)
	return &Styles{
		Header: lipgloss.NewStyle().Bold(true).Foreground(ld(lipgloss.Color("#1F4E9E"), lipgloss.Color("#7AA2F7"))),
		OK:     lipgloss.NewStyle().Bold(true).Foreground(ld(lipgloss.Color("#1A7F37"), lipgloss.Color("#73DACA"))),
		Bad:    lipgloss.NewStyle().Bold(true).Foreground(ld(lipgloss.Color("#CF222E"), lipgloss.Color("#F7768E"))),
		Warn:   lipgloss.NewStyle().Foreground(ld(lipgloss.Color("#9A6700"), lipgloss.Color("#E0AF68"))),
		Muted:  lipgloss.NewStyle().Foreground(ld(lipgloss.Color("#6E7781"), lipgloss.Color("#7F849C"))),
	}
}

// Pad renders s with st and pads it with spaces to width cells (like
// fmt's %-*s on the plain text), so that columns stay aligned whether or not
// the codes are stripped.
func Pad(st lipgloss.Style, s string, width int) string {
	return st.Render(s) + strings.Repeat(" ", max(width-lipgloss.Width(s), 0))
}

// darkBackground guesses the terminal's background from COLORFGBG
// ("fg;bg", bg 0-6 or 8 dark), dark when unknown. It does not query the
// terminal: that would read standard input, which commands such as cat
// stream.
func darkBackground(env []string) bool {
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "COLORFGBG=")
		if !ok {
			continue
		}
		parts := strings.Split(v, ";")
		bg, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil {
			return true
		}
		return bg <= 6 || bg == 8
	}
	return true
}
