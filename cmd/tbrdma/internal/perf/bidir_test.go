package perf

import (
	"bytes"
	"strings"
	"testing"
)

// TestBWReportPlus: a -b row keeps this side's size and iterations and
// adds the rates of both sides, as perftest's print_full_bw_report.
func TestBWReportPlus(t *testing.T) {
	my := BWReport{Size: 65536, Iters: 50, Peak: 40.5, Average: 30.25, MsgRate: 0.5}
	peer := BWReport{Size: 65536, Iters: 49, Peak: 2, Average: 6.5, MsgRate: 0.25}
	got := my.Plus(peer)
	want := BWReport{Size: 65536, Iters: 50, Peak: 42.5, Average: 36.75, MsgRate: 0.75}
	if got != want {
		t.Errorf("Plus: %+v, want %+v", got, want)
	}
	if peer.Plus(my) != (BWReport{Size: 65536, Iters: 49, Peak: 42.5, Average: 36.75, MsgRate: 0.75}) {
		t.Errorf("the peer's sum differs from ours: %+v", peer.Plus(my))
	}
}

// TestHeaderBidirectional: with -b the title says Bidirectional, and a
// server prints its TX depth (send-bw: both sides their RX depth), as
// perftest's ctx_print_test_info.
func TestHeaderBidirectional(t *testing.T) {
	for _, c := range []struct {
		info   TestInfo
		title  string
		tx, rx bool
	}{
		{TestInfo{Verb: VerbWrite, BW: true, Bidir: true, Server: true}, "RDMA_Write Bidirectional BW Test", true, false},
		{TestInfo{Verb: VerbRead, BW: true, Bidir: true}, "RDMA_Read Bidirectional BW Test", true, false},
		{TestInfo{Verb: VerbSend, BW: true, Bidir: true}, "Send Bidirectional BW Test", true, true},
		{TestInfo{Verb: VerbSend, BW: true, Bidir: true, Server: true}, "Send Bidirectional BW Test", true, true},
		{TestInfo{Verb: VerbWrite, BW: true, Server: true}, "RDMA_Write BW Test", false, false},
		{TestInfo{Verb: VerbSend, BW: true}, "Send BW Test", true, false},
	} {
		var b bytes.Buffer
		PrintHeader(&b, &c.info)
		out := b.String()
		if !strings.Contains(out, "                    "+c.title+"\n") {
			t.Errorf("%+v: no title %q:\n%s", c.info, c.title, out)
		}
		if got := strings.Contains(out, " TX depth        : "); got != c.tx {
			t.Errorf("%+v: TX depth printed %v, want %v", c.info, got, c.tx)
		}
		if got := strings.Contains(out, " RX depth        : "); got != c.rx {
			t.Errorf("%+v: RX depth printed %v, want %v", c.info, got, c.rx)
		}
	}
}
