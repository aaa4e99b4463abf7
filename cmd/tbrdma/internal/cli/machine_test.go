package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/jsonout"
)

// jsonRows decodes one JSON object per line, each with exactly the keys
// want, and returns them.
func jsonRows(t *testing.T, side, out string, want []string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: line %q is not JSON: %v\nstdout:\n%s", side, line, err, out)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(keys, w) {
			t.Errorf("%s: keys %v, want %v", side, keys, w)
		}
		if m["schemaVersion"] != 1.0 {
			t.Errorf("%s: schemaVersion %v", side, m["schemaVersion"])
		}
		rows = append(rows, m)
	}
	return rows
}

var (
	benchKeys = []string{"schemaVersion", "test", "role", "bytes", "iterations"}
	bwKeys    = append(slices.Clone(benchKeys), "bw_peak_bps", "bw_avg_bps", "msg_rate_pps")
	latKeys   = append(slices.Clone(benchKeys), "t_min_ns", "t_max_ns", "t_typical_ns", "t_avg_ns", "t_stdev_ns", "p99_ns", "p999_ns")
)

func TestPerftestJSON(t *testing.T) {
	t.Run("write-bw", func(t *testing.T) {
		sout, cout, serr, cerr := runPerftestPair(t, writeBWTest, []string{"-n", "50", "-s", "65536", "--json"}, nil)
		if serr != "" || cerr != "" {
			t.Errorf("stderr (not a terminal: the header block is dropped): server %q, client %q", serr, cerr)
		}
		for side, out := range map[string]string{"server": sout, "client": cout} {
			rows := jsonRows(t, side, out, bwKeys)
			if len(rows) != 1 {
				t.Fatalf("%s: %d rows, want 1:\n%s", side, len(rows), out)
			}
			r := rows[0]
			if r["test"] != "write-bw" || r["role"] != side || r["bytes"] != 65536.0 || r["iterations"] != 50.0 {
				t.Errorf("%s: row %v", side, r)
			}
			avg, peak, pps := r["bw_avg_bps"].(float64), r["bw_peak_bps"].(float64), r["msg_rate_pps"].(float64)
			// Raw units: bits/s and packets/s agree with each other.
			if avg <= 0 || peak < avg*0.999 || pps <= 0 || abs(avg/(pps*65536*8)-1) > 0.01 {
				t.Errorf("%s: bw_avg_bps %v, bw_peak_bps %v, msg_rate_pps %v", side, avg, peak, pps)
			}
		}
	})
	t.Run("send-lat", func(t *testing.T) {
		_, cout, _, _ := runPerftestPair(t, sendLatTest, []string{"-n", "20", "-s", "64", "--json"}, nil)
		rows := jsonRows(t, "client", cout, latKeys)
		if len(rows) != 1 {
			t.Fatalf("%d rows, want 1:\n%s", len(rows), cout)
		}
		r := rows[0]
		tmin, typ, tmax := r["t_min_ns"].(float64), r["t_typical_ns"].(float64), r["t_max_ns"].(float64)
		if r["test"] != "send-lat" || r["bytes"] != 64.0 || r["iterations"] != 20.0 || !(0 < tmin && tmin <= typ && typ <= tmax) {
			t.Errorf("row %v", r)
		}
	})
}

func abs(x float64) float64 { return max(x, -x) }

func TestPerftestCSV(t *testing.T) {
	sout, cout, serr, cerr := runPerftestPair(t, readLatTest, []string{"-n", "20", "-s", "64", "--csv"}, nil)
	if serr != "" || cerr != "" {
		t.Errorf("stderr: server %q, client %q", serr, cerr)
	}
	if sout != "" {
		t.Errorf("server stdout %q, want nothing (read-lat's client measures)", sout)
	}
	recs, err := csv.NewReader(strings.NewReader(cout)).ReadAll()
	if err != nil {
		t.Fatalf("not CSV: %v\n%s", err, cout)
	}
	if len(recs) != 2 || !slices.Equal(recs[0], jsonout.BenchV1Columns) {
		t.Fatalf("want the header and one row:\n%s", cout)
	}
	want := "schemaVersion,test,role,bytes,iterations,bw_peak_bps,bw_avg_bps,msg_rate_pps,t_min_ns,t_max_ns,t_typical_ns,t_avg_ns,t_stdev_ns,p99_ns,p999_ns"
	if strings.Join(recs[0], ",") != want {
		t.Errorf("header changed: %s (the columns are stable; add new ones at the end)", strings.Join(recs[0], ","))
	}
	row := map[string]string{}
	for i, c := range recs[0] {
		row[c] = recs[1][i]
	}
	if row["schemaVersion"] != "1" || row["test"] != "read-lat" || row["role"] != "client" || row["bytes"] != "64" || row["iterations"] != "20" ||
		row["bw_avg_bps"] != "" {
		t.Errorf("row %v", row)
	}
	for _, c := range []string{"t_min_ns", "t_max_ns", "t_typical_ns", "t_avg_ns", "t_stdev_ns", "p99_ns", "p999_ns"} {
		if v, err := strconv.ParseFloat(row[c], 64); err != nil || v < 0 || (c != "t_stdev_ns" && v == 0) {
			t.Errorf("%s = %q", c, row[c])
		}
	}
}

func TestPerftestJSONAndCSV(t *testing.T) {
	f, _, errOut := testFactory()
	if code := run(context.Background(), f, []string{"write-bw", "--json", "--csv"}); code != ExitUsage {
		t.Fatalf("exit %d, want %d: %s", code, ExitUsage, errOut)
	}
}

func TestPingJSON(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	startServe(t, sa)
	f, out, errOut := testFactory()
	code := run(context.Background(), f, []string{"ping", "--json", "-c", "3", "-i", "0.01", "--bind", ca.String(), sa.String()})
	if code != ExitOK {
		t.Fatalf("ping exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 3 replies and a summary:\n%s", len(lines), out)
	}
	for i, l := range lines[:3] {
		var r jsonout.PingV1
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r.SchemaVersion != 1 || r.Type != "reply" || r.Seq != i+1 || !r.OK || r.Bytes != 64 || r.RTTNs <= 0 || r.Addr != sa.String() {
			t.Errorf("reply %s", l)
		}
	}
	var s jsonout.PingSummaryV1
	if err := json.Unmarshal([]byte(lines[3]), &s); err != nil {
		t.Fatal(err)
	}
	if s.SchemaVersion != 1 || s.Type != "summary" || s.Transmitted != 3 || s.Received != 3 || s.LossRatio != 0 || s.RTT == nil ||
		!(0 < s.RTT.MinNs && s.RTT.MinNs <= s.RTT.AvgNs && s.RTT.AvgNs <= s.RTT.MaxNs) || s.TimeNs <= 0 {
		t.Errorf("summary %s", lines[3])
	}
	if regexp.MustCompile(`PING|statistics`).MatchString(out.String() + errOut.String()) {
		t.Errorf("human text with --json (stderr not a terminal):\n%s\n%s", out, errOut)
	}
}
