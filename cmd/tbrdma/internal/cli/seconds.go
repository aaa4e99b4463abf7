package cli

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// maxFlagSeconds bounds every duration flag (11.5 days): beyond it a value
// is a typo, and Duration arithmetic stays far from overflow.
const maxFlagSeconds = 1000000

// parseFlagDuration reads a duration flag's value: a bare number of
// seconds ("5", "0.5", as ping(8) and perftest take them) or a Go duration
// ("5s", "1m30s", "200ms"). Negative values, NaN and infinities are refused.
func parseFlagDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || f < 0 || f > float64(maxFlagSeconds) {
			return 0, fmt.Errorf("want seconds from 0 to %d (e.g. 5 or 0.5) or a duration (e.g. 1m30s)", maxFlagSeconds)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want seconds (e.g. 5 or 0.5) or a duration (e.g. 1m30s, 200ms)")
	}
	if d < 0 || d.Seconds() > float64(maxFlagSeconds) {
		return 0, fmt.Errorf("want a duration from 0 to %ds, not %v", maxFlagSeconds, d)
	}
	return d, nil
}

// durationFlag is a pflag.Value over a time.Duration that takes seconds or
// a Go duration (parseFlagDuration).
type durationFlag struct{ d *time.Duration }

// newDurationFlag sets *d to def and returns its flag value.
func newDurationFlag(d *time.Duration, def time.Duration) durationFlag {
	*d = def
	return durationFlag{d}
}

func (v durationFlag) Set(s string) (err error) { *v.d, err = parseFlagDuration(s); return err }
func (v durationFlag) Type() string             { return "duration" }

// String prints 0 as "0", so that pflag leaves a zero default out of the
// help, as it does for its own duration flags.
func (v durationFlag) String() string {
	if *v.d == 0 {
		return "0"
	}
	return v.d.String()
}

// secondsFlag is a pflag.Value over a float64 number of seconds that also
// takes a Go duration (parseFlagDuration), for flags that are seconds in
// the stock tools (ping's -W and -i).
type secondsFlag struct{ f *float64 }

// newSecondsFlag sets *f to def and returns its flag value.
func newSecondsFlag(f *float64, def float64) secondsFlag {
	*f = def
	return secondsFlag{f}
}

func (v secondsFlag) Set(s string) error {
	d, err := parseFlagDuration(s)
	*v.f = d.Seconds()
	return err
}
func (v secondsFlag) Type() string   { return "seconds" }
func (v secondsFlag) String() string { return strconv.FormatFloat(*v.f, 'g', -1, 64) }
