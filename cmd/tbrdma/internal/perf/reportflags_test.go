package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata's perftest JSON goldens")

// posts returns post times whose consecutive deltas are us microseconds.
func posts(us ...float64) []time.Time {
	t0 := time.Unix(0, 0)
	p := []time.Time{t0}
	for _, d := range us {
		t0 = t0.Add(time.Duration(d * 1e3))
		p = append(p, t0)
	}
	return p
}

// TestPrintSamples checks -H's and -U's lines (print_report_lat): "#,
// unit", then "i, value" with C's %g.
func TestPrintSamples(t *testing.T) {
	s, ok := Latency(2, posts(5, 3, 20, 1.5, 7, 19, 2), 2)
	if !ok {
		t.Fatal("not ok")
	}
	var b strings.Builder
	PrintSamples(&b, "usec", s.Samples)
	if want := "#, usec\n1, 2.5\n2, 1.5\n3, 10\n4, 0.75\n5, 3.5\n6, 9.5\n7, 1\n"; b.String() != want {
		t.Errorf("unsorted:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	PrintSamples(&b, "cycles", s.Sorted) // the two largest dropped
	if want := "#, cycles\n1, 0.75\n2, 1\n3, 1.5\n4, 2.5\n5, 3.5\n"; b.String() != want {
		t.Errorf("sorted:\n%s\nwant\n%s", b.String(), want)
	}
	for v, want := range map[float64]string{1234567: "1.23457e+06", 0.000012345: "1.2345e-05", 12.3456789: "12.3457", 100000: "100000"} {
		if got := cG(v); got != want {
			t.Errorf("cG(%v) = %q, want %q (C's %%g)", v, got, want)
		}
	}
}

// TestLatencyInCycles: -C computes every figure in cycles, the truncated
// deviations of the stdev too, so it is not the µs stdev scaled.
func TestLatencyInCycles(t *testing.T) {
	p := posts(1.2, 1.4, 1.1, 1.3, 1.6, 1.5, 9, 9)
	us, _ := Latency(8, p, 1)
	cy, _ := LatencyIn(8, p, 1, 2000)
	if cy.Min != us.Min*2000 || cy.Typical != us.Typical*2000 || cy.Max != us.Max*2000 {
		t.Errorf("cycles %+v, µs %+v", cy, us)
	}
	if us.Stdev != 0 { // deviations under 1 µs truncate to 0
		t.Errorf("µs stdev %v, want 0", us.Stdev)
	}
	if cy.Stdev == 0 {
		t.Errorf("cycles stdev 0: deviations of hundreds of cycles were truncated as microseconds")
	}
}

// TestPerftestJSON compares --out_json's reports with goldens written in
// perftest 25.01's layout (write_test_info_to_file and the report
// writers), and checks they are JSON.
func TestPerftestJSON(t *testing.T) {
	lat := LatStats{Size: 2, Iters: 1000, Min: 5.12, Max: 20.5, Typical: 6.25, Avg: 6.5, Stdev: 1.75, P99: 12.5, P999: 20.5}
	bw := BWReport{Size: 65536, Iters: 1000, Peak: 1102.33, Average: 1088.5, MsgRate: 0.017416}
	for _, c := range []struct {
		file  string
		info  TestInfo
		write func(*strings.Builder, *TestInfo) error
	}{
		{"out_json_write_lat.golden", TestInfo{Verb: VerbWrite, TxDepth: 1, Inline: 220},
			func(b *strings.Builder, i *TestInfo) error { return WriteLatJSON(b, i, lat) }},
		{"out_json_read_lat_cm.golden", TestInfo{Verb: VerbRead, TxDepth: 1, OutReads: 128, RDMACM: true, Events: true},
			func(b *strings.Builder, i *TestInfo) error { return WriteLatJSON(b, i, lat) }},
		{"out_json_send_bw_server.golden", TestInfo{Verb: VerbSend, BW: true, Server: true, RxDepth: 512, CQMod: 1},
			func(b *strings.Builder, i *TestInfo) error { return WriteBWJSON(b, i, bw) }},
		{"out_json_write_bw_post_list.golden", TestInfo{Verb: VerbWrite, BW: true, TxDepth: 128, CQMod: 8, PostList: 8, QPs: 2},
			func(b *strings.Builder, i *TestInfo) error { return WriteBWJSON(b, i, bw) }},
		{"out_json_atomic_lat.golden", TestInfo{Verb: VerbAtomic, AtomicType: "CMP_AND_SWAP", TxDepth: 1, OutReads: 16},
			func(b *strings.Builder, i *TestInfo) error { return WriteLatJSON(b, i, lat) }},
	} {
		t.Run(c.file, func(t *testing.T) {
			info := c.info
			info.Device, info.MTU, info.GIDIndex = "tbrdma0", 4096, 0
			var b strings.Builder
			if err := c.write(&b, &info); err != nil {
				t.Fatal(err)
			}
			if !json.Valid([]byte(b.String())) {
				t.Errorf("not JSON:\n%s", b.String())
			}
			path := filepath.Join("testdata", c.file)
			if *update {
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestPerftestJSON -update writes it)", err)
			}
			if b.String() != string(want) {
				t.Errorf("got\n%s\nwant\n%s", b.String(), want)
			}
		})
	}
}

// TestHeaderInlineAndPostList: -I's value in the header, -l's line and
// title (ctx_print_test_info).
func TestHeaderInlineAndPostList(t *testing.T) {
	var b strings.Builder
	PrintHeader(&b, &TestInfo{Verb: VerbSend, TxDepth: 1, Inline: 236, Device: "tbrdma0", MTU: 1024})
	if !strings.Contains(b.String(), "\n Max inline data : 236[B]\n") {
		t.Errorf("send-lat -I 236 header:\n%s", b.String())
	}
	b.Reset()
	PrintHeader(&b, &TestInfo{Verb: VerbWrite, BW: true, TxDepth: 128, PostList: 4, CQMod: 4, Device: "tbrdma0", MTU: 1024})
	if h := b.String(); !strings.Contains(h, "                    RDMA_Write Post List BW Test\n") ||
		!strings.Contains(h, " TX depth        : 128\n Post List       : 4\n CQ Moderation   : 4\n") {
		t.Errorf("write-bw -l 4 header:\n%s", h)
	}
}

// TestLoopInline: with Inline (-I) the loops post messages up to that size
// inline: larger than the QP's MaxInlineData is refused at post, within it
// the bytes arrive, and above -I nothing is inline.
func TestLoopInline(t *testing.T) {
	server, client := testPair(t, VerbWrite, 4096, 16)
	client.Inline = 256 // the QPs take 64 (testInlineCap)
	_, err := client.BW(context.Background(), []Dest{server.dest(false)}, 200)
	if err == nil || !strings.Contains(err.Error(), "200 inline bytes, max 64") {
		t.Fatalf("BW of 200 bytes with -I 256 on a QP of 64 inline bytes: %v, want the post refused", err)
	}

	server, client = testPair(t, VerbSend, 4096, 4)
	for _, s := range []*testSide{server, client} {
		s.Inline = testInlineCap
		if err := s.PostRecvs(testInlineCap); err != nil {
			t.Fatal(err)
		}
	}
	both(t, server, client, func(s *testSide) error {
		_, err := s.SendLat(context.Background(), testInlineCap)
		return err
	})
	if !bytes.Equal(server.Buf[server.Half:server.Half+testInlineCap], client.Buf[:testInlineCap]) {
		t.Error("the server's second half does not hold the client's inline message")
	}

	server, client = testPair(t, VerbWrite, 4096, 16)
	client.Inline = testInlineCap
	if _, err := client.BW(context.Background(), []Dest{server.dest(false)}, 200); err != nil {
		t.Fatalf("BW of 200 bytes with -I %d (not inline): %v", testInlineCap, err)
	}
}

// TestLoopBWPostList runs BW with -l: lists of PostList requests per post,
// a completion per list; a post list larger than the send queue's room
// would never be posted, so TxDepth holds two lists.
func TestLoopBWPostList(t *testing.T) {
	const size = 1000
	for _, verb := range []Verb{VerbWrite, VerbSend} {
		server, client := testPair(t, verb, 4096, 10)
		client.PostList, client.CQMod = 5, 5
		if verb == VerbSend {
			server.Iters = client.Iters
			if err := server.PostRecvs(size); err != nil {
				t.Fatal(err)
			}
		}
		var rep BWReport
		if verb == VerbSend { // the receiver re-posts as it completes
			both(t, server, client, func(s *testSide) (err error) {
				if s == server {
					_, err = s.ReceiveBW(context.Background(), size)
					return err
				}
				rep, err = s.BW(context.Background(), []Dest{server.dest(false)}, size)
				return err
			})
		} else {
			var err error
			if rep, err = client.BW(context.Background(), []Dest{server.dest(false)}, size); err != nil {
				t.Fatalf("%v: %v\n%s", verb, err, &client.errOut)
			}
		}
		if rep.Iters != 50 || rep.Average <= 0 {
			t.Errorf("%v: report %+v", verb, rep)
		}
		if verb == VerbSend {
			if !bytes.Equal(server.Buf[server.Half:server.Half+size], client.Buf[:size]) {
				t.Errorf("%v: the receiver does not hold the message", verb)
			}
			continue
		}
		tell(t, client, server)
		if !bytes.Equal(client.Buf[:size], server.Buf[:size]) {
			t.Errorf("%v: the target does not hold the source's bytes", verb)
		}
	}
}
