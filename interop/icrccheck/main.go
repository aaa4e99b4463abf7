// Command icrccheck reads pcap files and checks every RoCEv2 packet (UDP
// destination port 4791): it must parse, and its ICRC must match the IP and
// UDP headers as they were captured. It prints, per file, the packet count
// per direction and BTH opcode and the first packet whose ICRC is wrong
// (with its headers in hex).
//
// With -from ADDR it also follows the packets of the implementation under
// test (sent from ADDR; the other end is rdma_rxe) and names the first one
// that differs from what rxe expects: a bad ICRC, a packet that does not
// parse, one tshark reported as malformed (-malformed), a request sent
// again, a request rxe answered with a NAK or RNR NAK, or a NAK it sent.
// It then prints a line
//
//	summary from=ADDR sent=N received=N badicrc=N unparsable=N malformed=N resent=N naks=N peerresent=N frames=N
//
// (frames counts every frame in the file, RoCEv2 or not)
// for scripts, and "first problem: ..." (or "first problem: none").
//
// The exit status is 1 if any ICRC was wrong, a packet did not parse, a
// frame in -malformed exists, or a file held no RoCEv2 packet at all; 2 on
// bad usage. Resent requests and NAKs are reported but do not fail the
// check on their own: rxe itself resends under emulation, and the tools'
// own verdicts say whether the run recovered.
//
// Usage: icrccheck [-q] [-from ADDR] [-malformed N,N,...] FILE.pcap...
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	quiet := flag.Bool("q", false, "print only the summary lines of each file")
	fromFlag := flag.String("from", "", "IPv4 address of the implementation under test: report its first packet that differs from what rxe expects")
	malFlag := flag.String("malformed", "", "comma-separated frame numbers that tshark reported as malformed (one FILE only)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: icrccheck [-q] [-from ADDR] [-malformed N,N,...] FILE.pcap...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var from netip.Addr
	if *fromFlag != "" {
		a, err := netip.ParseAddr(*fromFlag)
		if err != nil {
			fmt.Fprintf(os.Stderr, "icrccheck: -from %q is not an IP address: give the address tbrdma sent from, e.g. -from 198.18.0.1\n", *fromFlag)
			os.Exit(2)
		}
		from = a
	}
	malformed, err := parseFrames(*malFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "icrccheck: -malformed: %v (want frame numbers such as 12,40)\n", err)
		os.Exit(2)
	}
	if len(malformed) > 0 && flag.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "icrccheck: -malformed names frames of one file: give exactly one FILE with it")
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		if !report(path, from, malformed, *quiet) {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func parseFrames(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a frame number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// report checks one file, prints what it found and says whether it passed.
func report(path string, from netip.Addr, malformed []int, quiet bool) bool {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "icrccheck: %v\n", err)
		return false
	}
	defer f.Close()
	res, err := check(f, path, from, malformed)
	ok := true
	if err != nil {
		fmt.Fprintf(os.Stderr, "icrccheck: %v (the capture is truncated or damaged: was tcpdump stopped cleanly?)\n", err)
		ok = false
		if res == nil {
			return false
		}
	}
	verdict := "ok"
	switch {
	case res.roce == 0:
		verdict = "FAIL (no RoCEv2 packets)"
	case res.bad > 0 || res.malformed > 0 || len(malformed) > 0:
		verdict = "FAIL"
	}
	if verdict != "ok" {
		ok = false
	}
	fmt.Printf("%s: %d RoCEv2 packets, %d bad ICRC, %d malformed: %s\n", path, res.roce, res.bad, res.malformed, verdict)
	if !quiet {
		keys := make([]string, 0, len(res.counts))
		for k := range res.counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf("  %5d  %s\n", res.counts[k], k)
		}
	}
	if res.firstBad != "" {
		fmt.Printf("  first bad packet: %s\n", res.firstBad)
	}
	if len(malformed) > 0 {
		fmt.Printf("  tshark reported %d malformed frame(s): %v\n", len(malformed), malformed)
	}
	if len(res.missingMalformed) > 0 {
		fmt.Printf("  warning: -malformed names frames past the end of the file: %v\n", res.missingMalformed)
	}
	if from.IsValid() {
		fmt.Printf("summary from=%v sent=%d received=%d badicrc=%d unparsable=%d malformed=%d resent=%d naks=%d peerresent=%d frames=%d\n",
			from, res.sent, res.received, res.sentBad, res.sentUnparsable, res.sentMalformed, res.sentResent, res.naksFromPeer+res.naksToPeer, res.peerResent, res.frames)
		if len(res.problems) == 0 {
			fmt.Printf("first problem: none (every packet from %v parsed, had a correct ICRC, was not resent and got no NAK)\n", from)
		} else {
			fmt.Printf("first problem: %v\n", res.problems[0])
			for _, p := range res.problems[1:min(len(res.problems), 5)] {
				fmt.Printf("  then: %v\n", p)
			}
			if len(res.problems) > 5 {
				fmt.Printf("  and %d more\n", len(res.problems)-5)
			}
		}
		fmt.Printf("last packet from %v: %s\n", from, orNone(res.lastSent))
		fmt.Printf("last packet to %v: %s\n", from, orNone(res.lastReceived))
	}
	return ok
}
