package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// A one-test server (write-bw, read-lat, … without "tbrdma serve") asks a
// tbrdma client for its test hint as serve does, compares it with its own
// test and flags, and refuses a client it cannot run with (perf.Refuse):
// one line that says what differs and what to run, which the client
// prints as its error too. Without the check the two ends run different
// loops and wait for each other forever (docs/cli.md, "Mismatched client
// and server").

// refuseLinger bounds how long a refusing server waits for the client to
// read the refusal and close.
const refuseLinger = 2 * time.Second

// mismatchFlags are the hint fields a pairing must agree on, as the
// command's flags.
type mismatchFlags struct {
	test string
	all  bool
	size int
	n    int
	a    string
}

func (m mismatchFlags) String() string {
	b := []string{m.test}
	if m.all {
		b = append(b, "-a")
	} else {
		b = append(b, "-s "+strconv.Itoa(m.size))
	}
	return strings.Join(b, " ")
}

// perftestMismatch returns, for a one-test server with options o and a
// client that sent hint h, why they cannot run together ("" when they
// can). The server side of a test needs:
//   - the same test (each runs its own sequence of exchanges and loops);
//   - the same -a (an -a client runs sizes the server's exchange does not
//     follow, or that overrun its buffer);
//   - a buffer (-s) at least as large as the client's messages; write-lat
//     and send-lat, where the server sends as well, the same -s;
//   - where the server counts messages (send-bw, send-lat, write-lat,
//     atomic-lat) the same -n, and for atomic-lat the same -A; send-bw,
//     write-lat and send-lat the same -D, send-bw the same
//     --run_infinitely, atomic-lat -D or not (timedMismatch), and then
//     any -n;
//   - the same -q (each end exchanges one description per QP);
//   - the same -c (QPs of different types do not talk to each other);
//   - the same -b (with it both ends run traffic and exchange reports
//     after each size).
func perftestMismatch(o *perftestOptions, h string) string {
	test, kv, err := parseHint(h)
	if err != nil {
		return fmt.Sprintf("%v (a tbrdma client of another version?): start the server with the client's command and flags, or use tbrdma serve", err)
	}
	if servedKinds[test] == nil {
		return fmt.Sprintf("the client runs %q, which is not a perftest test this server knows: start the server with the client's command, or use tbrdma serve", test)
	}
	cl := mismatchFlags{test: test, all: kv["a"] == "1", a: kv["A"]}
	cl.size, _ = strconv.Atoi(kv["s"])
	cl.n, _ = strconv.Atoi(kv["n"])
	sv := mismatchFlags{test: o.Kind.name, all: o.All, size: o.Size, n: o.Iters, a: o.AtomicType}
	k := o.Kind
	var extra []string // differing flags beyond the test and the sizes
	bad := cl.test != sv.test || cl.all != sv.all
	sameSize := k.verb == perf.VerbSend && !k.bw || k.verb == perf.VerbWrite && !k.bw
	if !bad && !cl.all && k.verb != perf.VerbAtomic {
		bad = cl.size > sv.size || sameSize && cl.size != sv.size
	}
	counts := k.verb == perf.VerbSend || k.verb == perf.VerbAtomic || k.verb == perf.VerbWrite && !k.bw
	timed := cl.test == sv.test && (kv["D"] != "" || o.Duration > 0)
	if cl.test == sv.test && counts && cl.n != sv.n && !timed {
		extra = append(extra, fmt.Sprintf("-n %d, this server -n %d", cl.n, sv.n))
	}
	if why := timedMismatch(o, kv); cl.test == sv.test && why != "" {
		extra = append(extra, why)
	}
	if cl.test == sv.test && k.verb == perf.VerbAtomic && cl.a != sv.a {
		extra = append(extra, fmt.Sprintf("-A %s, this server -A %s", cl.a, sv.a))
	}
	if c := kv["c"]; cl.test == sv.test && c != "" && c != o.Conn {
		extra = append(extra, fmt.Sprintf("-c %s, this server -c %s", c, o.Conn))
	} else if cl.test == sv.test && c == "" && o.Conn != "RC" {
		extra = append(extra, fmt.Sprintf("-c RC (a tbrdma without -c), this server -c %s", o.Conn))
	}
	if cl.test == sv.test {
		switch q, err := hintQPs(kv); {
		case err != nil:
			extra = append(extra, fmt.Sprintf("-q %s (%v), this server -q %d", kv["q"], err, o.qps()))
		case q != o.qps():
			extra = append(extra, fmt.Sprintf("-q %d, this server -q %d", q, o.qps()))
		}
	}
	if cl.test == sv.test && k.bw {
		switch b, err := hintBidir(kv); {
		case err != nil:
			extra = append(extra, fmt.Sprintf("b=%s (%v), this server %s", kv["b"], err, bidirWord(o.Bidir)))
		case b != o.Bidir:
			extra = append(extra, fmt.Sprintf("%s, this server %s", bidirWord(b), bidirWord(o.Bidir)))
		}
	}
	if !bad && len(extra) == 0 {
		return ""
	}
	var what string
	if bad {
		what = fmt.Sprintf("the client runs %v, this server %v", cl, sv)
		if len(extra) > 0 {
			what += "; the client " + strings.Join(extra, "; the client ")
		}
	} else {
		what = "the client runs " + sv.test + " " + strings.Join(extra, "; the client ")
	}
	return what + ": start the server with the client's flags, or use tbrdma serve"
}

// bidirWord names a side's -b for mismatch messages.
func bidirWord(b bool) string {
	if b {
		return "-b (bidirectional)"
	}
	return "no -b (unidirectional)"
}

// refuseClient refuses the client on conn with reason and returns the
// server's error, which says the same.
func refuseClient(conn net.Conn, reason string) error {
	from := remoteAddr(conn)
	if err := perf.Refuse(conn, reason, refuseLinger); err != nil {
		return fmt.Errorf("client %v: %s (and the refusal could not be sent: %v)", from, reason, err)
	}
	return fmt.Errorf("refused client %v: %s", from, reason)
}

// describe is the pingpong command with the flags a pairing must agree on.
func (o *pingpongOptions) describe() string {
	ud := ""
	if o.UD {
		ud = " --ud"
	}
	return fmt.Sprintf("pingpong%s -s %d -n %d", ud, o.Size, o.Iters)
}

// pingpongMismatch returns, for a one-test pingpong server with options o
// and a client that sent hint h, why they cannot run together ("" when
// they can): both ends send and receive -s bytes -n times, over the same
// QP type (RC, or UD with --ud).
func pingpongMismatch(o *pingpongOptions, h string) string {
	test, kv, err := parseHint(h)
	if err != nil {
		return fmt.Sprintf("%v (a tbrdma client of another version?): start the server with the client's command and flags, or use tbrdma serve", err)
	}
	if test != "pingpong" {
		return fmt.Sprintf("the client runs %s, this server %s: start the server with the client's command, or use tbrdma serve", test, o.describe())
	}
	cl := &pingpongOptions{UD: kv["ud"] == "1"}
	cl.Size, _ = strconv.Atoi(kv["s"])
	cl.Iters, _ = strconv.Atoi(kv["n"])
	if cl.UD == o.UD && cl.Size == o.Size && cl.Iters == o.Iters {
		return ""
	}
	what := fmt.Sprintf("the client runs %s, this server %s: start the server with the client's flags", cl.describe(), o.describe())
	if cl.UD {
		return what // serve does not host --ud clients
	}
	return what + ", or use tbrdma serve"
}
