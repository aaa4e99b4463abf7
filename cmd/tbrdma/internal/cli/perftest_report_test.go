package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReportFlagDefaults checks perftest's -I defaults, -l's effect on
// -Q, and -Q on the latency tests (accepted, capped at the tx depth).
func TestReportFlagDefaults(t *testing.T) {
	f, _, _ := testFactory()
	for _, c := range []struct {
		kind                    *perftestKind
		args                    []string
		inline, postList, cqMod int
		note                    bool
	}{
		{writeLatTest, nil, 220, 0, 0, false},
		{sendLatTest, nil, 236, 0, 0, false},
		{sendLatTest, []string{"-I", "0"}, 0, 0, 0, false},
		{readLatTest, []string{"-Q", "7"}, 0, 0, 0, false},
		{writeBWTest, []string{"-s", "64"}, 0, 1, 100, false},
		{sendBWTest, []string{"-I", "100"}, 100, 1, 1, false},
		{writeBWTest, []string{"-l", "4"}, 0, 4, 4, true}, // -Q follows -l, over the large-message 1
		{readBWTest, []string{"-l", "4", "-Q", "2"}, 0, 4, 2, false},
	} {
		o := parsePerftest(t, f, c.kind, append(c.args, "x")...)
		if o.Inline != c.inline || o.PostList != c.postList || o.CQMod != c.cqMod || o.postListCQ != c.note {
			t.Errorf("%s %q: -I %d -l %d -Q %d note %v, want %d %d %d %v", c.kind.name, c.args,
				o.Inline, o.PostList, o.CQMod, o.postListCQ, c.inline, c.postList, c.cqMod, c.note)
		}
	}
}

func TestParseCPUMHz(t *testing.T) {
	for _, c := range []struct {
		in   string
		mhz  float64
		fail string
	}{
		{"processor\t: 0\nmodel name\t: x\ncpu MHz\t\t: 2995.212\ncpu MHz\t\t: 1200.000\n", 2995.212, ""},
		{"processor\t: 0\nBogoMIPS\t: 50.00\n", 0, `no "cpu MHz" line`},
		{"cpu MHz\t\t: fast\n", 0, `cpu MHz "fast"`},
		{"cpu MHz : -5\n", 0, `cpu MHz "-5"`},
		{"cpu MHz : NaN\n", 0, `cpu MHz "NaN"`},
		{"", 0, `no "cpu MHz" line`},
	} {
		mhz, err := parseCPUMHz(strings.NewReader(c.in))
		switch {
		case c.fail == "" && (err != nil || mhz != c.mhz):
			t.Errorf("%q: %v, %v; want %v", c.in, mhz, err, c.mhz)
		case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)):
			t.Errorf("%q: %v, %v; want an error with %q", c.in, mhz, err, c.fail)
		}
	}
}

// samplesRE matches a -H or -U list of n samples in unit.
func samplesRE(unit string, n int) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^#, ` + unit + `\n(\d+, [\d.e+-]+\n){` + itoa(n) + `}` + regexp.QuoteMeta(perfLine()) + "\n")
}

// TestReportFlagsEndToEnd runs send-lat with -H -U -I and write-bw with -l
// between two tbrdma ends.
func TestReportFlagsEndToEnd(t *testing.T) {
	sout, cout, serr, cerr := runPerftestPair(t, sendLatTest, []string{"-n", "20", "-s", "64", "-H", "-U", "-I", "64"}, nil)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		if !strings.Contains(out, " Max inline data : 64[B]\n") {
			t.Errorf("%s: header without -I 64:\n%s", side, out)
		}
		// 19 deltas unsorted, then the 17 kept sorted, then the header again.
		lists := regexp.MustCompile(`(?m)^#, usec\n((\d+, [\d.e+-]+\n)+)`).FindAllStringSubmatch(out, -1)
		if len(lists) != 2 || strings.Count(lists[0][1], "\n") != 19 || strings.Count(lists[1][1], "\n") != 17 {
			t.Errorf("%s: want a list of 19 samples (-U) and one of 17 (-H):\n%s", side, out)
		}
		if strings.Count(out, " #bytes #iterations") != 2 || !latRow(64, 20).MatchString(out) {
			t.Errorf("%s: want the table header twice and a row:\n%s", side, out)
		}
	}
	if serr != "" || cerr != "" {
		t.Errorf("stderr: server %q, client %q", serr, cerr)
	}

	sout, cout, _, _ = runPerftestPair(t, writeBWTest, []string{"-n", "50", "-s", "1000", "-l", "5", "-t", "20"}, nil)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		if !strings.Contains(out, "Post List requested - CQ moderation will be the size of the post list\n") ||
			!strings.Contains(out, "                    RDMA_Write Post List BW Test\n") || !strings.Contains(out, " Post List       : 5\n") ||
			!strings.Contains(out, " CQ Moderation   : 5\n") || !bwRow(1000, 50, false).MatchString(out) {
			t.Errorf("%s: write-bw -l 5:\n%s", side, out)
		}
	}
}

// perfLine is perftest's separator line.
func perfLine() string { return strings.Repeat("-", 87) }

// TestOutJSONEndToEnd runs write-lat with --out_json on both ends (the
// client with -C too, where the CPU's MHz is known) and reads the files.
func TestOutJSONEndToEnd(t *testing.T) {
	dir := t.TempDir()
	sfile, cfile := filepath.Join(dir, "server.json"), filepath.Join(dir, "client.json")
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, _, _ := testFactory()
	cf, cout, _ := testFactory()
	_, mhzErr := cpuMHz()
	cargs := []string{"-n", "20", "-s", "8", "--out_json", "--out_json_file", cfile, "-H"}
	if mhzErr == nil {
		cargs = append(cargs, "-C")
	}
	so := parsePerftest(t, sf, writeLatTest, "--bind", sa.String(), "-p", "0", "-n", "20", "-s", "8", "--out_json", "--out_json_file", sfile)
	pair(t, func(l func(net.Addr)) error {
		so.Listening = l
		return runPerftest(context.Background(), so)
	}, func(port int) error {
		co := parsePerftest(t, cf, writeLatTest, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, cargs...)...)
		return runPerftest(context.Background(), co)
	})
	for side, file := range map[string]string{"server": sfile, "client": cfile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		var r struct {
			Info struct {
				Test   string `json:"test"`
				Inline *int   `json:"Max_inline_data"`
				TX     *int   `json:"TX_depth"`
			} `json:"test_info"`
			Results struct {
				Size  int      `json:"MsgSize"`
				Iters int      `json:"n_iterations"`
				Min   *float64 `json:"t_min"`
			} `json:"results"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v in\n%s", side, err, b)
		}
		if r.Info.Test != "RDMA_Write_Latency_Test" || r.Info.Inline == nil || *r.Info.Inline != 220 ||
			r.Results.Size != 8 || r.Results.Iters != 20 || r.Results.Min == nil || *r.Results.Min <= 0 {
			t.Errorf("%s: report\n%s", side, b)
		}
		if (r.Info.TX != nil) != (side == "client") {
			t.Errorf("%s: TX_depth is the client's only:\n%s", side, b)
		}
	}
	unit := "usec"
	if mhzErr == nil {
		unit = "cycles"
	}
	if !samplesRE(unit, 17).MatchString(cout.String()) {
		t.Errorf("client -H (%s):\n%s", unit, cout)
	}
}

// FuzzParseCPUMHz: any /proc/cpuinfo text gives a frequency in range or
// an error, never a panic.
func FuzzParseCPUMHz(f *testing.F) {
	f.Add("cpu MHz\t\t: 2995.212\n")
	f.Add("cpu MHz : 1e400\n")
	f.Add("cpu MHz:\n")
	f.Fuzz(func(t *testing.T, s string) {
		mhz, err := parseCPUMHz(strings.NewReader(s))
		if err == nil && !(mhz > 0 && mhz <= 1e6) {
			t.Errorf("%q: %v MHz without an error", s, mhz)
		}
	})
}
