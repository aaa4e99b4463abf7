package cli

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// TestPerftestSeveralQPs runs the bandwidth tests with -q between two
// tbrdma ends: each side's header says how many QPs, each prints one
// address line per QP, and the one row counts -n iterations on every QP
// (perftest's report: the messages of all QPs over the whole run).
func TestPerftestSeveralQPs(t *testing.T) {
	for _, c := range []struct {
		kind  *perftestKind
		args  []string
		sizes []int
		iters int
	}{
		{writeBWTest, []string{"-q", "4", "-n", "50", "-s", "65536"}, []int{65536}, 50},
		{writeBWTest, []string{"-q", "2", "-n", "300", "-s", "100"}, []int{100}, 300},
		{readBWTest, []string{"-q", "4", "-n", "50", "-s", "65536"}, []int{65536}, 50},
		{sendBWTest, []string{"-q", "4", "-n", "50", "-s", "65536"}, []int{65536}, 50},
		{sendBWTest, []string{"-q", "3", "-n", "200", "-s", "1000", "-r", "16"}, []int{1000}, 200},
		{writeBWTest, []string{"-q", "2", "-a", "-n", "5"}, allSizes(), 5},
		{sendBWTest, []string{"-q", "2", "-a", "-n", "5"}, allSizes(), 5},
	} {
		t.Run(c.kind.name+"/"+strings.Join(c.args, ""), func(t *testing.T) {
			sout, cout, serr, cerr := runPerftestPair(t, c.kind, c.args, nil)
			qps := c.args[1]
			n := atoi(t, qps)
			for side, out := range map[string]string{"server": sout, "client": cout} {
				if !strings.Contains(out, " Number of qps   : "+qps+"\t\t") {
					t.Errorf("%s: header lacks %s QPs:\n%s", side, qps, out)
				}
				if got := strings.Count(out, " local address: "); got != n {
					t.Errorf("%s: %d local address lines, want %d", side, got, n)
				}
				if got := strings.Count(out, " remote address: "); got != n {
					t.Errorf("%s: %d remote address lines, want %d", side, got, n)
				}
			}
			for _, size := range c.sizes {
				if !bwRow(size, c.iters*n, false).MatchString(cout) {
					t.Errorf("client: no row of %d×%d iterations for %d bytes:\n%s", n, c.iters, size, cout)
				}
				if c.kind == sendBWTest && !bwRow(size, c.iters*n, true).MatchString(sout) {
					t.Errorf("server: no row of %d×%d receives for %d bytes:\n%s", n, c.iters, size, sout)
				}
			}
			if c.kind != sendBWTest && !bwRow(c.sizes[len(c.sizes)-1], c.iters*n, false).MatchString(sout) {
				t.Errorf("server: not the client's report:\n%s", sout)
			}
			if serr != "" || cerr != "" {
				t.Errorf("stderr: server %q, client %q", serr, cerr)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, d := range s {
		if d < '0' || d > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = n*10 + int(d-'0')
	}
	return n
}

// byteRecorder records every write on a connection.
type byteRecorder struct {
	net.Conn
	mu     *sync.Mutex
	writes *[][]byte
}

func (r byteRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	*r.writes = append(*r.writes, slices.Clone(b))
	r.mu.Unlock()
	return r.Conn.Write(b)
}

// TestPerftestQPsExchange checks the TCP exchange of -q 4 against
// perftest 4.5's (and 25.01's, the same) sources, starting from the
// one-QP exchange of the golden captures: where one QP sends one key
// message before the QPs connect and one after, every QP sends its own
// (write-bw and read-bw: all before, all after, then the first QP's
// again; send-bw: all before, the first's, then all), the QPs'
// descriptions in order, each QP's the same both times; the rest does
// not change.
func TestPerftestQPsExchange(t *testing.T) {
	const qps = 4
	for _, c := range []struct {
		kind *perftestKind
		pcap string
		args []string
		// rounds are the indexes, among the key messages of the
		// one-QP capture, of those sent once per QP.
		rounds []int
	}{
		{writeBWTest, "write_bw_64k.pcap", []string{"-n", "5", "-s", "65536"}, []int{0, 1}},
		{readBWTest, "read_bw.pcap", []string{"-n", "5", "-s", "65536"}, []int{0, 1}},
		{sendBWTest, "send_bw_64k.pcap", []string{"-n", "5", "-s", "65536"}, []int{0, 2}},
	} {
		t.Run(c.kind.name, func(t *testing.T) {
			oneC, oneS := captureWrites(t, c.pcap)
			var mu sync.Mutex
			var gotC, gotS [][]byte
			runPerftestPair(t, c.kind, append([]string{"-q", itoa(qps)}, c.args...), func(server bool) func(net.Conn) net.Conn {
				return func(conn net.Conn) net.Conn {
					if server {
						return byteRecorder{conn, &mu, &gotS}
					}
					return byteRecorder{conn, &mu, &gotC}
				}
			})
			if len(gotC) < 2 {
				t.Fatalf("client wrote %d messages", len(gotC))
			}
			gotC = slices.Delete(gotC, 1, 2) // the test hint (TestPerftestExchangeMatchesCapture)
			for side, w := range map[string]struct {
				one []int
				got [][]byte
			}{"client": {oneC, gotC}, "server": {oneS, gotS}} {
				want := expandKeys(w.one, c.rounds, qps)
				sizes := make([]int, len(w.got))
				for i, b := range w.got {
					sizes[i] = len(b)
				}
				if !slices.Equal(sizes, want) {
					t.Errorf("%s wrote %v, perftest with -q %d %v", side, sizes, qps, want)
					continue
				}
				checkKeyRounds(t, side, w.got, c.rounds, qps)
			}
		})
	}
}

// keyLen is the size of the GID variant of perftest's key message.
const keyLen = 108

// expandKeys returns the message sizes of a one-QP exchange one with the
// key messages at the indexes rounds (counted among the key messages)
// sent qps times.
func expandKeys(one []int, rounds []int, qps int) []int {
	var out []int
	k := 0
	for _, n := range one {
		if n == keyLen {
			if slices.Contains(rounds, k) {
				for range qps - 1 {
					out = append(out, n)
				}
			}
			k++
		}
		out = append(out, n)
	}
	return out
}

// checkKeyRounds checks the key messages a side wrote: the per-QP rounds
// carry qps different QPs, in the same order each time, and every other
// key message is the first QP's.
func checkKeyRounds(t *testing.T, side string, writes [][]byte, rounds []int, qps int) {
	t.Helper()
	var keys []perf.Dest
	for _, b := range writes {
		if len(b) == keyLen {
			d, err := perf.ParseKey(b)
			if err != nil {
				t.Fatalf("%s: %v", side, err)
			}
			keys = append(keys, d)
		}
	}
	first := keys[:qps]
	for i := range first {
		for j := range i {
			if first[i].QPN == first[j].QPN || first[i].VAddr == first[j].VAddr {
				t.Errorf("%s: QPs %d and %d share QPN %#x or VAddr %#x", side, j, i, first[i].QPN, first[i].VAddr)
			}
		}
	}
	k := 0
	for r := 0; k < len(keys); r++ {
		if slices.Contains(rounds, r) {
			for i := range qps {
				if keys[k+i] != first[i] {
					t.Errorf("%s: key message %d is %+v, want QP %d's %+v", side, k+i, keys[k+i], i, first[i])
				}
			}
			k += qps
			continue
		}
		if keys[k] != first[0] {
			t.Errorf("%s: key message %d is %+v, want the first QP's %+v", side, k, keys[k], first[0])
		}
		k++
	}
}

// TestPerftestQPsMismatch pairs ends with different -q: a one-test server
// refuses a tbrdma client at once with both counts; and where there is no
// hint to compare (a stock perftest, or serve's route), the key exchange
// shows the difference: each end fails, neither waits for the other.
func TestPerftestQPsMismatch(t *testing.T) {
	for _, c := range []struct {
		name         string
		sargs, cargs []string
		wantS, wantC string // in the server's and the client's error
		noHint       bool   // the client sends no test hint, as a stock perftest
	}{
		{"hint", []string{"-q", "4"}, []string{"-q", "2"},
			"the client runs write-bw -q 2, this server -q 4: start the server with the client's flags",
			"the client runs write-bw -q 2, this server -q 4: start the server with the client's flags", false},
		// Each end answers the key message in which the other sees the
		// difference before it sees it itself.
		{"fewer on the client", []string{"-q", "4"}, []string{"-q", "2"},
			"the client runs write-bw with -q 2, this server with -q 4 (its QP descriptions in the exchange say so): start both ends with the same -q",
			"the server runs write-bw with more QPs than this client's -q 2", true},
		{"more on the client", []string{"-q", "1"}, []string{"-q", "3"},
			"the client runs write-bw with more QPs than this server's -q 1",
			"the server runs write-bw with -q 1, this client with -q 3", true},
		{"more on the server", []string{"-q", "2"}, nil,
			"the client runs write-bw with -q 1, this server with -q 2",
			"the server runs write-bw with more QPs than this client's -q 1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := loopbackAddr(), loopbackAddr()
			sf, _, _ := testFactory()
			cf, _, _ := testFactory()
			common := []string{"-n", "20", "-s", "4096"}
			so := parsePerftest(t, sf, writeBWTest, append([]string{"--bind", sa.String(), "-p", "0"}, append(c.sargs, common...)...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			port, serr := startServer(t, ctx, so)
			co := parsePerftest(t, cf, writeBWTest, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, append(c.cargs, common...)...)...)
			if c.noHint {
				// No hint: the version message has no offer, as a
				// stock client's.
				co.wrapConn = func(conn net.Conn) net.Conn { return &noHintConn{Conn: conn} }
			}
			cerr := runPerftest(ctx, co)
			if cerr == nil || !strings.Contains(cerr.Error(), c.wantC) {
				t.Errorf("client: %v, want %q", cerr, c.wantC)
			}
			if err := <-serr; err == nil || !strings.Contains(err.Error(), c.wantS) {
				t.Errorf("server: %v, want %q", err, c.wantS)
			}
			if ctx.Err() != nil {
				t.Error("the pair ran into the test's timeout")
			}
		})
	}
}

// noHintConn clears the test-hint offer from the first message a client
// writes (its version), so the server sees a client without a hint.
type noHintConn struct {
	net.Conn
	done bool
}

func (c *noHintConn) Write(b []byte) (int, error) {
	if !c.done && len(b) == 16 {
		c.done = true
		b = slices.Clone(b)
		b[14], b[15] = 0, 0
	}
	return c.Conn.Write(b)
}
