package cli

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseFlagDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5", 5 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{"0", 0, true},
		{"5s", 5 * time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{"200ms", 200 * time.Millisecond, true},
		{"-1", 0, false},
		{"-1s", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"1e7", 0, false},
		{"5x", 0, false},
		{"", 0, false},
	} {
		got, err := parseFlagDuration(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("parseFlagDuration(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// TestTimeoutSyntax: every command's duration flags take both a bare
// number of seconds and a Go duration, and refuse negative values, as a
// usage error naming the flag.
func TestTimeoutSyntax(t *testing.T) {
	for _, args := range [][]string{
		{"write-bw", "--timeout"}, {"read-lat", "--timeout"}, {"pingpong", "--timeout"},
		{"peers", "--timeout"}, {"cat", "--timeout"}, {"ping", "-W"}, {"ping", "-i"}, {"ping", "-w"}, {"udaddy", "-W"},
	} {
		name := strings.Join(args, " ")
		for _, v := range []string{"5", "5s", "0.5", "1500ms"} {
			var got error
			f, _, _ := testFactory()
			cmd := newRootCmd(f)
			full := append(append([]string{}, args...), v, "--help")
			cmd.SetArgs(full)
			if _, got = cmd.ExecuteContextC(context.Background()); got != nil {
				t.Errorf("%s %s: %v", name, v, got)
			}
		}
		f, _, errOut := testFactory()
		if code := run(context.Background(), f, append(append([]string{}, args...), "-1s", "198.18.0.2")); code != ExitUsage ||
			!strings.Contains(errOut.String(), "invalid argument \"-1s\"") {
			t.Errorf("%s -1s: exit %d, want a usage error:\n%s", name, code, errOut)
		}
	}
}
