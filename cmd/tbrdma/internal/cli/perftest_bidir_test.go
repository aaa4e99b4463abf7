package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/jsonout"
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// bidirPair runs a -b test between two tbrdma ends and returns both
// sides' output and buffers after the run.
func bidirPair(t *testing.T, k *perftestKind, args []string) (sout, cout string, sbuf, cbuf []byte) {
	t.Helper()
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, so1, se1 := testFactory()
	cf, co1, ce1 := testFactory()
	so := parsePerftest(t, sf, k, append([]string{"--bind", sa.String(), "-p", "0"}, args...)...)
	so.Inspect = func(b []byte) { sbuf = bytes.Clone(b) }
	pair(t, func(l func(net.Addr)) error {
		so.Listening = l
		return runPerftest(context.Background(), so)
	}, func(port int) error {
		co := parsePerftest(t, cf, k, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, args...)...)
		co.Inspect = func(b []byte) { cbuf = bytes.Clone(b) }
		return runPerftest(context.Background(), co)
	})
	// With --large-segments both sides say what they agreed; nothing else
	// belongs on stderr.
	const seg = "tbrdma: large segments: 61440-byte packets, agreed with the peer (tbrdma extension)\n"
	se, ce := se1.String(), ce1.String()
	if slices.Contains(args, "--large-segments") && (se != seg || ce != seg) {
		t.Errorf("--large-segments not agreed on both sides: server %q, client %q", se, ce)
	} else if !slices.Contains(args, "--large-segments") && (se != "" || ce != "") {
		t.Errorf("stderr: server %q, client %q", se, ce)
	}
	return so1.String(), co1.String(), sbuf, cbuf
}

// checkBidirData checks that the last message of each QP went both ways:
// what landed in each side's buffer is the other side's pattern. A WRITE
// or a SEND lands in the second half of the receiver's buffer, from the
// first half of the sender's; a READ lands in the reader's first half,
// from the second half of the peer's (the region -b advertises).
func checkBidirData(t *testing.T, k *perftestKind, qps, size int, sbuf, cbuf []byte) {
	t.Helper()
	half := max(size, os.Getpagesize())
	h := qps * half
	for _, side := range []struct {
		name   string
		buf    []byte
		server bool // whose pattern the side should hold: the peer's
	}{{"server", sbuf, false}, {"client", cbuf, true}} {
		for q := range qps {
			at, from := h+q*half, q*half // WRITE, SEND
			if k.verb == perf.VerbRead {
				at, from = q*half, h+q*half
			}
			for j := range size {
				if got, want := side.buf[at+j], bufPattern(from+j, side.server); got != want {
					t.Fatalf("%s: QP %d byte %d is %d, want the peer's %d: the data did not arrive", side.name, q, j, got, want)
				}
			}
		}
	}
}

// TestPerftestBidirectional runs write-bw, read-bw and send-bw with -b
// between two tbrdma ends: both headers say Bidirectional, both sides
// print one row per size counting their -n × -q messages, and the data of
// both directions arrived.
func TestPerftestBidirectional(t *testing.T) {
	for _, c := range []struct {
		kind  *perftestKind
		args  []string
		qps   int
		sizes []int
		iters int
	}{
		{writeBWTest, []string{"-b", "-n", "50", "-s", "65536"}, 1, []int{65536}, 50},
		{writeBWTest, []string{"-b", "-q", "3", "-n", "200", "-s", "100"}, 3, []int{100}, 200},
		{readBWTest, []string{"-b", "-n", "50", "-s", "65536"}, 1, []int{65536}, 50},
		{readBWTest, []string{"-b", "-q", "2", "-n", "100", "-s", "5000"}, 2, []int{5000}, 100},
		{sendBWTest, []string{"-b", "-n", "50", "-s", "65536"}, 1, []int{65536}, 50},
		{sendBWTest, []string{"-b", "-q", "2", "-n", "200", "-s", "1000", "-r", "16", "-t", "8"}, 2, []int{1000}, 200},
		{writeBWTest, []string{"-b", "-a", "-n", "5"}, 1, allSizes(), 5},
		{sendBWTest, []string{"-b", "-a", "-n", "5", "-q", "2"}, 2, allSizes(), 5},
		{writeBWTest, []string{"-b", "-R", "-n", "50", "-s", "65536"}, 1, []int{65536}, 50},
		{sendBWTest, []string{"-b", "-R", "-n", "50", "-s", "4096"}, 1, []int{4096}, 50},
		{readBWTest, []string{"-b", "--large-segments", "-n", "20", "-s", "200000"}, 1, []int{200000}, 20},
		{writeBWTest, []string{"-b", "--large-segments", "-n", "20", "-s", "200000"}, 1, []int{200000}, 20},
	} {
		t.Run(c.kind.name+"/"+strings.Join(c.args, ""), func(t *testing.T) {
			sout, cout, sbuf, cbuf := bidirPair(t, c.kind, c.args)
			title := (&perf.TestInfo{Verb: c.kind.verb, BW: true, Bidir: true}).Title()
			for side, out := range map[string]string{"server": sout, "client": cout} {
				if !strings.Contains(out, "                    "+title+"\n") || !strings.Contains(out, " TX depth        : ") {
					t.Errorf("%s: header lacks %q or the TX depth:\n%s", side, title, out)
				}
				for _, size := range c.sizes {
					if !bwRow(size, c.iters*c.qps, false).MatchString(out) {
						t.Errorf("%s: no row of %d×%d iterations for %d bytes:\n%s", side, c.qps, c.iters, size, out)
					}
				}
			}
			checkBidirData(t, c.kind, c.qps, c.sizes[len(c.sizes)-1], sbuf, cbuf)
		})
	}
}

// TestPerftestBidirectionalJSON checks that with -b each side's row adds
// up both directions, as perftest's: the two sides add the same two
// reports, so their rows are equal, and non-zero.
func TestPerftestBidirectionalJSON(t *testing.T) {
	sout, cout, _, _ := bidirPair(t, writeBWTest, []string{"-b", "--json", "-n", "100", "-s", "4096"})
	var rows [2]jsonout.BenchV1
	for i, out := range []string{sout, cout} {
		if err := json.Unmarshal([]byte(out), &rows[i]); err != nil {
			t.Fatalf("row %q: %v", out, err)
		}
	}
	s, c := rows[0], rows[1]
	if s.Role != "server" || c.Role != "client" || s.Bytes != 4096 || c.Iterations != 100 || s.Iterations != 100 {
		t.Fatalf("rows: server %+v, client %+v", s, c)
	}
	if s.BWAvgBps == nil || c.BWAvgBps == nil || *s.BWAvgBps == 0 || *s.BWAvgBps != *c.BWAvgBps ||
		*s.MsgRatePps != *c.MsgRatePps || *s.BWPeakBps != *c.BWPeakBps {
		t.Errorf("the sides' rows are not the same sum of both directions:\nserver %s\nclient %s", sout, cout)
	}
}

// TestPerftestBidirectionalMismatch runs a one-test server and a client
// that differ in -b, both ways: both ends fail at once with the server's
// reason.
func TestPerftestBidirectionalMismatch(t *testing.T) {
	for _, c := range []struct {
		server, client []string
		want           string
	}{
		{[]string{"-b"}, nil, "the client runs write-bw no -b (unidirectional), this server -b (bidirectional)"},
		{nil, []string{"-b"}, "the client runs write-bw -b (bidirectional), this server no -b (unidirectional)"},
	} {
		t.Run(c.want, func(t *testing.T) {
			sa, ca := loopbackAddr(), loopbackAddr()
			sf, _, _ := testFactory()
			cf, _, _ := testFactory()
			so := parsePerftest(t, sf, writeBWTest, append([]string{"--bind", sa.String(), "-p", "0", "-n", "20"}, c.server...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			port, serr := startServer(t, ctx, so)
			co := parsePerftest(t, cf, writeBWTest, append([]string{"--bind", ca.String(), "-p", itoa(port), "-n", "20", sa.String()}, c.client...)...)
			cerr := runPerftest(ctx, co)
			if cerr == nil || !strings.Contains(cerr.Error(), c.want) || !perf.IsRefused(cerr) {
				t.Errorf("client: %v, want the refusal %q", cerr, c.want)
			}
			if err := <-serr; err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("server: %v, want %q", err, c.want)
			}
			if ctx.Err() != nil {
				t.Error("the pair ran into the test's timeout")
			}
		})
	}
}

// hintRewriter is a client's connection whose test hint says "b=0" for
// "b=1" or the other way round: the server cannot tell the client's -b,
// as with a stock perftest, which sends no hint.
type hintRewriter struct {
	net.Conn
	from, to []byte
}

func (c *hintRewriter) Write(b []byte) (int, error) {
	if bytes.HasPrefix(b, []byte(hintPrefix)) || bytes.Contains(b, []byte(hintPrefix)) {
		b = bytes.Replace(b, c.from, c.to, 1)
	}
	return c.Conn.Write(b)
}

// TestPerftestBidirectionalUnchecked pairs a -b end with one without -b
// whose one-test server cannot compare -b (as with a stock perftest on
// the other end): the -b end fails with a line that names -b, rather
// than hang (send-bw: the peer sends nothing back; write-bw: its report is
// not a -b side's), and neither end waits past the silence watch.
func TestPerftestBidirectionalUnchecked(t *testing.T) {
	for _, c := range []struct {
		name       string
		kind       *perftestKind
		server, cl []string
		from, to   string
		failing    string // the end whose error names -b
		want       string
	}{
		{"send-bw client -b", sendBWTest, nil, []string{"-b"}, "b=1", "b=0", "client",
			"a peer without -b (bidirectional) sends nothing back"},
		{"send-bw server -b", sendBWTest, []string{"-b"}, nil, "b=0", "b=1", "server",
			"a peer without -b (bidirectional) sends nothing back"},
		{"write-bw client -b", writeBWTest, nil, []string{"-b"}, "b=1", "b=0", "client",
			"it does not run -b (bidirectional)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := loopbackAddr(), loopbackAddr()
			sf, _, sstderr := testFactory()
			cf, _, cstderr := testFactory()
			args := []string{"-n", "50", "-s", "4096"}
			so := parsePerftest(t, sf, c.kind, append(append([]string{"--bind", sa.String(), "-p", "0"}, args...), c.server...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			port, serr := startServer(t, ctx, so)
			co := parsePerftest(t, cf, c.kind, append(append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, args...), c.cl...)...)
			co.wrapConn = func(conn net.Conn) net.Conn { return &hintRewriter{Conn: conn, from: []byte(c.from), to: []byte(c.to)} }
			cerr := runPerftest(ctx, co)
			serrv := <-serr
			if ctx.Err() != nil {
				t.Fatalf("the pair ran into the test's timeout: server %v, client %v", serrv, cerr)
			}
			if cerr == nil || serrv == nil {
				t.Fatalf("a mismatched pair succeeded: server %v, client %v", serrv, cerr)
			}
			got := cstderr.String() + cerr.Error()
			if c.failing == "server" {
				got = sstderr.String() + serrv.Error()
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("%s: %q, want %q", c.failing, got, c.want)
			}
		})
	}
}

// TestServeBidirectional runs -b clients of the three bandwidth tests
// through "tbrdma serve": each client prints a Bidirectional row, and
// what serve sent arrived (a READ reads serve's pattern, a WRITE or SEND
// from serve lands in the client's second half). A client without -b
// right after is served as before.
func TestServeBidirectional(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	_, errOf := startServeLog(t, sa)
	waitServeLog(t, errOf, "port 18515 (TCP, pingpong and perftest clients)")
	const size = 8192
	for _, c := range []struct {
		kind *perftestKind
		args []string
	}{
		{writeBWTest, []string{"-b"}},
		{readBWTest, []string{"-b", "-q", "2"}},
		{sendBWTest, []string{"-b"}},
		{writeBWTest, nil},
	} {
		t.Run(c.kind.name+strings.Join(c.args, ""), func(t *testing.T) {
			f, out, errOut := testFactory()
			o := parsePerftest(t, f, c.kind, append(c.args, "-s", itoa(size), "-n", "50", "--bind", ca.String(), sa.String())...)
			var buf []byte
			o.Inspect = func(b []byte) { buf = bytes.Clone(b) }
			if err := runPerftest(context.Background(), o); err != nil {
				t.Fatalf("%s %v through serve: %v\nstderr:\n%s\nserve:\n%s", c.kind.name, c.args, err, errOut, errOf())
			}
			qps := o.qps()
			title := (&perf.TestInfo{Verb: c.kind.verb, BW: true, Bidir: o.Bidir}).Title()
			if !strings.Contains(out.String(), title+"\n") || !bwRow(size, 50*qps, false).MatchString(out.String()) {
				t.Fatalf("no %q header or row:\n%s", title, out)
			}
			if !o.Bidir {
				return
			}
			half := max(size, os.Getpagesize())
			for q := range qps {
				at, from := qps*half+q*half, q*half
				if c.kind.verb == perf.VerbRead {
					at, from = from, at
				}
				for j := range size {
					if want := bufPattern(from+j, true); buf[at+j] != want {
						t.Fatalf("QP %d byte %d is %d, want serve's %d", q, j, buf[at+j], want)
					}
				}
			}
		})
	}
}

// TestBidirHint: the hint carries -b as b=0/1; serve takes it for the
// bandwidth tests, refuses it for the others and refuses a malformed one;
// a hint without b (a tbrdma from before -b) is a test without -b.
func TestBidirHint(t *testing.T) {
	f, _, _ := testFactory()
	h := parsePerftest(t, f, sendBWTest, "-b", "192.0.2.1").hint()
	if !strings.HasSuffix(h, " b=1") {
		t.Fatalf("hint %q lacks b=1", h)
	}
	for _, c := range []struct {
		hint  string
		bidir bool
		err   string // "": accepted
	}{
		{h, true, ""},
		{strings.TrimSuffix(h, " b=1"), false, ""},
		{strings.Replace(h, "b=1", "b=0", 1), false, ""},
		{strings.Replace(h, "b=1", "b=2", 1), false, `b="2": want 0..1`},
		{"tbtest=write-lat s=2 n=5 a=0 t=1 Q=0 r=0 o=0 A=FETCH_AND_ADD q=1 b=1", false, "-b is for the bandwidth tests only"},
	} {
		o, err := perftestFromHint(c.hint)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.hint, err)
		case c.err == "" && o.Bidir != c.bidir:
			t.Errorf("%q: Bidir %v, want %v", c.hint, o.Bidir, c.bidir)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want %q", c.hint, err, c.err)
		}
	}
}
