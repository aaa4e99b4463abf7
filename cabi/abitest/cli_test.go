//go:build tbrdma_abitest

package abitest

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

// tbArgs are tbrdma's flags for a perftest twin: the same test flags as
// stock's, --bind for the device and the side channel, --timeout so that
// tbrdma gives up on its own (with a message) before the pairing's
// timeout kills it.
func tbArgs(tb string, pt pfTool, cm, all bool, iters int, bind string) []string {
	a := []string{tb, pt.tb, "--bind", bind, "--timeout", "25s"}
	if all {
		a[len(a)-1] = "80s"
	}
	if cm {
		a = append(a, "-R")
	} else {
		a = append(a, "-x", "1")
	}
	a = append(a, "-F", "-n", strconv.Itoa(iters))
	if all {
		a = append(a, "-a")
	}
	return append(a, pt.extra...)
}

// TestPerftestCLI pairs each perftest program over the library with its
// tbrdma CLI twin (tbrdma write-bw, read-bw, send-bw, write-lat,
// read-lat, send-lat, atomic-lat) in both roles, over TCP and with -R,
// and two -a sweeps (write-bw, send-bw) in both roles. (perftest spends
// about 0.2 s of CPU per result row sampling the CPU frequency, so a
// sweep costs it 5 s or more: the latency sweeps are in TestPerftest.)
func TestPerftestCLI(t *testing.T) {
	need(t, "ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat")
	l := NewLink(t)
	tb := tbrdmaBin(t)
	const iters, allIters = 20, 5
	var runs []pfRun
	add := func(pt pfTool, cm, all bool) {
		n := iters
		name := pt.label()
		if all {
			n = allIters
			name += "-all"
		}
		if cm {
			name += "-rdma_cm"
		}
		stock := stockArgs(pt, cm, all, n)
		runs = append(runs,
			pfRun{name: name + "-lib-server", t: pt, cm: cm, all: all, iters: n, size: pt.size,
				srv: Lib(stock...), cli: Native(with(tbArgs(tb, pt, cm, all, n, l.AddrB), l.AddrA)...),
				stockSrv: true},
			pfRun{name: name + "-tbrdma-server", t: pt, cm: cm, all: all, iters: n, size: pt.size,
				srv: Native(tbArgs(tb, pt, cm, all, n, l.AddrA)...), cli: Lib(with(stock, l.AddrA)...),
				stockCli: true})
	}
	for _, cm := range []bool{false, true} {
		for _, pt := range pfTools {
			add(pt, cm, false)
		}
	}
	for _, pt := range pfTools {
		if pt.tool == "ib_write_bw" || pt.tool == "ib_send_bw" {
			add(pt, false, true)
		}
	}
	for _, r := range runs {
		r.run(t, l)
	}
}

// cmCase is one pairing of an rdma_cm program, judged by exit statuses
// and what each side must print.
type cmCase struct {
	name               string
	srv, cli           End
	ready              Ready    // default: CMListening
	srvWant, cliWant   []string // regexps, with the count of lines each must match
	srvCount, cliCount []int
}

func runCM(t *testing.T, l *Link, cases []cmCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ready := c.ready
			if ready == nil {
				ready = CMListening(200 * time.Millisecond)
			}
			p := RunPair(t, l, c.name, 40*time.Second, c.srv, ready, c.cli)
			if !p.OK() {
				t.Fatalf("%s: not both exit 0\n%s", c.name, p.Dump())
			}
			for _, s := range []struct {
				role  string
				out   string
				want  []string
				count []int
			}{{"server", p.Srv.Out, c.srvWant, c.srvCount}, {"client", p.Cli.Out, c.cliWant, c.cliCount}} {
				for i, w := range s.want {
					if n := len(regexp.MustCompile(w).FindAllString(s.out, -1)); n != s.count[i] {
						t.Errorf("%s: %s: %d lines match %s, want %d", c.name, s.role, n, w, s.count[i])
					}
				}
			}
			if t.Failed() {
				t.Logf("%s", p.Dump())
			}
		})
	}
}

// TestUdaddyCLI runs librdmacm's udaddy (UD through rdma_cm's UDP port
// space: SIDR) over the library against tbrdma udaddy in both roles.
// (Library on both ends, rping and rping against tbrdma ping and serve:
// rdmacm_test.go.)
func TestUdaddyCLI(t *testing.T) {
	need(t, "udaddy")
	l := NewLink(t)
	tb := tbrdmaBin(t)
	done := []string{`(?m)^data transfers complete$`, `(?m)^test complete$`}
	status := []string{`(?m)^data transfers complete$`, `(?m)^test complete$`, `(?m)^return status 0$`}
	runCM(t, l, []cmCase{
		{name: "udaddy/lib-server-tbrdma-client", srv: Lib("udaddy", "-b", l.AddrA),
			cli:     Native(tb, "udaddy", "-b", l.AddrB, "-s", l.AddrA, "-W", "20"),
			srvWant: status, srvCount: []int{1, 1, 1}, cliWant: done, cliCount: []int{1, 1}},
		{name: "udaddy/tbrdma-server-lib-client", srv: Native(tb, "udaddy", "-b", l.AddrA, "-W", "20"),
			ready:   OutputReady("listening on " + l.AddrA + " port 7174"),
			cli:     Lib("udaddy", "-b", l.AddrB, "-s", l.AddrA),
			srvWant: done, srvCount: []int{1, 1}, cliWant: status, cliCount: []int{1, 1, 1}},
	})
}
