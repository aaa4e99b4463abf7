package perf

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Line is perftest's separator: 87 dashes.
var Line = strings.Repeat("-", 87)

// WaitBanner is what a perftest server prints before a client connects.
const WaitBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"

// Verb is a perftest test verb.
type Verb int

const (
	VerbSend Verb = iota
	VerbWrite
	VerbRead
	VerbAtomic
)

// TestInfo describes a test for the header block.
type TestInfo struct {
	Verb       Verb
	BW         bool   // bandwidth test (else latency)
	AtomicType string // "FETCH_AND_ADD" or "CMP_AND_SWAP"
	Device     string
	QPs        int // perftest's -q (0 prints as 1)
	Server     bool
	TxDepth    int
	RxDepth    int // printed by a SEND test's server
	CQMod      int
	MTU        int // bytes
	GIDIndex   int
	OutReads   int
	RDMACM     bool   // -R: the QP connected with rdma_cm, the exchange over it
	Conn       string // -c: "RC" (also when empty), "UC" or "UD"
	Inline     int    // -I: max inline data (WRITE and SEND tests)
	PostList   int    // -l: requests per post (bandwidth tests; 0 or 1: none)
	Events     bool   // -e
	Bidir      bool   // -b: both sides send (bandwidth tests)
}

// Title returns the test's title, e.g. "RDMA_Write BW Test".
func (t *TestInfo) Title() string {
	var s string
	switch t.Verb {
	case VerbSend:
		s = "Send"
	case VerbWrite:
		s = "RDMA_Write"
	case VerbRead:
		s = "RDMA_Read"
	case VerbAtomic:
		s = "Atomic " + t.AtomicType
	}
	if t.BW && t.Bidir {
		s += " Bidirectional" // perftest's order: Bidirectional Post List BW
	}
	if t.BW && t.PostList > 1 {
		s += " Post List"
	}
	if t.BW {
		return s + " BW Test"
	}
	return s + " Latency Test"
}

// PrintHeader writes the header block (ctx_print_test_info) in the layout
// of the perftest the rxe guests run.
func PrintHeader(w io.Writer, t *TestInfo) {
	fmt.Fprintln(w, Line)
	fmt.Fprintf(w, "                    %s\n", t.Title())
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", t.Device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", max(t.QPs, 1))
	conn := t.Conn
	if conn == "" {
		conn = "RC"
	}
	fmt.Fprintf(w, " Connection type : %s\t\tUsing SRQ      : OFF\n", conn)
	fmt.Fprintf(w, " PCIe relax order: OFF\n")
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	if !t.Server || t.Bidir {
		fmt.Fprintf(w, " TX depth        : %d\n", t.TxDepth)
	}
	if t.PostList > 1 {
		fmt.Fprintf(w, " Post List       : %d\n", t.PostList)
	}
	if (t.Server || t.Bidir) && t.Verb == VerbSend {
		fmt.Fprintf(w, " RX depth        : %d\n", t.RxDepth)
	}
	if t.BW {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", t.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", t.MTU)
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " GID index       : %d\n", t.GIDIndex)
	if t.Verb == VerbRead || t.Verb == VerbAtomic {
		fmt.Fprintf(w, " Outstand reads  : %d\n", t.OutReads)
	} else {
		fmt.Fprintf(w, " Max inline data : %d[B]\n", t.Inline)
	}
	if t.RDMACM {
		fmt.Fprintf(w, " rdma_cm QPs\t : ON\n")
		fmt.Fprintf(w, " Data ex. method : rdma_cm\n")
	} else {
		fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
		fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	}
	fmt.Fprintln(w, Line)
}

// CMWaitNote is what a perftest -R server prints after its header block,
// before the test QP's connection.
var CMWaitNote = " Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP\n" + Line + "\n"

// altHex formats v like C's "%#0*x": "0x" and zero padding to width
// characters in all, but a zero value as plain zero-padded digits.
func altHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", width-2, v)
}

// PrintDest writes one "local address:" or "remote address:" entry
// (ctx_print_pingpong_data) with its GID line.
func PrintDest(w io.Writer, side string, d Dest, verb Verb) {
	fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", side, altHex(uint64(d.LID), 4), altHex(uint64(d.QPN), 6), altHex(uint64(d.PSN), 6))
	switch verb {
	case VerbRead:
		fmt.Fprintf(w, " OUT %s", altHex(uint64(d.OutReads), 4))
		fallthrough
	case VerbWrite:
		fmt.Fprintf(w, " RKey %s VAddr %s", altHex(uint64(d.RKey), 8), altHex(d.VAddr, 16))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, " GID: ")
	for i, b := range d.GID {
		if i > 0 {
			fmt.Fprint(w, ":")
		}
		fmt.Fprintf(w, "%02d", b)
	}
	fmt.Fprintln(w)
}

// LatHeader is the latency table's header (with perftest's trailing space).
const LatHeader = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "

// BWHeader is the bandwidth table's header.
const BWHeader = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"

// BWHeaderGbits is the bandwidth table's header with --report_gbits.
const BWHeaderGbits = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"

// GbitsPerMiB converts perftest's MiB/s to its Gb/s (10^9 bits/s):
// perftest divides bytes per second by 125000000 instead of 2^20.
const GbitsPerMiB = MiB / 125e6

// Gbits returns r with its bandwidth figures in Gb/s (--report_gbits).
func (r BWReport) Gbits() BWReport {
	r.Peak *= GbitsPerMiB
	r.Average *= GbitsPerMiB
	return r
}

// MiBs returns r, whose bandwidth figures are in Gb/s, in MiB/s.
func (r BWReport) MiBs() BWReport {
	r.Peak /= GbitsPerMiB
	r.Average /= GbitsPerMiB
	return r
}

// PrintBWGbits writes one bandwidth row whose figures are in Gb/s, as
// perftest does with --report_gbits: below 0.1 Gb/s with six decimals.
func PrintBWGbits(w io.Writer, r BWReport) {
	if r.Average < 0.1 {
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.Peak, r.Average, r.MsgRate)
		return
	}
	PrintBW(w, r)
}

// LatDurHeader is the latency table's header in duration mode (-D).
const LatDurHeader = " #bytes        #iterations       t_avg[usec]    tps average"

// PrintLat writes one latency row (in duration mode: bytes, iterations,
// average and transactions per second).
func PrintLat(w io.Writer, s LatStats) {
	if s.Timed {
		fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f\n", s.Size, s.Iters, s.Avg, s.TPS)
		return
	}
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		s.Size, s.Iters, s.Min, s.Max, s.Typical, s.Avg, s.Stdev, s.P99, s.P999)
}

// PrintSamples writes perftest's -H or -U list: a "#, unit" line, then
// one "i, value" line per sample (C's %g: six significant digits).
func PrintSamples(w io.Writer, unit string, samples []float64) {
	fmt.Fprintf(w, "#, %s\n", unit)
	for i, v := range samples {
		fmt.Fprintf(w, "%d, %s\n", i+1, cG(v))
	}
}

// cG formats v as C's printf "%g" does: six significant digits, no
// trailing zeros, an exponent of at least two digits below 1e-4 and from
// 1e6 on.
func cG(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// PrintBW writes one bandwidth row.
func PrintBW(w io.Writer, r BWReport) {
	fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.Peak, r.Average, r.MsgRate)
}
