package cli

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/verbs"
)

// connRun is what connPair saw of a run: each side's output, buffer and
// error.
type connRun struct {
	sout, cout, serr, cerr string
	sbuf, cbuf             []byte
	serrv, cerrv           error
}

// connPair runs a one-test server and a client of k with args between
// two tbrdma ends and returns both sides' outputs and buffers. wrapClient,
// if set, wraps the client's UDP endpoint; aliveCheck, if set, shortens
// send-bw's wait for the next message over UC and UD.
func connPair(t *testing.T, k *perftestKind, args []string, wrapClient func(transport.Conn) transport.Conn, aliveCheck time.Duration) connRun {
	t.Helper()
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, so1, se1 := testFactory()
	cf, co1, ce1 := testFactory()
	if wrapClient != nil {
		cf.OpenDevice = func(a netip.Addr) (*verbs.Context, error) { return openDeviceWith(a, nil, wrapClient) }
	}
	so := parsePerftest(t, sf, k, append([]string{"--bind", sa.String(), "-p", "0"}, args...)...)
	so.aliveCheck = aliveCheck
	var r connRun
	so.Inspect = func(b []byte) { r.sbuf = bytes.Clone(b) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port, serrc := startServer(t, ctx, so)
	co := parsePerftest(t, cf, k, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, args...)...)
	co.Inspect = func(b []byte) { r.cbuf = bytes.Clone(b) }
	r.cerrv = runPerftest(ctx, co)
	r.serrv = <-serrc
	if ctx.Err() != nil {
		t.Fatalf("%s %v: still running after 60s", k.name, args)
	}
	r.sout, r.cout, r.serr, r.cerr = so1.String(), co1.String(), se1.String(), ce1.String()
	return r
}

// pattern is what a server's buffer holds before the run (perftest.setup).
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251 + 1)
	}
	return b
}

var mtuLine = regexp.MustCompile(`(?m)^ Mtu             : (\d+)\[B\]$`)

// TestPerftestConnTypes runs every test -c UC and -c UD apply to between
// two tbrdma ends: the header names the type, the rows count -n (on
// every QP), and the messages landed where perftest puts them (UD: behind
// the 40-byte GRH, whose IPv4 header is there).
func TestPerftestConnTypes(t *testing.T) {
	page := os.Getpagesize()
	for _, c := range []struct {
		kind  *perftestKind
		args  []string
		size  int // 0: -a
		iters int // per QP
		qps   int
	}{
		{writeBWTest, []string{"-c", "UC", "-n", "50", "-s", "65536", "-m", "1024"}, 65536, 50, 1},
		{writeBWTest, []string{"-c", "UC", "-n", "200", "-s", "4096", "-q", "2"}, 4096, 200, 2},
		{writeLatTest, []string{"-c", "UC", "-n", "20", "-s", "32"}, 32, 20, 1},
		{sendBWTest, []string{"-c", "UC", "-n", "50", "-s", "65536", "-m", "1024"}, 65536, 50, 1},
		{sendLatTest, []string{"-c", "UC", "-n", "20", "-s", "64"}, 64, 20, 1},
		{sendBWTest, []string{"-c", "UD", "-n", "50", "-s", "1024"}, 1024, 50, 1},
		{sendBWTest, []string{"-c", "UD", "-n", "30", "-s", "512", "-q", "3"}, 512, 30, 3},
		{sendLatTest, []string{"-c", "UD", "-n", "20", "-s", "64"}, 64, 20, 1},
		{sendBWTest, []string{"-c", "UD", "-a", "-n", "5"}, 0, 5, 1},
		{sendLatTest, []string{"-c", "UD", "-a", "-n", "5"}, 0, 5, 1},
		{writeLatTest, []string{"-c", "UC", "-n", "10", "-s", "65536", "-m", "1024"}, 65536, 10, 1},
	} {
		t.Run(c.kind.name+"/"+strings.Join(c.args, ""), func(t *testing.T) {
			if raceEnabled && c.kind == writeLatTest {
				t.Skip("write-lat polls memory the engine writes: a data race by design, as in perftest")
			}
			r := connPair(t, c.kind, c.args, nil, 0)
			if r.serrv != nil || r.cerrv != nil {
				t.Fatalf("server: %v; client: %v\nserver stderr:\n%s\nclient stderr:\n%s", r.serrv, r.cerrv, r.serr, r.cerr)
			}
			conn := c.args[1]
			sizes := []int{c.size}
			if c.size == 0 {
				m := mtuLine.FindStringSubmatch(r.cout)
				if m == nil {
					t.Fatalf("no Mtu line:\n%s", r.cout)
				}
				sizes = nil
				for s := 2; s <= 1<<23; s *= 2 {
					if conn == "UD" && s > atoi(t, m[1]) {
						break
					}
					sizes = append(sizes, s)
				}
			}
			for side, out := range map[string]string{"server": r.sout, "client": r.cout} {
				if !strings.Contains(out, " Connection type : "+conn+"\t\t") {
					t.Errorf("%s: header lacks connection type %s:\n%s", side, conn, out)
				}
				for _, s := range sizes {
					row := latRow(s, c.iters)
					if c.kind.bw {
						row = bwRow(s, c.iters*c.qps, side == "server" && c.kind.verb == perf.VerbSend)
					}
					if !c.kind.bw || c.kind.verb == perf.VerbSend || side == "client" {
						if !row.MatchString(out) {
							t.Errorf("%s: no row for %d bytes:\n%s", side, s, out)
						}
					}
				}
				if conn == "UD" && c.size == 0 {
					if big := sizes[len(sizes)-1] * 2; strings.Contains(out, "\n "+itoa(big)+" ") {
						t.Errorf("%s: a row above the MTU (%d bytes):\n%s", side, big, out)
					}
				}
			}
			note := "" // -a over UD: perftest's note as the sizes stop at the MTU
			if conn == "UD" && c.size == 0 {
				note = " Max msg size in UD is MTU " + itoa(sizes[len(sizes)-1]) + "\n Changing to this MTU\n"
			}
			if r.serr != note || r.cerr != note {
				t.Errorf("stderr: server %q, client %q", r.serr, r.cerr)
			}
			last := sizes[len(sizes)-1]
			grh := 0
			if conn == "UD" {
				grh = perf.UDGRHSize
			}
			half := max(last+grh, page) // the buffer's slices: -s, or -a's largest
			if c.size == 0 {
				half = 1<<23 + grh
			}
			switch c.kind {
			case writeBWTest:
				// Not checked: nothing tells a UC responder that the
				// WRITEs have landed when the client's report comes (the
				// client's completions are local, as in perftest), and the
				// server closes its device then: on a loaded machine every
				// WRITE may still be in its socket. The rows above, the
				// loss test (TestPerftestUCLoss) and the interop rows cover
				// UC WRITEs.
			case sendBWTest: // each QP's receives behind the GRH room
				for q := range c.qps {
					at := c.qps*half + q*half + grh
					if !bytes.Equal(r.sbuf[at:at+last], make([]byte, last)) {
						t.Errorf("QP %d: server's receive: % x…, want the client's zeros", q, r.sbuf[at:at+8])
					}
					if grh > 0 && r.sbuf[at-20] != 0x45 {
						t.Errorf("QP %d: no IPv4 header in the GRH room: % x", q, r.sbuf[at-grh:at])
					}
				}
			case sendLatTest: // the client received the server's pattern
				if got := r.cbuf[half+grh : half+grh+last]; !bytes.Equal(got, pattern(last)) {
					t.Errorf("client's receive: % x…, want the server's pattern", got[:min(8, last)])
				}
			case writeLatTest: // the server's pattern, but the counter byte
				if got := r.cbuf[half : half+last-1]; !bytes.Equal(got, pattern(last-1)) {
					t.Errorf("client's buffer: % x…, want the server's pattern", got[:min(8, len(got))])
				}
			}
		})
	}
}

// TestPerftestUDDefaultSize checks perftest's rule for a UD message larger
// than the MTU: send-bw's default -s (65536) becomes the MTU on both ends,
// with perftest's note; a larger -s given on the command line fails.
func TestPerftestUDDefaultSize(t *testing.T) {
	r := connPair(t, sendBWTest, []string{"-c", "UD", "-n", "20", "-m", "1024"}, nil, 0)
	if r.serrv != nil || r.cerrv != nil {
		t.Fatalf("server: %v; client: %v", r.serrv, r.cerrv)
	}
	for side, s := range map[string]string{"server": r.serr, "client": r.cerr} {
		if s != " Max msg size in UD is MTU 1024\n Changing to this MTU\n" {
			t.Errorf("%s's stderr %q, want perftest's note", side, s)
		}
	}
	if !bwRow(1024, 20, false).MatchString(r.cout) || !bwRow(1024, 20, true).MatchString(r.sout) {
		t.Errorf("no 1024-byte rows:\nserver:\n%s\nclient:\n%s", r.sout, r.cout)
	}
	r = connPair(t, sendLatTest, []string{"-c", "UD", "-n", "20", "-m", "1024", "-s", "2048"}, nil, 0)
	if r.cerrv == nil || !strings.Contains(r.cerrv.Error(), "-s 2048 with -c UD: a UD message is one packet, and the MTU agreed with the peer is 1024 bytes") {
		t.Errorf("client: %v, want the MTU refusal", r.cerrv)
	}
	if r.serrv == nil {
		t.Errorf("server: no error")
	}
}

// dropNth is a client endpoint that loses the nth UC request packet it
// sends (1-based), as a lossy link would.
type dropNth struct {
	transport.Conn
	n       int64
	seen    atomic.Int64
	dropped atomic.Int64
}

func (d *dropNth) WriteBatch(msgs []transport.Message) (int, error) {
	keep := make([]transport.Message, 0, len(msgs))
	for _, m := range msgs {
		// UC opcodes: 0x20..0x2b (BTH byte 0).
		if len(m.Buf) > 0 && m.Buf[0]&0xe0 == 0x20 && d.seen.Add(1) == d.n {
			d.dropped.Add(1)
			continue
		}
		keep = append(keep, m)
	}
	if len(keep) > 0 {
		if _, err := d.Conn.WriteBatch(keep); err != nil {
			return 0, err
		}
	}
	return len(msgs), nil
}

// TestPerftestUCLoss loses one packet of a UC run, as a lossy link does:
// UC does not resend it, so the message is lost. write-bw completes (its
// requests complete once sent; the server does not count them); send-bw's
// server misses a receive and gives up once none has come for its alive
// check (perftest's check_alive, shortened here), with perftest's counts,
// and the client, done sending, fails at the closing handshake: neither
// waits forever.
func TestPerftestUCLoss(t *testing.T) {
	var mu sync.Mutex
	var drops []*dropNth
	wrap := func(c transport.Conn) transport.Conn {
		d := &dropNth{Conn: c, n: 10}
		mu.Lock()
		drops = append(drops, d)
		mu.Unlock()
		return d
	}
	dropped := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		var n int64
		for _, d := range drops {
			n += d.dropped.Load()
		}
		drops = nil
		return n
	}
	r := connPair(t, writeBWTest, []string{"-c", "UC", "-n", "50", "-s", "4096", "-m", "1024"}, wrap, 0)
	if r.serrv != nil || r.cerrv != nil {
		t.Fatalf("write-bw: server: %v; client: %v", r.serrv, r.cerrv)
	}
	if n := dropped(); n != 1 {
		t.Fatalf("write-bw: %d packets dropped, want 1", n)
	}
	if !bwRow(4096, 50, false).MatchString(r.cout) {
		t.Errorf("write-bw client: no row:\n%s", r.cout)
	}

	r = connPair(t, sendBWTest, []string{"-c", "UC", "-n", "50", "-s", "4096", "-m", "1024"}, wrap, 300*time.Millisecond)
	if n := dropped(); n != 1 {
		t.Fatalf("send-bw: %d packets dropped, want 1", n)
	}
	if !errors.Is(r.serrv, perf.ErrReported) {
		t.Errorf("send-bw server: %v, want the alive check's failure", r.serrv)
	}
	if !strings.Contains(r.serr, " Total Received=49, Total Iters Required=50\n") || !strings.Contains(r.serr, "a lost message is not resent") {
		t.Errorf("send-bw server's stderr lacks the counts and the reason:\n%s", r.serr)
	}
	if bwRow(4096, 50, true).MatchString(r.sout) {
		t.Errorf("send-bw server printed a row for a run it did not complete:\n%s", r.sout)
	}
	if r.cerrv == nil {
		t.Errorf("send-bw client: no error after the server gave up")
	}
	if !bwRow(4096, 50, false).MatchString(r.cout) {
		t.Errorf("send-bw client: no row for its sends:\n%s", r.cout)
	}
}

// TestPerftestConnRefused checks -c's refusals: perftest's rules (UC not
// for READ and atomics, UD for SEND only) and what tbrdma does not run
// over UC or UD, each naming the way out.
func TestPerftestConnRefused(t *testing.T) {
	for _, c := range []struct {
		kind *perftestKind
		args []string
		want string
	}{
		{readBWTest, []string{"-c", "UC"}, "invalid -c UC: UC carries no READs or atomics; perftest runs ib_read_bw over RC only"},
		{atomicLatTest, []string{"-c", "UD"}, "invalid -c UD: UD carries SENDs only, as perftest allows it for send-bw and send-lat; run atomic-lat with -c RC or UC"},
		{writeBWTest, []string{"-c", "UD"}, "invalid -c UD: UD carries SENDs only"},
		{sendBWTest, []string{"-c", "XRC"}, `invalid -c "XRC": send-bw runs over RC, UC or UD`},
		{writeLatTest, []string{"-c", "rc"}, `invalid -c "rc": write-lat runs over RC or UC`},
		{sendLatTest, []string{"-c", "UC", "-R"}, "-c UC works with the TCP exchange only, not with -R"},
		{sendBWTest, []string{"-c", "UD", "--large-segments"}, "--large-segments does not apply to -c UD"},
		{sendBWTest, []string{"-c", "UD", "--segment-size", "8192"}, "--large-segments does not apply to -c UD"},
		{sendLatTest, []string{"-c", "UD", "-s", "8192"}, "invalid -s 8192 with -c UD: a UD message is one packet"},
	} {
		t.Run(c.kind.name+"/"+strings.Join(c.args, ""), func(t *testing.T) {
			f, _, _ := testFactory()
			cmd := newCmdPerftest(f, c.kind, func(*perftestOptions) error { return nil })
			cmd.SetArgs(c.args)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.Execute()
			var fe *FlagError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want a flag error with %q", err, c.want)
			}
		})
	}
	// perftest's UC and UD default -r: -n, at most 16000.
	f, _, _ := testFactory()
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"-c", "UD", "-n", "1000"}, 1000},
		{[]string{"-c", "UC", "-n", "40000"}, 16000},
		{[]string{"-c", "UD", "-n", "100"}, 100},
		{[]string{"-c", "UC", "-n", "1000", "-r", "64"}, 64},
		{[]string{"-n", "1000"}, 512},
	} {
		if o := parsePerftest(t, f, sendBWTest, c.args...); o.RxDepth != c.want {
			t.Errorf("send-bw %v: -r %d, want %d", c.args, o.RxDepth, c.want)
		}
	}
	if o := parsePerftest(t, f, sendBWTest, "-c", "UD", "-s", "4096"); o.CQMod != 100 {
		t.Errorf("-c UD: -Q %d, want perftest's 100 (kept over UD)", o.CQMod)
	}
}

// TestPerftestConnMismatch: a one-test server facing a client of another
// -c refuses it at once, and both ends say what differs; serve hosts UC
// and UD clients with their own -c.
func TestPerftestConnMismatch(t *testing.T) {
	f, _, _ := testFactory()
	srv := parsePerftest(t, f, sendBWTest, "-c", "UC")
	cl := parsePerftest(t, f, sendBWTest, "-c", "UD", "peer")
	if got := perftestMismatch(srv, cl.hint()); !strings.Contains(got, "the client runs send-bw -c UD, this server -c UC: start the server with the client's flags") {
		t.Errorf("UD client, UC server: %q", got)
	}
	if got := perftestMismatch(srv, "tbtest=send-bw s=65536 n=1000 a=0 t=128 Q=100 r=512 o=0 A=FETCH_AND_ADD q=1"); !strings.Contains(got, "-c RC (a tbrdma without -c), this server -c UC") {
		t.Errorf("client without c: %q", got)
	}
	if got := perftestMismatch(srv, parsePerftest(t, f, sendBWTest, "-c", "UC", "peer").hint()); got != "" {
		t.Errorf("same -c refused: %q", got)
	}
	// Between two ends: both fail at once, saying what differs.
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, _, _ := testFactory()
	cf, _, _ := testFactory()
	so := parsePerftest(t, sf, writeBWTest, "--bind", sa.String(), "-p", "0", "-n", "20")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	port, serrc := startServer(t, ctx, so)
	co := parsePerftest(t, cf, writeBWTest, "--bind", ca.String(), "-p", itoa(port), "-n", "20", "-c", "UC", sa.String())
	cerr := runPerftest(ctx, co)
	serr := <-serrc
	for side, err := range map[string]error{"server": serr, "client": cerr} {
		if err == nil || !strings.Contains(err.Error(), "the client runs write-bw -c UC, this server -c RC") {
			t.Errorf("%s: %v, want the -c refusal", side, err)
		}
	}
	// The hint's c round trip, and the hints serve refuses.
	for _, c := range []struct {
		hint string
		conn string // "": refused
	}{
		{cl.hint(), "UD"},
		{"tbtest=write-bw s=1 n=5 a=0 t=1 Q=1 r=0 o=0", "RC"},
		{"tbtest=write-lat s=1 n=5 a=0 t=1 Q=1 r=0 o=0 c=UC", "UC"},
		{"tbtest=write-bw s=1 n=5 a=0 t=1 Q=1 r=0 o=0 c=UD", ""},
		{"tbtest=read-lat s=1 n=5 a=0 t=1 Q=1 r=0 o=1 c=UC", ""},
		{"tbtest=send-bw s=1 n=5 a=0 t=1 Q=1 r=5 o=0 c=DC", ""},
	} {
		o, err := perftestFromHint(c.hint)
		switch {
		case c.conn == "" && err == nil:
			t.Errorf("%s: accepted", c.hint)
		case c.conn != "" && (err != nil || o.Conn != c.conn):
			t.Errorf("%s: %+v, %v; want -c %s", c.hint, o, err, c.conn)
		}
	}
}

// TestServeHostsConnTypes runs UC and UD clients against "tbrdma serve".
func TestServeHostsConnTypes(t *testing.T) {
	sa, ca := rdmaAddr(t), rdmaAddr(t)
	stop, errOf := startServeLog(t, sa)
	waitServeLog(t, errOf, "port 18515 (TCP, pingpong and perftest clients)")
	for _, c := range []struct {
		args []string
		row  *regexp.Regexp
	}{
		{[]string{"write-bw", "-c", "UC", "-n", "50", "-s", "16384"}, bwRow(16384, 50, false)},
		{[]string{"send-bw", "-c", "UC", "-n", "50", "-s", "16384"}, bwRow(16384, 50, false)},
		{[]string{"send-bw", "-c", "UD", "-n", "50", "-s", "2048"}, bwRow(2048, 50, false)},
		{[]string{"send-lat", "-c", "UD", "-n", "50", "-s", "64"}, latRow(64, 50)},
		{[]string{"send-lat", "-c", "UC", "-n", "50", "-s", "64"}, latRow(64, 50)},
		{[]string{"write-lat", "-c", "UC", "-n", "50", "-s", "64"}, latRow(64, 50)},
	} {
		if raceEnabled && c.args[0] == "write-lat" {
			continue
		}
		f, out, errOut := testFactory()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		args := append(c.args, "--bind", ca.String(), sa.String())
		code := run(ctx, f, args)
		cancel()
		if code != ExitOK {
			t.Fatalf("tbrdma %s: exit %d\nstdout:\n%s\nstderr:\n%s\nserve:\n%s", strings.Join(args, " "), code, out, errOut, errOf())
		}
		if !c.row.MatchString(out.String()) || !strings.Contains(out.String(), " Connection type : "+c.args[2]) {
			t.Errorf("tbrdma %s: output lacks %v or the connection type:\n%s", strings.Join(args, " "), c.row, out)
		}
	}
	if code, _, serr := stop(); code != ExitOK {
		t.Errorf("serve exit %d:\n%s", code, serr)
	}
}
