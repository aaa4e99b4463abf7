package perf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/sniff"
)

// rxeDir holds the real rdma_rxe captures (Debian 12: rdma-core 44,
// perftest 4.5) that the project keeps at its root.
var rxeDir = filepath.Join("..", "..", "..", "..", "testdata", "rxe")

// segment is one TCP payload of a capture.
type segment struct {
	src  netip.Addr
	data []byte
}

// tcpPayloads returns the non-empty TCP payloads of an Ethernet/IPv4 pcap
// in capture order.
func tcpPayloads(t *testing.T, name string) []segment {
	t.Helper()
	f, err := os.Open(filepath.Join(rxeDir, name))
	if err != nil {
		t.Skipf("capture not available: %v", err)
	}
	defer f.Close()
	r, err := sniff.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []segment
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b := p.Data
		if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != 0x0800 || b[14+9] != 6 {
			continue
		}
		ip := b[14:]
		ihl := int(ip[0]&15) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		tcp := ip[ihl:total]
		off := int(tcp[12]>>4) * 4
		if len(tcp) > off {
			out = append(out, segment{src: netip.AddrFrom4([4]byte(ip[12:16])), data: bytes.Clone(tcp[off:])})
		}
	}
}

func TestKeyMessagesRoundTripCapture(t *testing.T) {
	for _, name := range []string{"read_lat.pcap", "atomic_fetch_add.pcap", "atomic_cmp_swap.pcap", "write_bw_64k.pcap"} {
		t.Run(name, func(t *testing.T) {
			n := 0
			for _, s := range tcpPayloads(t, name) {
				if len(s.data) != keyLen {
					continue
				}
				n++
				d, err := ParseKey(s.data)
				if err != nil {
					t.Fatal(err)
				}
				if got := d.MarshalKey(); !bytes.Equal(got, s.data) {
					t.Fatalf("re-marshalled key differs:\n got %q\nwant %q", got, s.data)
				}
				if netip.AddrFrom16(d.GID).Unmap() != s.src {
					t.Errorf("key GID %v, sent from %v", netip.AddrFrom16(d.GID), s.src)
				}
			}
			if n == 0 {
				t.Fatal("no key messages in the capture")
			}
		})
	}
}

// TestExchangeSizes checks the prefix every perftest 4.5 exchange starts
// with: version, page size, cache line, MTU, then key messages.
func TestExchangeSizes(t *testing.T) {
	segs := tcpPayloads(t, "read_lat.pcap")
	if len(segs) < 8 {
		t.Fatalf("%d segments", len(segs))
	}
	want := []int{16, 16, 4, 4, 4, 4, 2, 2, 108, 108}
	for i, w := range want {
		if len(segs[i].data) != w {
			t.Fatalf("segment %d: %d bytes, want %d", i, len(segs[i].data), w)
		}
	}
	if v := string(bytes.TrimRight(segs[0].data, "\x00")); v != Version {
		t.Errorf("perftest 4.5 sends version %q, tbrdma announces %q", v, Version)
	}
	// Replay the server's side of the capture to a client Comm and check
	// what the client writes has the capture's sizes.
	var server bytes.Buffer
	for _, s := range segs {
		if s.src == segs[1].src {
			server.Write(s.data)
		}
	}
	var sent bytes.Buffer
	c := NewComm(struct {
		io.Reader
		io.Writer
	}{&server, &sent}, false)
	if v, err := c.ExchangeVersions(); err != nil || v != "6.06" {
		t.Fatalf("versions: %q, %v", v, err)
	}
	page, line, err := c.ExchangeSysData(4096, 64)
	if err != nil || page != 4096 || line != 64 {
		t.Fatalf("sysdata: %d %d %v", page, line, err)
	}
	if m, err := c.ExchangeMTU(5); err != nil || m != 5 {
		t.Fatalf("MTU: %d %v", m, err)
	}
	rem, err := c.HandShake(Dest{QPN: 0x11})
	if err != nil || rem.OutReads != 0x80 || rem.QPN != 0x11 || rem.VAddr == 0 {
		t.Fatalf("key: %+v %v", rem, err)
	}
	if sent.Len() != 16+4+4+2+108 {
		t.Errorf("client wrote %d bytes", sent.Len())
	}
}

func TestPingpongMessageCapture(t *testing.T) {
	n := 0
	for _, s := range tcpPayloads(t, "rc_pingpong.pcap") {
		switch len(s.data) {
		case PingpongMsgLen:
			n++
			d, err := ParsePingpongDest(s.data)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Marshal(); !bytes.Equal(got, s.data) {
				t.Fatalf("re-marshalled message differs:\n got %q\nwant %q", got, s.data)
			}
			if d.GIDString() != "::ffff:"+s.src.String() {
				t.Errorf("GID %s from %v", d.GIDString(), s.src)
			}
		case len(pingpongDone):
			if !bytes.Equal(s.data, pingpongDone) {
				t.Errorf("done message %q", s.data)
			}
		default:
			t.Errorf("unexpected %d-byte segment %q", len(s.data), s.data)
		}
	}
	if n != 2 {
		t.Fatalf("%d address messages, want 2", n)
	}
}

func TestPingpongExchange(t *testing.T) {
	a, b := pipe()
	srv := PingpongDest{QPN: 0x12, PSN: 0xabcdef, GID: netip.MustParseAddr("::ffff:198.18.0.1").As16()}
	cli := PingpongDest{QPN: 0x11, PSN: 0x123456, GID: netip.MustParseAddr("::ffff:198.18.0.2").As16()}
	done := make(chan error, 1)
	var connected PingpongDest
	go func() {
		_, err := PingpongServerExchange(a, srv, func(d PingpongDest) error { connected = d; return nil })
		done <- err
	}()
	got, err := PingpongClientExchange(b, cli)
	if err != nil || got != srv {
		t.Fatalf("client got %+v, %v", got, err)
	}
	if err := <-done; err != nil || connected != cli {
		t.Fatalf("server connected to %+v, %v", connected, err)
	}
}

// pipe returns two connected in-memory streams.
func pipe() (io.ReadWriter, io.ReadWriter) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return struct {
			io.Reader
			io.Writer
		}{ar, aw}, struct {
			io.Reader
			io.Writer
		}{br, bw}
}

// lines returns the lines of a captured tool output.
func lines(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(rxeDir, name))
	if err != nil {
		t.Skipf("output not available: %v", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func after(t *testing.T, ls []string, prefix string) string {
	t.Helper()
	for i, l := range ls {
		if strings.HasPrefix(l, prefix) && i+1 < len(ls) {
			return ls[i+1]
		}
	}
	t.Fatalf("no line after %q", prefix)
	return ""
}

func TestPrintLatMatchesPerftest(t *testing.T) {
	ls := lines(t, "read_lat.client.txt")
	want := after(t, ls, " #bytes #iterations")
	var b strings.Builder
	PrintLat(&b, LatStats{Size: 64, Iters: 20, Min: 686.25, Max: 10737.22, Typical: 1981.00, Avg: 3050.90, Stdev: 2097.48, P99: 10737.22, P999: 10737.22})
	if got := strings.TrimSuffix(b.String(), "\n"); got != want {
		t.Errorf("latency row\n got %q\nwant %q", got, want)
	}
	for _, l := range ls {
		if strings.HasPrefix(l, " #bytes") && l != LatHeader {
			t.Errorf("header\n got %q\nwant %q", LatHeader, l)
		}
	}
}

func TestPrintBWMatchesPerftest(t *testing.T) {
	ls := lines(t, "write_bw_64k.client.txt")
	want := after(t, ls, " #bytes     #iterations")
	var b strings.Builder
	PrintBW(&b, BWReport{Size: 65536, Iters: 5, Peak: 7.97, Average: 7.26, MsgRate: 0.000116})
	if got := strings.TrimSuffix(b.String(), "\n"); got != want {
		t.Errorf("bandwidth row\n got %q\nwant %q", got, want)
	}
}

func TestPrintDestMatchesPerftest(t *testing.T) {
	segs := tcpPayloads(t, "read_lat.pcap")
	ls := lines(t, "read_lat.client.txt")
	var key []byte
	for _, s := range segs {
		if len(s.data) == keyLen && s.src == netip.MustParseAddr("198.18.0.2") {
			key = s.data
			break
		}
	}
	d, err := ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	PrintDest(&b, "local", d, VerbRead)
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, l := range ls {
		if strings.HasPrefix(l, " local address:") {
			if got[0] != l || got[1] != ls[i+1] {
				t.Errorf("address lines\n got %q\nwant %q", got, ls[i:i+2])
			}
			return
		}
	}
	t.Fatal("no local address line in the tool output")
}

func TestAltHex(t *testing.T) {
	for _, c := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0x11, 6, "0x0011"}, {0x58c592, 6, "0x58c592"}, {0x80, 4, "0x80"}, {0x284, 8, "0x000284"}, {0x55a01dd19000, 16, "0x0055a01dd19000"}} {
		if got := altHex(c.v, c.width); got != c.want {
			t.Errorf("altHex(%#x, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
}

func TestLatency(t *testing.T) {
	// 21 posts, deltas 1..20 µs in a shuffled order: the two largest (19,
	// 20) are dropped; 18 kept.
	deltas := []int{5, 3, 20, 1, 7, 19, 2, 4, 6, 8, 9, 10, 18, 11, 12, 13, 14, 15, 16, 17}
	t0 := time.Unix(0, 0)
	posted := []time.Time{t0}
	for _, d := range deltas {
		t0 = t0.Add(time.Duration(d) * time.Microsecond)
		posted = append(posted, t0)
	}
	s, ok := Latency(8, posted, 1)
	if !ok {
		t.Fatal("not ok")
	}
	if s.Min != 1 || s.Max != 19 || s.Typical != 9.5 || s.Avg != 9.5 || s.P99 != 19 || s.P999 != 19 || s.Iters != 21 {
		t.Errorf("%+v", s)
	}
	// Deviations truncated to whole µs: 8,7,…,0,0,…,8 (×2 halves).
	var sq float64
	for i := 1; i <= 18; i++ {
		d := math.Trunc(9.5 - float64(i))
		sq += d * d
	}
	if want := math.Sqrt(sq / 18); s.Stdev != want {
		t.Errorf("stdev %v, want %v", s.Stdev, want)
	}
	if h, _ := Latency(8, posted, 2); h.Min != 0.5 {
		t.Errorf("rtt factor 2: min %v", h.Min)
	}
}

func TestBandwidth(t *testing.T) {
	t0 := time.Unix(0, 0)
	var posted, completed []time.Time
	for i := range 4 {
		posted = append(posted, t0.Add(time.Duration(i)*time.Second))
		completed = append(completed, t0.Add(time.Duration(i+1)*time.Second))
	}
	r := Bandwidth(MiB, posted, completed, 1)
	if math.Abs(r.Average-1) > 1e-9 || math.Abs(r.Peak-1) > 1e-9 || math.Abs(r.MsgRate-1e-6) > 1e-15 {
		t.Errorf("%+v", r)
	}
}

// TestPeakMatchesEveryPair holds the hull search to perftest's definition
// (every pair of cqMod boundaries) on random runs: steady streams with
// stalls and bursts, a completion time that repeats (a coarse clock), and
// lengths that are not a multiple of cqMod.
func TestPeakMatchesEveryPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(0, 0)
	for trial := range 500 {
		n := 1 + rng.IntN(300)
		cqMod := 1 + rng.IntN(8)
		posted, completed := make([]time.Time, n), make([]time.Time, n)
		var p, c time.Duration
		for i := range n {
			p += time.Duration(rng.IntN(2000)) * time.Nanosecond
			if rng.IntN(20) == 0 {
				p += time.Duration(rng.IntN(100)) * time.Microsecond // a stall
			}
			c = max(c, p) + time.Duration(rng.IntN(3000))*time.Nanosecond
			if trial%7 == 0 && rng.IntN(3) == 0 {
				c = p // completion seen at the post's timestamp
			}
			posted[i], completed[i] = t0.Add(p), t0.Add(c)
		}
		got, want := peakTime(posted, completed, cqMod), peakTimePairs(posted, completed, cqMod)
		if math.Abs(got-want) > 1e-9*want {
			t.Fatalf("trial %d (n %d, cq-mod %d): peak time %g s, every pair %g s", trial, n, cqMod, got, want)
		}
	}
}

// TestPeakOfALongRun: a million completions (write-bw -n 1000000 at a
// size that makes cq-mod 1) used to mean hours of silence after the test;
// the peak is the burst in the middle of it.
func TestPeakOfALongRun(t *testing.T) {
	const n = 1_000_000
	t0 := time.Unix(0, 0)
	posted, completed := make([]time.Time, n), make([]time.Time, n)
	for i := range n {
		posted[i] = t0.Add(time.Duration(i) * time.Microsecond)
		completed[i] = posted[i].Add(50 * time.Microsecond)
	}
	// messages 500000-500999 are posted 10 ns apart and complete 100 ns
	// apart, from 50 µs after the first of them was posted
	b := posted[500_000]
	for i := 500_000; i < 501_000; i++ {
		posted[i] = b.Add(time.Duration(i-500_000) * 10 * time.Nanosecond)
		completed[i] = b.Add(50*time.Microsecond + time.Duration(i-500_000+1)*100*time.Nanosecond)
	}
	r := Bandwidth(MiB, posted, completed, 1)
	// best window [500000, 500999]: 150 µs for 1000 messages
	if want := 1.0 / 150e-9; math.Abs(r.Peak-want) > 1e-6*want {
		t.Errorf("peak %v MiB/s, want %v", r.Peak, want)
	}
}
