package perf

import (
	"strings"
	"testing"
	"time"
)

// block returns the lines of a tool output from the header's title to the
// separator after it, without the "PCIe relax order" line (tbrdma always
// prints OFF; rxe's builds differ from test to test).
func block(ls []string, from int) []string {
	var out []string
	for _, l := range ls[from:] {
		if l == Line {
			break
		}
		if !strings.HasPrefix(l, " PCIe relax order") {
			out = append(out, l)
		}
	}
	return out
}

// TestPrintHeaderMatchesPerftest compares the header block with the one the
// stock tool printed in each capture, on both sides.
func TestPrintHeaderMatchesPerftest(t *testing.T) {
	for _, c := range []struct {
		file string
		info TestInfo
	}{
		{"send_lat.client.txt", TestInfo{Verb: VerbSend, TxDepth: 1}},
		{"send_lat.server.txt", TestInfo{Verb: VerbSend, Server: true, RxDepth: 20}},
		{"send_bw_64k.client.txt", TestInfo{Verb: VerbSend, BW: true, TxDepth: 5, CQMod: 1}},
		{"send_bw_64k.server.txt", TestInfo{Verb: VerbSend, BW: true, Server: true, RxDepth: 6, CQMod: 1}},
		{"write_lat.client.txt", TestInfo{Verb: VerbWrite, TxDepth: 1}},
		{"write_lat.server.txt", TestInfo{Verb: VerbWrite, Server: true}},
		{"read_bw.client.txt", TestInfo{Verb: VerbRead, BW: true, TxDepth: 5, CQMod: 1, OutReads: 128}},
		{"read_bw.server.txt", TestInfo{Verb: VerbRead, BW: true, Server: true, CQMod: 1, OutReads: 128}},
	} {
		t.Run(c.file, func(t *testing.T) {
			ls := lines(t, c.file)
			title := -1
			for i, l := range ls {
				if strings.HasPrefix(l, "                    ") && strings.HasSuffix(l, " Test") {
					title = i
					break
				}
			}
			if title < 0 {
				t.Fatal("no header in the tool output")
			}
			info := c.info
			info.Device, info.MTU, info.GIDIndex = "rxe0", 4096, 1
			var b strings.Builder
			PrintHeader(&b, &info)
			got := block(strings.Split(b.String(), "\n"), 1)
			want := block(ls, title)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("header\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestPrintRowsMatchPerftest prints the captured figures of the new tests
// and compares the rows byte for byte.
func TestPrintRowsMatchPerftest(t *testing.T) {
	for _, c := range []struct {
		file string
		lat  *LatStats
		bw   *BWReport
	}{
		{"send_lat.client.txt", &LatStats{Size: 2, Iters: 20, Min: 318.38, Max: 9942.63, Typical: 1887.51, Avg: 2092.78, Stdev: 1645.32, P99: 9942.63, P999: 9942.63}, nil},
		{"send_lat.server.txt", &LatStats{Size: 2, Iters: 20, Min: 299.61, Max: 6986.82, Typical: 1226.50, Avg: 2074.10, Stdev: 1743.33, P99: 6986.82, P999: 6986.82}, nil},
		{"write_lat.client.txt", &LatStats{Size: 32, Iters: 20, Min: 274.36, Max: 4432.26, Typical: 372.85, Avg: 685.85, Stdev: 655.10, P99: 4432.26, P999: 4432.26}, nil},
		{"write_lat.server.txt", &LatStats{Size: 32, Iters: 20, Min: 307.01, Max: 2975.20, Typical: 446.18, Avg: 852.35, Stdev: 746.85, P99: 2975.20, P999: 2975.20}, nil},
		{"send_bw_64k.client.txt", nil, &BWReport{Size: 65536, Iters: 5, Peak: 14.59, Average: 13.32, MsgRate: 0.000213}},
		{"send_bw_64k.server.txt", nil, &BWReport{Size: 65536, Iters: 5, Peak: 0, Average: 2013.33, MsgRate: 0.032213}},
		{"read_bw.client.txt", nil, &BWReport{Size: 65536, Iters: 5, Peak: 7.38, Average: 6.83, MsgRate: 0.000109}},
		{"read_bw.server.txt", nil, &BWReport{Size: 65536, Iters: 5, Peak: 7.38, Average: 6.83, MsgRate: 0.000109}},
	} {
		t.Run(c.file, func(t *testing.T) {
			ls := lines(t, c.file)
			var b strings.Builder
			if c.lat != nil {
				PrintLat(&b, *c.lat)
			} else {
				PrintBW(&b, *c.bw)
			}
			if got, want := strings.TrimSuffix(b.String(), "\n"), after(t, ls, " #bytes"); got != want {
				t.Errorf("row\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestReceiveBandwidth(t *testing.T) {
	t0 := time.Unix(0, 0)
	r := ReceiveBandwidth(MiB, 4, t0, t0.Add(2*time.Second))
	if r.Peak != 0 || r.Average != 2 || r.MsgRate != 2e-6 || r.Iters != 4 || r.Size != MiB {
		t.Errorf("%+v", r)
	}
}
