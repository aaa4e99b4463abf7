package ui

import (
	"bytes"
	"testing"
	"time"
)

// fakeClock returns a clock that reads *t, counting the reads.
func fakeClock(t *time.Time, reads *int) func() time.Time {
	return func() time.Time { *reads++; return *t }
}

func TestProgressOnTerminal(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now, reads := t0, 0
	var buf bytes.Buffer
	p := newProgress(&buf, true, fakeClock(&now, &reads), "write-bw 65536 bytes")
	p.Total = 4 << 30 // 4 GiB

	step := func(at time.Duration, n uint64, want string) {
		t.Helper()
		buf.Reset()
		now = t0.Add(at)
		p.Update(n)
		if buf.String() != want {
			t.Errorf("at %v, %d bytes: wrote %q, want %q", at, n, buf.String(), want)
		}
	}
	// Nothing during the first second: a short run shows no progress.
	step(500*time.Millisecond, 1<<30, "")
	step(999*time.Millisecond, 1<<30, "")
	step(time.Second, 1<<30, "\r\x1b[Kwrite-bw 65536 bytes: [=====               ]  25%  1.0 GiB  1.0 GiB/s  0:01")
	// At most every 250 ms after that.
	step(1100*time.Millisecond, 2<<30, "")
	step(1249*time.Millisecond, 2<<30, "")
	step(1250*time.Millisecond, 2<<30, "\r\x1b[Kwrite-bw 65536 bytes: [==========          ]  50%  2.0 GiB  1.6 GiB/s  0:01")
	step(125*time.Second, 4<<30, "\r\x1b[Kwrite-bw 65536 bytes: [====================] 100%  4.0 GiB  32.8 MiB/s  2:05")

	buf.Reset()
	p.Clear()
	if buf.String() != "\r\x1b[K" {
		t.Errorf("Clear wrote %q", buf.String())
	}
	buf.Reset()
	p.Clear() // nothing left to clear
	if buf.Len() != 0 {
		t.Errorf("second Clear wrote %q", buf.String())
	}
}

func TestProgressWithoutTotal(t *testing.T) {
	t0 := time.Unix(0, 0)
	now, reads := t0.Add(3725*time.Second), 0
	var buf bytes.Buffer
	p := &Progress{Label: "tbrdma cat: sent", w: &buf, on: true, now: fakeClock(&now, &reads), start: t0}
	p.Update(1536)
	if want := "\r\x1b[Ktbrdma cat: sent: 1.5 KiB  0 B/s  1:02:05"; buf.String() != want {
		t.Errorf("wrote %q, want %q", buf.String(), want)
	}
}

// TestProgressOff: off a terminal nothing is written and the clock is
// never read (the bandwidth loops call Update per completion batch).
func TestProgressOff(t *testing.T) {
	io, _, stderr := Test()
	now, reads := time.Unix(0, 0), 0
	p := NewProgress(io, fakeClock(&now, &reads), "x")
	for i := range 10 {
		now = now.Add(time.Second)
		p.Update(uint64(i) << 20)
	}
	p.Clear()
	if stderr.Len() != 0 || reads != 0 {
		t.Errorf("off a terminal: wrote %q, read the clock %d times", stderr, reads)
	}
	io.SetStderrTTY(true)
	p = NewProgress(io, fakeClock(&now, &reads), "x")
	now = now.Add(2 * time.Second)
	p.Update(1)
	if stderr.Len() == 0 {
		t.Error("on a terminal: nothing drawn after 2 s")
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1 << 30: "1.0 GiB", 3 << 50: "3.0 PiB", 1 << 62: "4096.0 PiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
