package wire_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// rxeDir holds the real rdma_rxe captures and MANIFEST.md, which describes
// them (including per-opcode counts from an independent parser).
const rxeDir = "../../testdata/rxe"

// capPkt is one RoCEv2 datagram from a capture.
type capPkt struct {
	file     string // relative to rxeDir
	frame    int    // 1-based frame number, as tshark counts
	ip, udp  []byte
	roce     []byte // UDP payload, ICRC trailer included
	src, dst netip.AddrPort
}

func (c capPkt) ipID() uint16 { return binary.BigEndian.Uint16(c.ip[4:]) }

var (
	captureOnce   sync.Once
	captureFiles  []string
	capturePkts   map[string][]capPkt
	captureFrames map[string]int // number of frames (all protocols) per file
	captureErr    error
)

// rxeCaptures reads every pcap under rxeDir (and unclean/, if present) once
// and returns the file names and their RoCEv2 datagrams.
func rxeCaptures(t testing.TB) ([]string, map[string][]capPkt) {
	t.Helper()
	captureOnce.Do(func() {
		capturePkts = map[string][]capPkt{}
		captureFrames = map[string]int{}
		var files []string
		for _, pat := range []string{"*.pcap", "unclean/*.pcap"} {
			m, err := filepath.Glob(filepath.Join(rxeDir, pat))
			if err != nil {
				captureErr = err
				return
			}
			files = append(files, m...)
		}
		for _, path := range files {
			name, _ := filepath.Rel(rxeDir, path)
			pkts, frames, err := readCapture(name, path)
			if err != nil {
				captureErr = err
				return
			}
			captureFrames[name] = frames
			captureFiles = append(captureFiles, name)
			capturePkts[name] = pkts
		}
	})
	if captureErr != nil {
		t.Fatal(captureErr)
	}
	if len(captureFiles) == 0 {
		t.Fatalf("no captures in %s", rxeDir)
	}
	return captureFiles, capturePkts
}

func readCapture(name, path string) (pkts []capPkt, frames int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r, err := sniff.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, 0, err
	}
	var out []capPkt
	for frame := 1; ; frame++ {
		p, err := r.Next()
		if err == io.EOF {
			return out, frame - 1, nil
		}
		if err != nil {
			return nil, 0, err
		}
		// Decode a copy: p.Data is reused by the next call to Next.
		ip, udp, payload, src, dst, ok := sniff.DecodeUDP(p.LinkType, bytes.Clone(p.Data))
		if !ok || (dst.Port() != wire.UDPPort && src.Port() != wire.UDPPort) {
			continue
		}
		out = append(out, capPkt{name, frame, ip, udp, payload, src, dst})
	}
}

// manifestEntry is what MANIFEST.md says about one capture.
type manifestEntry struct {
	roce    int
	opcodes map[wire.Opcode]int
	mads    map[string]int
}

// readManifest parses the "Own parser" blocks of MANIFEST.md:
//
//	<file>.pcap: N frames in T s: RoCEv2 K, ...
//	     5  0x06 RC RDMA WRITE First
//	  QP1 MADs (CM class 0x07): REQ 1, REP 1, ...
func readManifest(t testing.TB) map[string]*manifestEntry {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(rxeDir, "MANIFEST.md"))
	if err != nil {
		t.Fatal(err)
	}
	head := regexp.MustCompile(`^(\S+\.pcap): \d+ frames .*?: RoCEv2 (\d+),`)
	op := regexp.MustCompile(`^\s+(\d+)\s+0x([0-9a-f]{2})\s`)
	mad := regexp.MustCompile(`^\s*QP1 MADs \(CM class 0x07\): (.*)$`)
	out := map[string]*manifestEntry{}
	var cur *manifestEntry
	for _, line := range strings.Split(string(text), "\n") {
		if m := head.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[2])
			cur = &manifestEntry{roce: n, opcodes: map[wire.Opcode]int{}, mads: map[string]int{}}
			out[m[1]] = cur
			continue
		}
		if cur == nil {
			continue
		}
		if strings.HasPrefix(line, "```") {
			cur = nil
			continue
		}
		if m := op.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			o, _ := strconv.ParseUint(m[2], 16, 8)
			cur.opcodes[wire.Opcode(o)] += n
		}
		if m := mad.FindStringSubmatch(line); m != nil {
			for _, kv := range strings.Split(m[1], ",") {
				f := strings.Fields(kv)
				if len(f) == 2 {
					n, _ := strconv.Atoi(f[1])
					cur.mads[f[0]] += n
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("MANIFEST.md has no capture summaries")
	}
	return out
}

// CM attribute IDs (roce-wire.md §5.3) that the captures may carry.
var cmAttr = map[uint16]string{
	0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU",
	0x15: "DREQ", 0x16: "DREP", 0x17: "SIDR_REQ", 0x18: "SIDR_REP",
}

// TestRxeGolden checks the codec against every packet rdma_rxe sent in the
// captures: parse, ICRC from the captured headers, IPv4 ID recovery from
// what a UDP socket sees, byte-exact re-encoding, opcode counts and the MAD
// header of QP1 traffic.
func TestRxeGolden(t *testing.T) {
	files, pkts := rxeCaptures(t)
	manifest := readManifest(t)
	total, recovered := 0, 0
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			want := manifest[file]
			if want == nil {
				t.Fatalf("%s is not described in MANIFEST.md", file)
			}
			list := pkts[file]
			if len(list) != want.roce {
				t.Errorf("%d RoCEv2 datagrams, MANIFEST.md says %d", len(list), want.roce)
			}
			opcodes := map[wire.Opcode]int{}
			mads := map[string]int{}
			for _, c := range list {
				total++
				var p wire.Packet
				if err := p.Parse(c.roce); err != nil {
					t.Errorf("frame %d: Parse: %v", c.frame, err)
					continue
				}
				opcodes[p.Opcode()]++
				body := c.roce[:len(c.roce)-wire.ICRCSize]
				trailer := wire.Trailer(c.roce)

				// 1. The ICRC recomputed from the captured IP and UDP headers.
				if got, ok := wire.ICRCFromHeaders(c.ip, c.udp, body); !ok || got != trailer {
					t.Errorf("frame %d: ICRCFromHeaders = %#08x %v, trailer %#08x", c.frame, got, ok, trailer)
				}
				// 2. The ICRC from addresses and ID alone (DF set, no options).
				if got := wire.ICRC(c.src, c.dst, c.ipID(), body); got != trailer {
					t.Errorf("frame %d: ICRC(src, dst, id %#04x) = %#08x, trailer %#08x", c.frame, c.ipID(), got, trailer)
				}
				// 3. What a UDP socket sees is enough to recover the ID.
				if id, ok := wire.VerifyICRC(c.roce, c.src, c.dst); !ok || id != c.ipID() {
					t.Errorf("frame %d: VerifyICRC = id %#04x ok %v, captured id %#04x", c.frame, id, ok, c.ipID())
				} else if id != 0 {
					recovered++
				}
				// 4. Re-encoding the parsed fields gives the captured bytes.
				h := p.Fields()
				again := wire.AppendPacket(nil, &h, p.Payload)
				wire.PutICRC(again, c.src, c.dst, c.ipID())
				if !bytes.Equal(again, c.roce) {
					t.Errorf("frame %d: re-encoded packet differs\n got %x\nwant %x", c.frame, again, c.roce)
				}
				if int(h.BTH.PadCnt) != p.BTH.PadCnt() {
					t.Errorf("frame %d: AppendPacket pad %d, captured PadCnt %d", c.frame, h.BTH.PadCnt, p.BTH.PadCnt())
				}
				// rxe invariants (roce-wire.md §2.1, §1.3).
				if p.BTH.PKey() != wire.PKeyDefault || p.BTH.TVer() != 0 || p.BTH.MigReq() {
					t.Errorf("frame %d: P_Key %#x TVer %d MigReq %v", c.frame, p.BTH.PKey(), p.BTH.TVer(), p.BTH.MigReq())
				}
				if flags := binary.BigEndian.Uint16(c.ip[6:]); flags != 0x4000 {
					t.Errorf("frame %d: IPv4 flags/fragment %#04x, want DF only", c.frame, flags)
				}

				// 5. QP1: a CM MAD in a UD SEND_ONLY.
				if p.BTH.DestQP() != wire.QPNGSI {
					continue
				}
				if p.Opcode() != wire.UDSendOnly || p.DETH.QKey() != wire.QKeyGSI || p.DETH.SrcQP() != wire.QPNGSI {
					t.Errorf("frame %d: QP1 packet %v Q_Key %#x SrcQP %v", c.frame, p.Opcode(), p.DETH.QKey(), p.DETH.SrcQP())
					continue
				}
				m, n, err := wire.ParseMAD(p.Payload)
				if err != nil || n != wire.MADSize || len(p.Payload) != wire.MADSize {
					t.Errorf("frame %d: ParseMAD: %d %v (payload %d bytes)", c.frame, n, err, len(p.Payload))
					continue
				}
				f := m.Fields()
				name, known := cmAttr[f.AttributeID]
				if f.BaseVersion != 1 || f.MgmtClass != wire.MgmtClassCM || f.ClassVersion != wire.CMClassVersion ||
					f.Method != wire.MethodSend || !known || f.Status != 0 {
					t.Errorf("frame %d: MAD header %+v", c.frame, f)
				}
				if !bytes.Equal(append(f.Append(nil), m.Data()...), p.Payload) {
					t.Errorf("frame %d: MAD header does not re-encode", c.frame)
				}
				mads[name]++
			}
			for op, n := range want.opcodes {
				if opcodes[op] != n {
					t.Errorf("opcode %v: %d packets, MANIFEST.md says %d", op, opcodes[op], n)
				}
			}
			for op, n := range opcodes {
				if want.opcodes[op] == 0 {
					t.Errorf("opcode %v: %d packets, not in MANIFEST.md", op, n)
				}
			}
			for k, n := range want.mads {
				if mads[k] != n {
					t.Errorf("%s MADs: %d, MANIFEST.md says %d", k, mads[k], n)
				}
			}
			for k, n := range mads {
				if want.mads[k] == 0 {
					t.Errorf("%s MADs: %d, not in MANIFEST.md", k, n)
				}
			}
		})
	}
	t.Logf("%d RoCEv2 packets in %d captures; %d non-zero IPv4 IDs recovered from the ICRC", total, len(files), recovered)
	if recovered == 0 {
		t.Error("no capture exercised IPv4 ID recovery")
	}
	for _, f := range []string{"rping.pcap", "write_bw_rdma_cm.pcap", "send_bw_ud.pcap", "ud_pingpong.pcap"} {
		if pkts[f] == nil {
			t.Errorf("capture %s is missing", f)
		}
	}
}
