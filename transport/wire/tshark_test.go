package wire_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// tsharkFields are the Wireshark InfiniBand dissector fields compared with
// our parse (names from `tshark -G fields | grep -i infiniband`, tshark
// 4.0). Wireshark shows the VA and R_Key of an AtomicETH in the RETH
// fields, has no field for FECN/BECN/Resv6, and reads the ICRC trailer as
// a big-endian number.
var tsharkFields = []string{
	"frame.number",
	"_ws.malformed",
	"infiniband.bth.opcode",
	"infiniband.bth.se",
	"infiniband.bth.m",
	"infiniband.bth.padcnt",
	"infiniband.bth.tver",
	"infiniband.bth.p_key",
	"infiniband.bth.destqp",
	"infiniband.bth.a",
	"infiniband.bth.reserved7",
	"infiniband.bth.psn",
	"infiniband.deth.q_key",
	"infiniband.deth.srcqp",
	"infiniband.reth.va",
	"infiniband.reth.r_key",
	"infiniband.reth.dmalen",
	"infiniband.atomiceth.swapdt",
	"infiniband.atomiceth.cmpdt",
	"infiniband.aeth.syndrome",
	"infiniband.aeth.msn",
	"infiniband.atomicacketh.origremdt",
	"infiniband.immdt",
	"infiniband.ieth",
	"infiniband.invariant.crc",
	"infiniband.mad.baseversion",
	"infiniband.mad.mgmtclass",
	"infiniband.mad.classversion",
	"infiniband.mad.method",
	"infiniband.mad.status",
	"infiniband.mad.classspecific",
	"infiniband.mad.transactionid",
	"infiniband.mad.attributeid",
	"infiniband.mad.attributemodifier",
	"data.data",
}

// runTshark decodes file with tshark and returns one map field -> value
// per frame number.
func runTshark(t *testing.T, tshark, path string) map[int]map[string]string {
	t.Helper()
	args := []string{"-r", path, "-n",
		"-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma",
		"-T", "fields", "-E", "separator=,", "-E", "aggregator=;", "-E", "quote=n"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
	}
	frames := map[int]map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		cols := strings.Split(line, ",")
		if len(cols) != len(tsharkFields) {
			t.Fatalf("tshark line has %d columns, want %d: %q", len(cols), len(tsharkFields), line)
		}
		rec := map[string]string{}
		for i, f := range tsharkFields {
			rec[f] = cols[i]
		}
		n, err := strconv.Atoi(rec["frame.number"])
		if err != nil {
			t.Fatalf("frame number %q", rec["frame.number"])
		}
		frames[n] = rec
	}
	return frames
}

// TestTshark compares our parse of every RoCEv2 frame of every capture,
// field by field, with Wireshark's InfiniBand dissector, and checks that
// tshark finds no malformed frame. Starting tshark costs about two seconds,
// so the captures are concatenated with mergecap and decoded in one run
// when mergecap is available.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH: skipping the comparison with Wireshark's dissector " +
			"(install it with: apt-get install tshark)")
	}
	if testing.Short() {
		t.Skip("runs tshark over every capture; skipped in -short mode")
	}
	files, pkts := rxeCaptures(t)

	// frames[file][n] is tshark's record of frame n of file.
	frames := map[string]map[int]map[string]string{}
	if mergecap, err := exec.LookPath("mergecap"); err == nil {
		all := filepath.Join(t.TempDir(), "all.pcap")
		args := []string{"-F", "pcap", "-a", "-w", all}
		for _, f := range files {
			args = append(args, filepath.Join(rxeDir, f))
		}
		if out, err := exec.Command(mergecap, args...).CombinedOutput(); err != nil {
			t.Fatalf("mergecap: %v\n%s", err, out)
		}
		merged := runTshark(t, tshark, all)
		off := 0
		for _, f := range files {
			frames[f] = map[int]map[string]string{}
			for n := 1; n <= captureFrames[f]; n++ {
				frames[f][n] = merged[off+n]
			}
			off += captureFrames[f]
		}
		if len(merged) != off {
			t.Fatalf("tshark decoded %d frames of the merged capture; the captures hold %d", len(merged), off)
		}
	} else {
		for _, f := range files {
			frames[f] = runTshark(t, tshark, filepath.Join(rxeDir, f))
		}
	}

	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			recs := frames[file]
			if len(recs) != captureFrames[file] {
				t.Fatalf("tshark decoded %d frames, the capture has %d", len(recs), captureFrames[file])
			}
			roce := map[int]capPkt{}
			for _, c := range pkts[file] {
				roce[c.frame] = c
			}
			compared, payloads := 0, 0
			for n := 1; n <= len(recs); n++ {
				rec := recs[n]
				if rec == nil {
					t.Fatalf("frame %d: no tshark record", n)
				}
				if rec["_ws.malformed"] != "" {
					t.Errorf("frame %d: tshark reports a malformed packet: %s", n, rec["_ws.malformed"])
				}
				c, ok := roce[n]
				if !ok {
					if rec["infiniband.bth.opcode"] != "" {
						t.Errorf("frame %d: tshark decodes InfiniBand in a frame we did not take for RoCEv2", n)
					}
					continue
				}
				var p wire.Packet
				if err := p.Parse(c.roce); err != nil {
					t.Errorf("frame %d: %v", n, err)
					continue
				}
				for _, d := range compareTshark(&p, c.roce, rec) {
					t.Errorf("frame %d (%v): %s", n, p.Opcode(), d)
				}
				if rec["data.data"] != "" {
					payloads++
				}
				compared++
			}
			if compared != len(roce) {
				t.Errorf("compared %d frames; the capture has %d RoCEv2 frames", compared, len(roce))
			}
			t.Logf("%d frames; %d RoCEv2 frames agree with tshark (%d payloads compared byte for byte)", len(recs), compared, payloads)
		})
	}
}

// compareTshark returns the differences between p and tshark's record.
func compareTshark(p *wire.Packet, roce []byte, rec map[string]string) []string {
	var diffs []string
	used := map[string]bool{"frame.number": true, "_ws.malformed": true}
	num := func(field string, want uint64) {
		used[field] = true
		got := rec[field]
		v, err := strconv.ParseUint(got, 0, 64)
		if err != nil || v != want {
			diffs = append(diffs, fmt.Sprintf("%s: tshark %q, we %#x", field, got, want))
		}
	}
	flag := func(field string, want bool) {
		used[field] = true
		got := rec[field]
		v := got == "1" || strings.EqualFold(got, "true")
		if !v && got != "0" && !strings.EqualFold(got, "false") || v != want {
			diffs = append(diffs, fmt.Sprintf("%s: tshark %q, we %v", field, got, want))
		}
	}
	bytesEq := func(field string, want []byte) {
		used[field] = true
		got := strings.ReplaceAll(rec[field], ":", "")
		if got != hex.EncodeToString(want) {
			diffs = append(diffs, fmt.Sprintf("%s: tshark %q, we %x", field, rec[field], want))
		}
	}

	b := p.BTH
	num("infiniband.bth.opcode", uint64(b.Opcode()))
	flag("infiniband.bth.se", b.SE())
	flag("infiniband.bth.m", b.MigReq())
	num("infiniband.bth.padcnt", uint64(b.PadCnt()))
	num("infiniband.bth.tver", uint64(b.TVer()))
	num("infiniband.bth.p_key", uint64(b.PKey()))
	num("infiniband.bth.destqp", uint64(b.DestQP()))
	flag("infiniband.bth.a", b.AckReq())
	num("infiniband.bth.reserved7", uint64(b.Resv7()))
	num("infiniband.bth.psn", uint64(b.PSN()))
	if h := p.DETH; h != nil {
		num("infiniband.deth.q_key", uint64(h.QKey()))
		num("infiniband.deth.srcqp", uint64(h.SrcQP()))
	}
	if h := p.RETH; h != nil {
		num("infiniband.reth.va", h.VA())
		num("infiniband.reth.r_key", uint64(h.RKey()))
		num("infiniband.reth.dmalen", uint64(h.DMALen()))
	}
	if h := p.AtomicETH; h != nil {
		num("infiniband.reth.va", h.VA())
		num("infiniband.reth.r_key", uint64(h.RKey()))
		num("infiniband.atomiceth.swapdt", h.SwapAdd())
		num("infiniband.atomiceth.cmpdt", h.Compare())
	}
	if h := p.AETH; h != nil {
		num("infiniband.aeth.syndrome", uint64(h.Syndrome()))
		num("infiniband.aeth.msn", uint64(h.MSN()))
	}
	if h := p.AtomicAckETH; h != nil {
		num("infiniband.atomicacketh.origremdt", h.Orig())
	}
	if h := p.ImmDt; h != nil {
		bytesEq("infiniband.immdt", h)
	}
	if h := p.IETH; h != nil {
		bytesEq("infiniband.ieth", h)
	}
	// tshark prints the trailer bytes as a big-endian number; the ICRC
	// value is little-endian on the wire.
	num("infiniband.invariant.crc", uint64(binary.BigEndian.Uint32(p.ICRC)))
	if p.BTH.DestQP() == wire.QPNGSI {
		if m, _, err := wire.ParseMAD(p.Payload); err == nil {
			num("infiniband.mad.baseversion", uint64(m.BaseVersion()))
			num("infiniband.mad.mgmtclass", uint64(m.MgmtClass()))
			num("infiniband.mad.classversion", uint64(m.ClassVersion()))
			num("infiniband.mad.method", uint64(m.Method()))
			num("infiniband.mad.status", uint64(m.Status()))
			num("infiniband.mad.classspecific", uint64(m.ClassSpecific()))
			num("infiniband.mad.transactionid", m.TransactionID())
			num("infiniband.mad.attributeid", uint64(m.AttributeID()))
			num("infiniband.mad.attributemodifier", uint64(m.AttributeModifier()))
		}
	}
	// Wireshark hands the bytes after the headers, pad included, to the
	// data dissector when no sub-dissector claims them.
	if rec["data.data"] != "" {
		bytesEq("data.data", roce[b.Opcode().HdrLen():len(roce)-wire.ICRCSize])
	}
	// Every field we did not expect must be absent.
	for _, f := range tsharkFields {
		if !used[f] && rec[f] != "" {
			diffs = append(diffs, fmt.Sprintf("%s: tshark %q for a header we did not parse", f, rec[f]))
		}
	}
	return diffs
}
