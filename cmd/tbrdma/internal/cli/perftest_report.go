package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/verbs"
)

// This file has perftest's flags that shape what a perftest command posts
// and reports, without anything the peer must match: -I (inline), -l
// (post list), -Q on the latency tests, -H, -U and -C (latency reports),
// and --out_json / --out_json_file (perftest's JSON report file).

// reportFlags are the options of this file.
type reportFlags struct {
	Inline      int  // -I: max inline bytes (WRITE and SEND tests)
	PostList    int  // -l: requests per post (bandwidth tests)
	Histogram   bool // -H
	Unsorted    bool // -U
	Cycles      bool // -C
	OutJSON     bool
	OutJSONFile string
	// postListCQ: -l set -Q (perftest prints a note about it).
	postListCQ bool
	// mhz is the CPU's nominal frequency for -C (cycles per µs).
	mhz float64
}

// defaultInline is perftest's -I default on a device it knows: 220 bytes
// for write-lat, 236 for send-lat (RC), none for the bandwidth tests.
func defaultInline(k *perftestKind) int {
	switch {
	case k.bw:
		return 0
	case k.verb == perf.VerbWrite:
		return 220
	case k.verb == perf.VerbSend:
		return 236
	}
	return 0
}

// addReportFlags adds this file's flags for test k.
func addReportFlags(fl *pflag.FlagSet, o *perftestOptions, k *perftestKind) {
	if k.verb == perf.VerbWrite || k.verb == perf.VerbSend {
		fl.IntVarP(&o.Inline, "inline_size", "I", defaultInline(k), fmt.Sprintf("post messages of at most `size` bytes inline (0-%d)", verbs.MaxInlineData))
	}
	if k.bw {
		fl.IntVarP(&o.PostList, "post_list", "l", 1, "post `n` work requests in one call (-n a multiple of it; -Q defaults to it)")
	} else {
		fl.IntVarP(&o.CQMod, "cq-mod", "Q", 100, "accepted as perftest's latency tests take it: capped at the tx depth, 1 (every request signaled)")
		fl.BoolVarP(&o.Histogram, "report-histogram", "H", false, "print every sample, sorted, before the row")
		fl.BoolVarP(&o.Unsorted, "report-unsorted", "U", false, "print every sample in the order measured before the row")
		fl.BoolVarP(&o.Cycles, "report-cycles", "C", false, "report CPU cycles (from the monotonic clock at the CPU's MHz in /proc/cpuinfo) instead of microseconds")
	}
	fl.BoolVar(&o.OutJSON, "out_json", false, "also write perftest's JSON report to --out_json_file (rewritten after each row)")
	fl.StringVar(&o.OutJSONFile, "out_json_file", perf.DefaultJSONFile, "`file` of --out_json")
}

// checkReport checks this file's flags, once check has settled -t, -Q
// and -n.
func (o *perftestOptions) checkReport(c *cobra.Command) error {
	k := o.Kind
	if o.Inline < 0 || o.Inline > verbs.MaxInlineData {
		return FlagErrorf("invalid -I %d: want 0..%d (tbrdma's QPs carry at most %d bytes inline)", o.Inline, verbs.MaxInlineData, verbs.MaxInlineData)
	}
	if !k.bw {
		if o.CQMod < 1 || o.CQMod > 1024 {
			return FlagErrorf("invalid -Q %d: want 1..1024", o.CQMod)
		}
		// perftest caps -Q at the tx depth, 1 in a latency test: every
		// request is signaled, as without -Q. The hint keeps Q=0.
		o.CQMod = 0
	}
	if k.bw {
		if err := o.checkPostList(c); err != nil {
			return err
		}
	}
	if o.Cycles && (o.JSON || o.CSV) {
		return FlagErrorf("-C reports CPU cycles in perftest's table; --json and --csv report nanoseconds: drop one of them")
	}
	if o.Cycles {
		mhz, err := cpuMHz()
		if err != nil {
			return FlagErrorf("-C: %v", err)
		}
		o.mhz = mhz
	}
	if o.OutJSON && o.OutJSONFile == "" {
		return FlagErrorf("--out_json_file is empty: give the report's file name")
	}
	return nil
}

// checkPostList checks -l as perftest does: -n a multiple of it, -Q
// (which defaults to it) a divisor of it; and the send queue must hold a
// list.
func (o *perftestOptions) checkPostList(c *cobra.Command) error {
	if o.PostList < 1 {
		return FlagErrorf("invalid -l %d: want 1 or more", o.PostList)
	}
	if o.PostList > 1 {
		if o.Iters%o.PostList != 0 {
			return FlagErrorf("-l %d: -n %d is not a multiple of it: give -n a multiple of the post list size, as perftest requires", o.PostList, o.Iters)
		}
		if o.PostList > o.TxDepth {
			return FlagErrorf("-l %d is more than the send queue (-t %d): give -t at least the post list size", o.PostList, o.TxDepth)
		}
		switch {
		case !c.Flags().Changed("cq-mod"):
			o.CQMod, o.postListCQ = o.PostList, true
		case o.PostList%o.CQMod != 0:
			return FlagErrorf("-l %d is not a multiple of -Q %d: give a post list size that is a multiple of the CQ moderation, as perftest requires", o.PostList, o.CQMod)
		}
	}
	return nil
}

// printSamples prints -U's and -H's lists before a latency row, and then
// the table's header again, as perftest does.
func (t *perftest) printSamples(s perf.LatStats) {
	o := t.o
	if !o.Unsorted && !o.Histogram {
		return
	}
	out := t.human()
	unit := "usec"
	if o.Cycles {
		unit = "cycles"
	}
	if o.Unsorted {
		perf.PrintSamples(out, unit, s.Samples)
	}
	if o.Histogram {
		perf.PrintSamples(out, unit, s.Sorted)
	}
	fmt.Fprintln(out, perf.Line)
	fmt.Fprintln(out, perf.LatHeader)
}

// writeOutJSON rewrites --out_json_file with write's report, as perftest
// rewrites its file after every row (with -a the last size remains).
func (t *perftest) writeOutJSON(write func(io.Writer) error) error {
	o := t.o
	if !o.OutJSON {
		return nil
	}
	f, err := os.OpenFile(o.OutJSONFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("--out_json: %w: give --out_json_file a path you can write", err)
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--out_json: writing %s: %w", o.OutJSONFile, err)
	}
	return nil
}

// parseCPUMHz returns the first "cpu MHz" of a /proc/cpuinfo, the
// figure perftest takes (get_cpu_mhz reads the same lines).
func parseCPUMHz(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(mhz > 0) || mhz > 1e6 {
			return 0, fmt.Errorf("/proc/cpuinfo has cpu MHz %q, not a frequency: drop -C to report microseconds", strings.TrimSpace(v))
		}
		return mhz, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading /proc/cpuinfo: %w", err)
	}
	return 0, fmt.Errorf("/proc/cpuinfo has no \"cpu MHz\" line (this CPU does not report its frequency there): drop -C to report microseconds")
}
