package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// This file holds the tests' duration mode, as perftest's: -D/--duration
// (run for a time) and -f/--margin (the part of each end of the run left
// out of the figures) for every test; for the bandwidth tests also
// --run_infinitely (a row every -D seconds until interrupted) and
// --report_gbits (Gb/s instead of MiB/s). The loops are perf.Timed's
// (perf/duration.go, perf/latduration.go).

// defInfiniteInterval is perftest's DEF_DURATION: --run_infinitely's
// interval without -D.
const defInfiniteInterval = 5 * time.Second

// closeAfterInterrupt bounds the closing exchange of a --run_infinitely
// run that a signal ended.
const closeAfterInterrupt = 10 * time.Second

// errServeInfinite is serve's refusal of a send-bw --run_infinitely
// client.
var errServeInfinite = errors.New("tbrdma serve does not host send-bw --run_infinitely, whose server runs until it is interrupted: on the server's machine run a one-test server, tbrdma send-bw --run_infinitely, with the client's -D")

// addTimedFlags adds the duration flags: -D and -f, and for the
// bandwidth tests (bw) --run_infinitely and --report_gbits.
func addTimedFlags(fl *pflag.FlagSet, o *perftestOptions, bw bool) {
	fl.VarP(newDurationFlag(&o.Duration, 0), "duration", "D", "run for `seconds` instead of -n iterations, as perftest's -D (a Go duration such as 1m30s too); not with -a or -e")
	fl.VarP(newDurationFlag(&o.Margin, 0), "margin", "f", "with -D: leave `seconds` at each end of the run out of the figures (default -D/4 in whole seconds, as perftest)")
	if !bw {
		return
	}
	fl.BoolVar(&o.RunInfinitely, "run_infinitely", false, "run until interrupted (Ctrl-C, SIGTERM), a row every -D seconds (default 5)")
	fl.BoolVar(&o.ReportGbits, "report_gbits", false, "report bandwidth in Gb/s (10^9 bit/s) instead of MiB/s")
}

// checkTimed checks and completes the duration flags (perftest's rules:
// -D positive, not with -a nor -e; the margin -D/4 in whole seconds
// unless -f gives it; -D more than twice the margin). The bandwidth tests'
// depths are not lowered to -n in a timed run, which ignores -n.
func (o *perftestOptions) checkTimed(c *cobra.Command) error {
	if c.Flags().Changed("duration") && o.Duration <= 0 {
		return FlagErrorf("invalid -D %v: want a positive number of seconds (e.g. 10) or a duration (e.g. 1m30s)", o.Duration)
	}
	if o.RunInfinitely && o.Duration == 0 {
		o.Duration = defInfiniteInterval
	}
	if o.Duration == 0 {
		return nil
	}
	mode := "-D"
	if o.RunInfinitely {
		mode = "--run_infinitely"
	}
	if o.All {
		return FlagErrorf("%s runs one message size, not -a (perftest: duration mode doesn't support running on all sizes): give -s SIZE", mode)
	}
	if o.Events {
		return FlagErrorf("%s works without -e (perftest: duration mode doesn't work with events): drop -e", mode)
	}
	if o.Bidir {
		return FlagErrorf("%s with -b is not supported by tbrdma yet: run -b with -n ITERATIONS, or %s in one direction", mode, mode)
	}
	if o.PostList > 1 {
		return FlagErrorf("%s with -l is not supported by tbrdma yet: drop -l, or give -n ITERATIONS", mode)
	}
	if o.Histogram || o.Unsorted || o.Cycles {
		return FlagErrorf("-D reports the average latency only, without samples (as perftest): drop -H, -U and -C, or give -n ITERATIONS")
	}
	if !c.Flags().Changed("margin") {
		o.Margin = (o.Duration / 4).Truncate(time.Second)
	}
	return o.checkMargin()
}

// checkMargin is perftest's "DURATION > 2*MARGIN".
func (o *perftestOptions) checkMargin() error {
	if o.Duration <= 2*o.Margin {
		return FlagErrorf("-D %v must be more than twice the margin (-f %v), which is left out at each end: lower -f or raise -D", o.Duration, o.Margin)
	}
	return nil
}

// timed is the loop's duration mode, nil for a run of -n iterations.
func (t *perftest) timed() *perf.Timed {
	o := t.o
	if o.Duration == 0 {
		return nil
	}
	return &perf.Timed{Duration: o.Duration, Margin: o.Margin, Infinite: o.RunInfinitely, Row: t.printBW}
}

// latHeader is the latency table's header: perftest's duration mode has
// its own.
func (o *perftestOptions) latHeader() string {
	if o.Duration > 0 {
		return perf.LatDurHeader
	}
	return perf.LatHeader
}

// bwHeader is the bandwidth table's header, in the unit of --report_gbits.
func (o *perftestOptions) bwHeader() string {
	if o.ReportGbits {
		return perf.BWHeaderGbits
	}
	return perf.BWHeader
}

// timedHint is the hint's fields for the duration flags (none without
// them, so that a hint stays what older tbrdma servers read): D and f in
// milliseconds, inf and g 1 when set.
func (o *perftestOptions) timedHint() string {
	s := ""
	if o.Duration > 0 {
		s += fmt.Sprintf(" D=%d f=%d", o.Duration.Milliseconds(), o.Margin.Milliseconds())
	}
	if o.RunInfinitely {
		s += " inf=1"
	}
	if o.ReportGbits {
		s += " g=1"
	}
	return s
}

// timedFromHint sets o's duration flags from a client's hint fields,
// checked as the command checks its flags.
func (o *perftestOptions) timedFromHint(kv map[string]string) error {
	opt := func(k string, lo, hi int) (int, error) {
		if _, ok := kv[k]; !ok {
			return 0, nil
		}
		return hintInt(kv, k, lo, hi)
	}
	d, err := opt("D", 1, maxFlagSeconds*1000)
	if err != nil {
		return err
	}
	f, err := opt("f", 0, maxFlagSeconds*1000)
	if err != nil {
		return err
	}
	inf, err := opt("inf", 0, 1)
	if err != nil {
		return err
	}
	g, err := opt("g", 0, 1)
	if err != nil {
		return err
	}
	o.Duration, o.Margin = time.Duration(d)*time.Millisecond, time.Duration(f)*time.Millisecond
	o.RunInfinitely, o.ReportGbits = inf == 1, g == 1
	switch {
	case o.Duration == 0 && (o.RunInfinitely || o.Margin > 0):
		return fmt.Errorf("test hint: inf=%d f=%d without D", inf, f)
	case (o.RunInfinitely || o.ReportGbits) && !o.Kind.bw:
		return fmt.Errorf("test hint: %s with inf=%d g=%d: --run_infinitely and --report_gbits are for the bandwidth tests only", o.Kind.name, inf, g)
	case o.Duration > 0 && o.All:
		return fmt.Errorf("test hint: D=%d with a=1: duration mode runs one size", d)
	case o.Duration > 0 && o.Duration <= 2*o.Margin:
		return fmt.Errorf("test hint: D=%d f=%d: D must be more than twice f", d, f)
	}
	return nil
}

// describeTimed is how a side runs: "-D 3s", "--run_infinitely -D 5s",
// or "-n N".
func describeTimed(d time.Duration, inf bool, n int) string {
	switch {
	case inf:
		return fmt.Sprintf("--run_infinitely -D %v", d)
	case d > 0:
		return fmt.Sprintf("-D %v", d)
	}
	return "-n " + strconv.Itoa(n)
}

// timedMismatch is what differs in how long a client and this server
// run ("" when they agree). A send-bw server counts the messages, so it
// runs the client's -D (or the client's -n, checked with the counts), and
// --run_infinitely on both ends or neither; write-lat and send-lat's
// servers ping-pong with the client, so they run the same -D (or -n).
// atomic-lat's server checks its target against the client's -n, which a
// timed run has not: -D on both ends or neither. write-bw, read-bw and
// read-lat servers only wait for the client, whatever its mode.
func timedMismatch(o *perftestOptions, kv map[string]string) string {
	k := o.Kind
	pingPong := !k.bw && (k.verb == perf.VerbSend || k.verb == perf.VerbWrite)
	if !pingPong && k.verb != perf.VerbAtomic && (k.verb != perf.VerbSend || !k.bw) {
		return ""
	}
	cl := &perftestOptions{Kind: o.Kind}
	if cl.timedFromHint(kv) != nil {
		return "" // serve's checks name a malformed hint
	}
	same := cl.Duration == o.Duration
	if k.verb == perf.VerbAtomic {
		same = (cl.Duration > 0) == (o.Duration > 0)
	}
	if same && cl.RunInfinitely == o.RunInfinitely {
		return ""
	}
	n, _ := strconv.Atoi(kv["n"])
	return fmt.Sprintf("%s, this server %s", describeTimed(cl.Duration, cl.RunInfinitely, n), describeTimed(o.Duration, o.RunInfinitely, o.Iters))
}

// peerReport converts a bandwidth report the client sent (in the client's
// unit: Gb/s with its --report_gbits, as perftest sends it) to MiB/s. A
// tbrdma client's hint says its unit; a stock client's report is taken in
// this server's unit, as a stock server takes it.
func (t *perftest) peerReport(r perf.BWReport) perf.BWReport {
	gbits := t.o.ReportGbits
	if t.peerHint != nil {
		gbits = t.peerHint["g"] == "1"
	}
	if gbits {
		return r.MiBs()
	}
	return r
}

// loopContext returns the context the loop of a --run_infinitely run
// waits with (ctx: the signal ends the loop) and the one the rest of the
// run uses, which a signal during the loop ends only once the closing
// exchange has had closeAfterInterrupt; other runs use ctx for both.
func (t *perftest) loopContext(ctx context.Context) (loop, rest context.Context, done func()) {
	if !t.o.RunInfinitely {
		return ctx, ctx, func() {}
	}
	rest, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if !t.looping.Load() {
			cancel() // not yet in the loop: stop at once
			return
		}
		time.AfterFunc(closeAfterInterrupt, cancel)
	})
	return ctx, rest, func() { stop(); cancel() }
}

// loopWith returns the context a loop waits with: the signal's for a
// --run_infinitely loop (which then counts as started), else ctx.
func (t *perftest) loopWith(ctx context.Context) context.Context {
	if !t.o.RunInfinitely || t.loopCtx == nil {
		return ctx
	}
	t.looping.Store(true)
	return t.loopCtx
}

// interrupted reports whether a --run_infinitely loop has been ended by
// its signal, which is how such a run ends.
func (t *perftest) interrupted() bool {
	return t.o.RunInfinitely && t.loopCtx != nil && t.loopCtx.Err() != nil
}
