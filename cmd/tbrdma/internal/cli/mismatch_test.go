package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// TestPerftestMismatch checks which client hints a one-test server
// accepts, and that a refusal names both sides' flags and the way out.
func TestPerftestMismatch(t *testing.T) {
	srv := func(k *perftestKind, args ...string) *perftestOptions {
		f, _, _ := testFactory()
		return parsePerftest(t, f, k, args...)
	}
	cli := func(k *perftestKind, args ...string) string {
		f, _, _ := testFactory()
		return parsePerftest(t, f, k, append(args, "192.0.2.1")...).hint()
	}
	for _, c := range []struct {
		name string
		o    *perftestOptions
		hint string
		want []string // nil: accepted
	}{
		{"same", srv(writeBWTest), cli(writeBWTest), nil},
		{"smaller write", srv(writeBWTest), cli(writeBWTest, "-s", "4096"), nil},
		{"other -n, bandwidth", srv(writeBWTest, "-n", "10"), cli(writeBWTest, "-n", "20"), nil},
		{"other test", srv(writeBWTest), cli(readLatTest, "-a"),
			[]string{"the client runs read-lat -a, this server write-bw -s 65536", "tbrdma serve"}},
		{"larger write", srv(writeBWTest, "-s", "4096"), cli(writeBWTest),
			[]string{"the client runs write-bw -s 65536, this server write-bw -s 4096"}},
		{"-a client", srv(readBWTest), cli(readBWTest, "-a"), []string{"read-bw -a, this server read-bw -s 65536"}},
		{"-a server", srv(readBWTest, "-a"), cli(readBWTest), []string{"read-bw -s 65536, this server read-bw -a"}},
		{"write-lat size", srv(writeLatTest, "-s", "64"), cli(writeLatTest, "-s", "32"), []string{"write-lat -s 32, this server write-lat -s 64"}},
		{"send-lat -n", srv(sendLatTest, "-n", "50"), cli(sendLatTest, "-n", "60"), []string{"send-lat -n 60, this server -n 50"}},
		{"send-bw -n", srv(sendBWTest, "-n", "50"), cli(sendBWTest, "-n", "60"), []string{"send-bw -n 60, this server -n 50"}},
		{"atomic -A", srv(atomicLatTest), cli(atomicLatTest, "-A", "CMP_AND_SWAP"),
			[]string{"atomic-lat -A CMP_AND_SWAP, this server -A FETCH_AND_ADD"}},
		{"unknown test", srv(writeBWTest), "tbtest=write-xx s=1", []string{`"write-xx"`}},
		{"malformed", srv(writeBWTest), "tbtest=write-bw s", []string{"malformed test hint"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := perftestMismatch(c.o, c.hint)
			if c.want == nil {
				if got != "" {
					t.Errorf("refused %q: %s", c.hint, got)
				}
				return
			}
			for _, w := range append(c.want, "start the server") {
				if !strings.Contains(got, w) {
					t.Errorf("refusal %q lacks %q", got, w)
				}
			}
		})
	}
}

func TestPingpongMismatch(t *testing.T) {
	parse := func(args ...string) *pingpongOptions {
		f, _, _ := testFactory()
		return parsePingpong(t, f, args...)
	}
	hint := func(args ...string) string { return parse(append(args, "192.0.2.1")...).hint() }
	for _, c := range []struct {
		name string
		o    *pingpongOptions
		hint string
		want string // "": accepted
	}{
		{"same", parse(), hint(), ""},
		{"size", parse(), hint("-s", "8192"), "the client runs pingpong -s 8192 -n 1000, this server pingpong -s 4096 -n 1000: start the server with the client's flags, or use tbrdma serve"},
		{"iterations", parse("-n", "10"), hint("-n", "20"), "the client runs pingpong -s 4096 -n 20, this server pingpong -s 4096 -n 10"},
		{"UD client", parse(), hint("--ud", "-s", "1024"), "the client runs pingpong --ud -s 1024 -n 1000, this server pingpong -s 4096 -n 1000: start the server with the client's flags"},
		{"UD server", parse("--ud", "-s", "1024"), hint("-s", "1024"), "the client runs pingpong -s 1024 -n 1000, this server pingpong --ud -s 1024 -n 1000"},
		{"perftest hint", parse(), "tbtest=write-bw s=1", "the client runs write-bw, this server pingpong -s 4096 -n 1000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := pingpongMismatch(c.o, c.hint)
			if c.want == "" && got != "" || !strings.Contains(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
			if c.name == "UD client" && strings.Contains(got, "tbrdma serve") {
				t.Errorf("%q points a --ud client at serve, which does not host it", got)
			}
		})
	}
}

// TestOneTestServerRefuses runs a mismatched pair in process: both ends
// fail with the server's reason, and neither waits for the other.
func TestOneTestServerRefuses(t *testing.T) {
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, _, _ := testFactory()
	cf, _, _ := testFactory()
	so := parsePerftest(t, sf, writeBWTest, "--bind", sa.String(), "-p", "0", "-n", "20", "-s", "4096")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, serr := startServer(t, ctx, so)
	co := parsePerftest(t, cf, writeBWTest, "--bind", ca.String(), "-p", itoa(port), "-n", "20", "-s", "65536", sa.String())
	cerr := runPerftest(ctx, co)
	const want = "the client runs write-bw -s 65536, this server write-bw -s 4096: start the server with the client's flags, or use tbrdma serve"
	if cerr == nil || !strings.Contains(cerr.Error(), want) || !perf.IsRefused(cerr) {
		t.Errorf("client: %v, want the refusal %q", cerr, want)
	}
	if err := <-serr; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("server: %v, want %q", err, want)
	}
	if ctx.Err() != nil {
		t.Error("the pair ran into the test's timeout")
	}
}
