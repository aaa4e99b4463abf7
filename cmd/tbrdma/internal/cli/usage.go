package cli

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// printUsageError writes a usage error as git and gh do: the error, a hint
// when the flag is one people know from perftest or ping(8) that tbrdma
// does not have, the command's one-line usage and where the full help is.
func printUsageError(w io.Writer, cmd *cobra.Command, err error) {
	fmt.Fprintf(w, "tbrdma: %v\n", err)
	if hint := unknownFlagHint(cmd, err); hint != "" {
		fmt.Fprintf(w, "%s\n", hint)
	}
	fmt.Fprintf(w, "Usage: %s\n", cmd.UseLine())
	fmt.Fprintf(w, "Run '%s --help' for the flags and examples.\n", cmd.CommandPath())
}

// unknownFlagRE matches pflag's messages for a flag it does not know.
var unknownFlagRE = regexp.MustCompile(`^unknown (?:shorthand )?flag: (?:'(.)' in -\S*|--(\S+))`)

// foreignFlag is a flag of perftest or ping(8) that tbrdma's command does
// not have, and what to use instead.
type foreignFlag struct {
	short, long string
	hint        string
}

// perftestFlags are perftest 4.5 flags of ib_*_bw / ib_*_lat that tbrdma's
// perftest commands do not take (yet).
var perftestFlags = []foreignFlag{
	{"q", "qp", "perftest's -q/--qp (several QPs) applies to the bandwidth tests only (write-bw, read-bw, send-bw), as in perftest, whose latency tests refuse it"},
	{"b", "bidirectional", "perftest's -b/--bidirectional applies to the bandwidth tests only (write-bw, read-bw, send-bw), as in perftest, whose latency tests do not take it"},
	{"", "report-both", "perftest's --report-both (each side's own figures after -b's sums) is not supported: run each direction alone, without -b, for its own figures"},
	{"", "report_gbits", "perftest's --report_gbits applies to the bandwidth tests only (write-bw, read-bw, send-bw), as in perftest"},
	{"I", "inline_size", "perftest's -I/--inline_size applies to the WRITE and SEND tests only (write-bw, send-bw, write-lat, send-lat): perftest sets it to 0 for READ and atomics"},
	{"l", "post_list", "perftest's -l/--post_list applies to the bandwidth tests only (write-bw, read-bw, send-bw), as in perftest, whose latency tests refuse it"},
	{"H", "report-histogram", "perftest's -H/--report-histogram applies to the latency tests only (write-lat, read-lat, send-lat, atomic-lat), as in perftest, whose bandwidth tests refuse it"},
	{"U", "report-unsorted", "perftest's -U/--report-unsorted applies to the latency tests only (write-lat, read-lat, send-lat, atomic-lat), as in perftest, whose bandwidth tests refuse it"},
	{"C", "report-cycles", "perftest's -C/--report-cycles applies to the latency tests only (write-lat, read-lat, send-lat, atomic-lat), as in perftest, whose bandwidth tests refuse it"},
	{"", "run_infinitely", "perftest's --run_infinitely applies to the bandwidth tests only (write-bw, read-bw, send-bw), as in perftest"},
	{"o", "outs", "perftest's -o/--outs applies to the READ and atomic tests only (read-lat, read-bw, atomic-lat)"},
}

// pingFlags are ping(8) flags that tbrdma ping does not take.
var pingFlags = []foreignFlag{
	{"t", "ttl", "ping(8)'s -t TTL does not apply: RoCE packets are not routed by TTL here"},
	{"f", "flood", "ping(8)'s -f (flood) is not supported: use -i 0 for back-to-back iterations"},
	{"I", "interface", "ping(8)'s -I is tbrdma's --bind ADDRESS"},
}

// unknownFlagHint returns a hint for err when it is pflag's "unknown flag"
// for a flag that cmd's counterpart among the stock tools has.
func unknownFlagHint(cmd *cobra.Command, err error) string {
	m := unknownFlagRE.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	var table []foreignFlag
	switch name := cmd.Name(); {
	case name == "ping":
		table = pingFlags
	case isPerftestCommand(name):
		table = perftestFlags
	default:
		return ""
	}
	short, long := m[1], strings.SplitN(m[2], "=", 2)[0]
	for _, f := range table {
		if (short != "" && f.short == short) || (long != "" && f.long == long) {
			return f.hint
		}
	}
	return ""
}

// isPerftestCommand reports whether name is one of the perftest-style
// commands.
func isPerftestCommand(name string) bool {
	switch name {
	case "write-bw", "read-bw", "send-bw", "write-lat", "read-lat", "send-lat", "atomic-lat":
		return true
	}
	return false
}
