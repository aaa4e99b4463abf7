package ui

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Progress draws a live one-line report of a transfer on standard error
// (bytes so far, rate, elapsed, and a bar when the total is known), redrawn
// in place with a carriage return. It draws only when standard error is a
// terminal, nothing before the run has lasted ProgressDelay, and at most once
// per ProgressEvery; Clear erases the line, and a command calls it before it
// prints results or an error. Standard output never sees it.
//
// A Progress is used by one goroutine.
type Progress struct {
	// Label starts the line ("write-bw 65536 bytes").
	Label string
	// Total, when known, is the byte count of the whole run: the line then
	// has a bar and a percentage.
	Total uint64

	w     io.Writer
	on    bool
	now   func() time.Time
	start time.Time
	last  time.Time
	drawn bool
}

// Progress's timing: a run shorter than ProgressDelay shows none; then the
// line is redrawn at most every ProgressEvery (four times a second).
const (
	ProgressDelay = time.Second
	ProgressEvery = 250 * time.Millisecond
)

// NewProgress starts a progress line on i's standard error, drawn only if
// it is a terminal; now is the clock (tests pass a fake one).
func NewProgress(i *IO, now func() time.Time, label string) *Progress {
	return newProgress(i.ErrOut, i.IsStderrTTY(), now, label)
}

func newProgress(w io.Writer, on bool, now func() time.Time, label string) *Progress {
	p := &Progress{Label: label, w: w, on: on, now: now}
	if on {
		p.start = now()
	}
	return p
}

// Update reports that n bytes are done so far, and redraws the line if it
// is time to. It does nothing (not even read the clock) when off.
func (p *Progress) Update(n uint64) {
	if !p.on {
		return
	}
	t := p.now()
	el := t.Sub(p.start)
	if el < ProgressDelay || (p.drawn && t.Sub(p.last) < ProgressEvery) {
		return
	}
	p.last, p.drawn = t, true
	fmt.Fprint(p.w, "\r\x1b[K"+p.line(n, el))
}

// line is the text of the report after el for n bytes.
func (p *Progress) line(n uint64, el time.Duration) string {
	var b strings.Builder
	b.WriteString(p.Label)
	b.WriteString(": ")
	if p.Total > 0 {
		const width = 20
		done := min(n, p.Total)
		fill := int(done * width / p.Total)
		fmt.Fprintf(&b, "[%s%s] %3d%%  ", strings.Repeat("=", fill), strings.Repeat(" ", width-fill), done*100/p.Total)
	}
	rate := 0.0
	if el > 0 {
		rate = float64(n) / el.Seconds()
	}
	fmt.Fprintf(&b, "%s  %s/s  %s", FormatBytes(n), FormatBytes(uint64(rate)), formatElapsed(el))
	return b.String()
}

// Clear erases the line if one was drawn.
func (p *Progress) Clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// FormatBytes formats a byte count in binary units: "512 B", "1.5 KiB",
// "3.2 GiB".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), 0
	for v >= unit && u < 5 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, " KMGTP"[u])
}

// formatElapsed is m:ss, or h:mm:ss from an hour.
func formatElapsed(d time.Duration) string {
	s := int64(d / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
