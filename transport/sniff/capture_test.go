package sniff

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rxeDir holds real rdma_rxe captures and their MANIFEST.md.
const rxeDir = "../../testdata/rxe"

const roceV2Port = 4791

// manifestCounts parses the "<file>.pcap: N frames ...: RoCEv2 K, ..." lines
// of MANIFEST.md (written by pcap-summary.py) into file name -> K.
func manifestCounts(t *testing.T) map[string]int {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(rxeDir, "MANIFEST.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^(\S+\.pcap): \d+ frames .*?: RoCEv2 (\d+),`)
	counts := make(map[string]int)
	for _, m := range re.FindAllStringSubmatch(string(text), -1) {
		n, err := strconv.Atoi(m[2])
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := counts[m[1]]; dup {
			t.Fatalf("MANIFEST.md lists %s twice", m[1])
		}
		counts[m[1]] = n
	}
	if len(counts) == 0 {
		t.Fatal("no \"<file>.pcap: ... RoCEv2 N\" lines in MANIFEST.md")
	}
	return counts
}

func readAll(t *testing.T, path string) (linktype int, pkts []Packet) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := r.Next()
		if err == io.EOF {
			return r.LinkType(), pkts
		}
		if err != nil {
			t.Fatalf("%s: packet %d: %v", path, len(pkts)+1, err)
		}
		p.Data = bytes.Clone(p.Data)
		pkts = append(pkts, p)
	}
}

// TestRxeCaptures decodes every rdma_rxe capture, checks the number of
// RoCEv2 frames against MANIFEST.md, and checks that AppendUDPFrame rebuilds
// rxe's IPv4/UDP headers byte for byte from the decoded addresses, IP ID and
// payload.
func TestRxeCaptures(t *testing.T) {
	want := manifestCounts(t)
	files, err := filepath.Glob(filepath.Join(rxeDir, "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no captures in %s", rxeDir)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".pcap"), func(t *testing.T) {
			wantN, ok := want[name]
			if !ok {
				t.Fatalf("%s has no RoCEv2 count in MANIFEST.md", name)
			}
			linktype, pkts := readAll(t, path)
			if linktype != LinkTypeEthernet {
				t.Fatalf("link type %d, want %d", linktype, LinkTypeEthernet)
			}
			var n, rebuilt int
			for i, p := range pkts {
				ip, udp, payload, src, dst, ok := DecodeUDP(p.LinkType, p.Data)
				if !ok || (src.Port() != roceV2Port && dst.Port() != roceV2Port) {
					continue
				}
				n++
				if ip[0]>>4 != 4 || binary.BigEndian.Uint16(udp[6:]) != 0 {
					continue // only rxe's own IPv4 packets (UDP checksum 0) are rebuilt
				}
				id := binary.BigEndian.Uint16(ip[4:])
				got := AppendUDPFrame(nil, src, dst, id, payload)
				orig := p.Data[len(p.Data)-len(got):]
				if !bytes.Equal(got, orig) {
					t.Errorf("frame %d: rebuilt\n% x\nwant\n% x", i+1, got[:28], orig[:28])
				}
				rebuilt++
			}
			if n != wantN {
				t.Errorf("decoded %d UDP %d frames, MANIFEST.md says RoCEv2 %d", n, roceV2Port, wantN)
			}
			if rebuilt == 0 {
				t.Errorf("no rxe frame to rebuild")
			}
		})
	}
}

// ipv6ZeroChecksumExpert is tshark's expert message for an IPv6 UDP
// datagram with checksum 0, which RFC 8200 forbids outside tunnels
// (RFC 6936); rdma_rxe sends it all the same, and so does AppendUDPFrame.
const ipv6ZeroChecksumExpert = "Illegal checksum value (0)"

// TestTshark writes the UDP payloads of a real rxe capture (RC, UD and CM
// MADs) through a Recorder over IPv4 and IPv6 and checks that tshark reads
// the file without errors, verifies the IPv4 header checksums and decodes
// every packet as InfiniBand.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH; install it (apt-get install tshark) to check that Wireshark reads our pcaps")
	}
	_, pkts := readAll(t, filepath.Join(rxeDir, "rping.pcap"))
	var buf bytes.Buffer
	rec, err := NewRecorder(&buf)
	if err != nil {
		t.Fatal(err)
	}
	src4 := netip.MustParseAddrPort("127.0.0.2:49152")
	dst4 := netip.MustParseAddrPort("127.0.0.3:4791")
	src6 := netip.MustParseAddrPort("[fd00::2]:49152")
	dst6 := netip.MustParseAddrPort("[fd00::3]:4791")
	ts := time.Unix(1700000000, 0)
	var written int
	for _, p := range pkts {
		_, _, payload, _, _, ok := DecodeUDP(p.LinkType, p.Data)
		if !ok {
			continue
		}
		ts = ts.Add(time.Millisecond)
		if err := rec.Record(ts, src4, dst4, uint16(written), payload); err != nil {
			t.Fatal(err)
		}
		if err := rec.Record(ts, src6, dst6, 0, payload); err != nil {
			t.Fatal(err)
		}
		written += 2
	}
	path := filepath.Join(t.TempDir(), "sniff.pcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(tshark, "-n", "-r", path,
		"-o", "ip.check_checksum:TRUE",
		"--disable-protocol", "rpcordma", // its heuristic misreads RC SEND payloads, see MANIFEST.md
		"-T", "fields", // tab-separated
		"-e", "ip.version", "-e", "ipv6.src", "-e", "ip.checksum.status", "-e", "udp.dstport",
		"-e", "infiniband.bth.opcode", "-e", "_ws.malformed", "-e", "_ws.expert.message")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		// tshark warns when run as root; anything else is a failure.
		if line != "" && !strings.Contains(line, "Running as user \"root\"") {
			t.Errorf("tshark stderr: %s", line)
		}
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != written {
		t.Fatalf("tshark printed %d lines, want %d:\n%s", len(lines), written, stdout.String())
	}
	for i, line := range lines {
		f := strings.Split(line, "\t")
		if len(f) != 7 {
			t.Fatalf("line %d: %q", i+1, line)
		}
		ipver, ip6src, cksum, dport, opcode, malformed, expert := f[0], f[1], f[2], f[3], f[4], f[5], f[6]
		if i%2 == 1 && expert == ipv6ZeroChecksumExpert {
			expert = "" // expected: rxe also sends IPv6 UDP checksum 0
		}
		switch {
		case i%2 == 0 && (ipver != "4" || cksum != "1"): // 1 = good (0 = bad, 2 = unverified)
			t.Errorf("packet %d: want IPv4 with a good header checksum: %q", i+1, line)
		case i%2 == 1 && ip6src != src6.Addr().String():
			t.Errorf("packet %d: want IPv6 from %v: %q", i+1, src6.Addr(), line)
		case dport != strconv.Itoa(roceV2Port) || opcode == "":
			t.Errorf("packet %d: not decoded as RoCEv2 (UDP %d, InfiniBand BTH): %q", i+1, roceV2Port, line)
		case malformed != "" || expert != "":
			t.Errorf("packet %d: tshark reports a malformed packet or expert info: %q", i+1, line)
		}
	}
	if t.Failed() {
		t.Logf("tshark output:\n%s", stdout.String())
	}
}
