package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tbrdma/tbrdma/transport/sniff"
)

// runPerftestPair runs a tbrdma server and client of kind k with args on
// fresh loopback addresses and returns their stdout and stderr.
func runPerftestPair(t *testing.T, k *perftestKind, args []string, wrap func(server bool) func(net.Conn) net.Conn) (sout, cout, serr, cerr string) {
	t.Helper()
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, so1, se1 := testFactory()
	cf, co1, ce1 := testFactory()
	so := parsePerftest(t, sf, k, append([]string{"--bind", sa.String(), "-p", "0"}, args...)...)
	if wrap != nil {
		so.wrapConn = wrap(true)
	}
	pair(t, func(l func(net.Addr)) error {
		so.Listening = l
		return runPerftest(context.Background(), so)
	}, func(port int) error {
		co := parsePerftest(t, cf, k, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, args...)...)
		if wrap != nil {
			co.wrapConn = wrap(false)
		}
		return runPerftest(context.Background(), co)
	})
	return so1.String(), co1.String(), se1.String(), ce1.String()
}

func latRow(size, iters int) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^ ` + regexp.QuoteMeta(padRight(itoa(size), 7)) + ` ` + itoa(iters) + ` +[\d.]+ +[\d.]+ +[\d.]+ *\t +[\d.]+ *\t[\d.]+ *\t\t[\d.]+ *\t\t[\d.]+ *$`)
}

func bwRow(size, iters int, zeroPeak bool) *regexp.Regexp {
	peak := `[\d.]+`
	if zeroPeak {
		peak = `0\.00`
	}
	return regexp.MustCompile(`(?m)^ ` + regexp.QuoteMeta(padRight(itoa(size), 7)) + `    ` + regexp.QuoteMeta(padRight(itoa(iters), 10)) + ` +` + peak + ` +[\d.]+ *\t\t +[\d.]+$`)
}

func padRight(s string, n int) string {
	for len(s) < n {
		s += " "
	}
	return s
}

// TestPerftestLoopbackBothSides covers the tests in which both sides work
// on the data path (send-lat, send-bw, write-lat) and read-bw, and -a.
func TestPerftestLoopbackBothSides(t *testing.T) {
	for _, c := range []struct {
		kind  *perftestKind
		args  []string
		sizes []int
		iters int
	}{
		{sendLatTest, []string{"-n", "20", "-s", "64"}, []int{64}, 20},
		{sendLatTest, []string{"-n", "9", "-s", "10000", "-m", "1024"}, []int{10000}, 9},
		{sendLatTest, []string{"-n", "300", "-r", "7"}, []int{2}, 300},
		{sendLatTest, []string{"-n", "500", "-s", "64", "-e"}, []int{64}, 500}, // kernel wait on both sides
		{sendBWTest, []string{"-n", "300", "-s", "4096", "-e"}, []int{4096}, 300},
		{sendBWTest, []string{"-n", "50", "-s", "65536"}, []int{65536}, 50},
		{sendBWTest, []string{"-n", "300", "-s", "100", "-r", "16"}, []int{100}, 300},
		{writeLatTest, []string{"-n", "20", "-s", "32"}, []int{32}, 20},
		{writeLatTest, []string{"-n", "300", "-s", "8"}, []int{8}, 300}, // the counter byte wraps
		{writeLatTest, []string{"-n", "10", "-s", "10000", "-m", "1024"}, []int{10000}, 10},
		{readBWTest, []string{"-n", "50", "-s", "65536"}, []int{65536}, 50},
		{readBWTest, []string{"-n", "300", "-s", "100", "-o", "4"}, []int{100}, 300},
		{sendBWTest, []string{"-a", "-n", "5"}, allSizes(), 5},
		{sendLatTest, []string{"-a", "-n", "5"}, allSizes(), 5},
		{writeLatTest, []string{"-a", "-n", "5"}, allSizes(), 5},
		{readBWTest, []string{"-a", "-n", "5"}, allSizes(), 5},
		{writeBWTest, []string{"-a", "-n", "5"}, allSizes(), 5},
	} {
		t.Run(c.kind.name+"/"+strings.Join(c.args, ""), func(t *testing.T) {
			if raceEnabled && c.kind == writeLatTest {
				t.Skip("write-lat polls memory the engine writes: a data race by design, as in perftest")
			}
			sout, cout, serr, cerr := runPerftestPair(t, c.kind, c.args, nil)
			for _, size := range c.sizes {
				switch {
				case c.kind.bw:
					if !bwRow(size, c.iters, false).MatchString(cout) {
						t.Errorf("client: no row for %d bytes:\n%s", size, cout)
					}
				default:
					if !latRow(size, c.iters).MatchString(cout) || !latRow(size, c.iters).MatchString(sout) {
						t.Errorf("no latency rows for %d bytes:\nserver:\n%s\nclient:\n%s", size, sout, cout)
					}
				}
			}
			switch c.kind {
			case sendBWTest: // the server measures the receives itself
				for _, size := range c.sizes {
					if !bwRow(size, c.iters, true).MatchString(sout) {
						t.Errorf("server: no row for %d bytes:\n%s", size, sout)
					}
				}
			case readBWTest, writeBWTest: // the server prints the client's last report
				last := c.sizes[len(c.sizes)-1]
				if !bwRow(last, c.iters, false).MatchString(sout) || strings.Count(sout, "\n "+itoa(last)+" ") != 1 {
					t.Errorf("server: not the client's last row:\n%s", sout)
				}
			}
			if serr != "" || cerr != "" {
				t.Errorf("stderr: server %q, client %q", serr, cerr)
			}
			if c.kind == sendLatTest && !strings.Contains(sout, " RX depth        : ") {
				t.Errorf("send-lat server header lacks RX depth:\n%s", sout)
			}
		})
	}
}

func allSizes() []int {
	var s []int
	for i := 1; i <= 23; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// recorder records the size of every write on a connection.
type recorder struct {
	net.Conn
	mu     *sync.Mutex
	writes *[]int
}

func (r recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	*r.writes = append(*r.writes, len(b))
	r.mu.Unlock()
	return r.Conn.Write(b)
}

// captureWrites returns the TCP payload sizes each side of a golden capture
// sent (client 198.18.0.2, server 198.18.0.3).
func captureWrites(t *testing.T, name string) (client, server []int) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "..", "..", "testdata", "rxe", name))
	if err != nil {
		t.Skipf("capture not available: %v", err)
	}
	defer f.Close()
	r, err := sniff.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return client, server
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
		tcp := ip[ihl:int(binary.BigEndian.Uint16(ip[2:]))]
		n := len(tcp) - int(tcp[12]>>4)*4
		if n == 0 {
			continue
		}
		if bytes.Equal(ip[12:16], []byte{198, 18, 0, 2}) {
			client = append(client, n)
		} else {
			server = append(server, n)
		}
	}
}

// TestPerftestExchangeMatchesCapture runs each new test with the arguments
// of its golden capture and checks that each side writes the same sequence
// of messages on the TCP side channel as the stock tool did: version,
// system data, MTU, the per-test number of key messages, reports, "done".
func TestPerftestExchangeMatchesCapture(t *testing.T) {
	for _, c := range []struct {
		kind *perftestKind
		pcap string
		args []string
	}{
		{sendLatTest, "send_lat.pcap", []string{"-n", "20"}},
		{sendBWTest, "send_bw_64k.pcap", []string{"-n", "5", "-s", "65536"}},
		{writeLatTest, "write_lat.pcap", []string{"-n", "20", "-s", "32"}},
		{readBWTest, "read_bw.pcap", []string{"-n", "5", "-s", "65536"}},
		{writeBWTest, "write_bw_64k.pcap", []string{"-n", "5", "-s", "65536"}},
		{readLatTest, "read_lat.pcap", []string{"-n", "20", "-s", "64"}},
	} {
		t.Run(c.kind.name, func(t *testing.T) {
			if raceEnabled && c.kind == writeLatTest {
				t.Skip("write-lat polls memory the engine writes")
			}
			wantC, wantS := captureWrites(t, c.pcap)
			var mu sync.Mutex
			var gotC, gotS []int
			runPerftestPair(t, c.kind, c.args, func(server bool) func(net.Conn) net.Conn {
				return func(conn net.Conn) net.Conn {
					if server {
						return recorder{conn, &mu, &gotS}
					}
					return recorder{conn, &mu, &gotC}
				}
			})
			// A tbrdma server asks a tbrdma client for its test hint
			// (mismatch.go), which the client writes after its
			// version; a stock server never asks.
			if len(gotC) < 2 || gotC[1] <= 4 {
				t.Errorf("client wrote %v: no test hint after the version", gotC)
			} else {
				gotC = slices.Delete(gotC, 1, 2)
			}
			if !slices.Equal(gotC, wantC) {
				t.Errorf("client wrote %v, perftest 4.5 %v", gotC, wantC)
			}
			if !slices.Equal(gotS, wantS) {
				t.Errorf("server wrote %v, perftest 4.5 %v", gotS, wantS)
			}
		})
	}
}

// TestNewPerftestDefaults checks perftest 4.5's defaults and adjustments for
// the new commands.
func TestNewPerftestDefaults(t *testing.T) {
	f, _, _ := testFactory()
	for _, c := range []struct {
		kind                             *perftestKind
		args                             []string
		size, iters, tx, rx, cqMod, outs int
		all                              bool
	}{
		{sendLatTest, nil, 2, 1000, 1, 512, 0, 0, false},
		{sendLatTest, []string{"-n", "5"}, 2, 5, 1, 6, 0, 0, false}, // rx ≤ iters, even
		{writeLatTest, nil, 2, 1000, 1, 0, 0, 0, false},
		{sendBWTest, nil, 65536, 1000, 128, 512, 1, 0, false}, // CQ moderation 1 above 8 KiB
		{sendBWTest, []string{"-n", "5", "-s", "4096"}, 4096, 5, 5, 6, 5, 0, false},
		{readBWTest, nil, 65536, 1000, 128, 0, 1, 128, false},
		{readBWTest, []string{"-a"}, 1 << 23, 1000, 128, 0, 100, 128, true},
	} {
		o := parsePerftest(t, f, c.kind, c.args...)
		if o.Size != c.size || o.Iters != c.iters || o.TxDepth != c.tx || o.RxDepth != c.rx || o.CQMod != c.cqMod || o.OutReads != c.outs || o.All != c.all {
			t.Errorf("%s %q: size %d iters %d tx %d rx %d cq-mod %d outs %d all %v", c.kind.name, c.args, o.Size, o.Iters, o.TxDepth, o.RxDepth, o.CQMod, o.OutReads, o.All)
		}
	}
	if n := len((&perftestOptions{All: true}).sizes()); n != 23 {
		t.Errorf("-a runs %d sizes, want 23", n)
	}
}
