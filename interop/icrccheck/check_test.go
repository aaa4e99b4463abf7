package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

var (
	tb  = netip.MustParseAddrPort("198.18.0.1:4791")
	rxe = netip.MustParseAddrPort("198.18.0.2:49152")
)

// frame is one packet of a synthetic capture.
type frame struct {
	src, dst netip.AddrPort
	h        wire.Headers
	payload  []byte
	spoil    bool // flip an ICRC bit
}

func send(src, dst netip.AddrPort, op wire.Opcode, qpn wire.QPN, psn wire.PSN) frame {
	return frame{src: src, dst: netip.AddrPortFrom(dst.Addr(), wire.UDPPort),
		h: wire.Headers{BTH: wire.BTHFields{Opcode: op, DestQP: qpn, PSN: psn, PKey: 0xffff}}, payload: []byte("ping")}
}

func ack(src, dst netip.AddrPort, qpn wire.QPN, psn wire.PSN, syn wire.Syndrome) frame {
	f := send(src, dst, wire.Acknowledge, qpn, psn)
	f.h.AETH = wire.AETHFields{Syndrome: syn}
	f.payload = nil
	return f
}

func pcapOf(t *testing.T, frames []frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := sniff.NewWriter(&buf, sniff.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		h := f.h
		roce := wire.AppendPacket(nil, &h, f.payload)
		wire.PutICRC(roce, f.src, f.dst, 0)
		if f.spoil {
			roce[len(roce)-1] ^= 0x40
		}
		if err := w.WritePacket(time.Unix(int64(i), 0), sniff.AppendUDPFrame(nil, f.src, f.dst, 0, roce)); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func run(t *testing.T, frames []frame, malformed ...int) *result {
	t.Helper()
	res, err := check(bytes.NewReader(pcapOf(t, frames)), "test.pcap", tb.Addr(), malformed)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	return res
}

func TestCleanExchange(t *testing.T) {
	res := run(t, []frame{
		send(tb, rxe, wire.SendOnly, 0x12, 100),
		ack(rxe, tb, 0x11, 100, wire.SyndromeACK),
		send(rxe, tb, wire.SendOnly, 0x11, 500),
		ack(tb, rxe, 0x12, 500, wire.SyndromeACK),
	})
	if res.roce != 4 || res.sent != 2 || res.received != 2 || res.bad != 0 {
		t.Errorf("roce %d sent %d received %d bad %d, want 4 2 2 0", res.roce, res.sent, res.received, res.bad)
	}
	if len(res.problems) != 0 {
		t.Errorf("problems in a clean exchange: %v", res.problems)
	}
	if !strings.HasPrefix(res.lastSent, "frame 4 ") || !strings.HasPrefix(res.lastReceived, "frame 3 ") {
		t.Errorf("last sent %q, last received %q", res.lastSent, res.lastReceived)
	}
}

func TestFirstProblemIsTheEarliestFrame(t *testing.T) {
	bad := send(tb, rxe, wire.SendOnly, 0x12, 101)
	bad.spoil = true
	res := run(t, []frame{
		send(tb, rxe, wire.SendOnly, 0x12, 100), // 1: NAKed in frame 3
		bad,                                     // 2: bad ICRC
		ack(rxe, tb, 0x11, 100, wire.SyndromeRemoteAccess),  // 3
		send(tb, rxe, wire.SendOnly, 0x12, 100),             // 4: resent
		send(rxe, tb, wire.WriteOnly, 0x11, 7),              // 5
		ack(tb, rxe, 0x12, 7, wire.SyndromeInvalidReq),      // 6: tbrdma NAKs
		ack(rxe, tb, 0x11, 0x300, wire.SyndromePSNSeqError), // 7: PSN never sent
		send(tb, rxe, wire.SendOnly, 0x12, 102),             // 8: tshark says malformed
	}, 8)
	if res.bad != 1 || res.sentBad != 1 || res.sentResent != 1 || res.naksFromPeer != 2 || res.naksToPeer != 1 || res.sentMalformed != 1 {
		t.Errorf("bad %d sentBad %d resent %d naksFrom %d naksTo %d malformed %d, want 1 1 1 2 1 1",
			res.bad, res.sentBad, res.sentResent, res.naksFromPeer, res.naksToPeer, res.sentMalformed)
	}
	want := []struct {
		frame  int
		reason string
	}{
		{1, "rxe answered it with NAK(remote access error) in frame 3"},
		{2, "ICRC"},
		{4, "sent again (first in frame 1)"},
		{6, "tbrdma answered rxe's request with NAK(invalid request)"},
		{7, "PSN 0x300, which tbrdma had not sent"},
		{8, "tshark reports it as malformed"},
	}
	if len(res.problems) != len(want) {
		t.Fatalf("%d problems, want %d: %v", len(res.problems), len(want), res.problems)
	}
	for i, w := range want {
		p := res.problems[i]
		if p.frame != w.frame || !strings.Contains(p.reason, w.reason) {
			t.Errorf("problem %d: frame %d %q, want frame %d containing %q", i, p.frame, p.reason, w.frame, w.reason)
		}
	}
	if !strings.Contains(res.problems[0].what, "SEND_ONLY PSN 0x64 QPN 0x12, 4 payload bytes") {
		t.Errorf("first problem names %q, want the opcode, PSN and QPN", res.problems[0].what)
	}
}

func TestUnparsableAndTruncated(t *testing.T) {
	var buf bytes.Buffer
	w, _ := sniff.NewWriter(&buf, sniff.LinkTypeRaw)
	junk := []byte{0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4} // opcode 0xff
	if err := w.WritePacket(time.Unix(0, 0), sniff.AppendUDPFrame(nil, tb, netip.AddrPortFrom(rxe.Addr(), wire.UDPPort), 0, junk)); err != nil {
		t.Fatal(err)
	}
	res, err := check(bytes.NewReader(buf.Bytes()), "junk.pcap", tb.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.malformed != 1 || res.sentUnparsable != 1 || len(res.problems) != 1 || !strings.Contains(res.problems[0].reason, "does not parse") {
		t.Errorf("malformed %d unparsable %d problems %v", res.malformed, res.sentUnparsable, res.problems)
	}
	// A capture cut in the middle of a record is an error, not a panic.
	b := buf.Bytes()
	if _, err := check(bytes.NewReader(b[:len(b)-3]), "cut.pcap", tb.Addr(), nil); err == nil {
		t.Error("a truncated capture passed without an error")
	}
	if _, err := check(bytes.NewReader([]byte("not a pcap")), "x", tb.Addr(), nil); err == nil {
		t.Error("a file that is not a pcap passed without an error")
	}
}

// The real rxe captures: every packet checks, none is a problem for either
// end (each was made by two stock rxe guests).
func TestRxeGoldens(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/rxe/*.pcap")
	if len(files) == 0 {
		t.Fatal("no captures in testdata/rxe")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		res, err := check(bytes.NewReader(data), f, netip.MustParseAddr("198.18.0.2"), nil)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if res.roce == 0 || res.bad != 0 || res.malformed != 0 {
			t.Errorf("%s: %d packets, %d bad ICRC, %d malformed", f, res.roce, res.bad, res.malformed)
		}
		for _, p := range res.problems {
			if !strings.Contains(p.reason, "sent again") { // rxe resends under emulation
				t.Errorf("%s: %v", f, p)
			}
		}
	}
}

func TestParseFrames(t *testing.T) {
	got, err := parseFrames("3, 17\n4")
	if err != nil || len(got) != 3 || got[0] != 3 || got[1] != 17 || got[2] != 4 {
		t.Errorf("parseFrames = %v, %v", got, err)
	}
	for _, s := range []string{"0", "x", "-1"} {
		if _, err := parseFrames(s); err == nil {
			t.Errorf("parseFrames(%q) did not fail", s)
		}
	}
}
