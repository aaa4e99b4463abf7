package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// masks replace what changes from run to run (timings, keys, versions)
// with fixed text before a rendering is compared with its golden file.
var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	// ping(8) lines and summary.
	{regexp.MustCompile(`time=\d[\d.]* ms`), "time=<rtt> ms"},
	{regexp.MustCompile(`time \d+ms`), "time <elapsed>ms"},
	{regexp.MustCompile(`= \d+\.\d+/\d+\.\d+/\d+\.\d+/\d+\.\d+ ms`), "= <min>/<avg>/<max>/<mdev> ms"},
	// ibv_rc_pingpong's summary (pingpong, demo): elapsed time and rates.
	{regexp.MustCompile(`in \d+\.\d+ seconds = \d+\.\d+ (Mbit/sec|usec/iter)`), "in #.## seconds = #.## $1"},
	// cat's summary on a terminal: the elapsed time and the rate (whose
	// unit follows its size).
	{regexp.MustCompile(`in \d+\.\d+ s, \d+(\.\d+)? [KMGT]?i?B/s`), "in #.## s, <rate>/s"},
	// JSON: raw nanoseconds, rates.
	{regexp.MustCompile(`"(rtt_ns|time_ns|min_ns|avg_ns|max_ns|mdev_ns|t_min_ns|t_max_ns|t_typical_ns|t_avg_ns|t_stdev_ns|p99_ns|p999_ns|bw_peak_bps|bw_avg_bps|msg_rate_pps)":[-\d.e+]+`), `"$1":0`},
	// perftest, ibv_rc_pingpong: PSN, RKey and VAddr are random (QPNs
	// are not: a process's first QP is 0x11).
	{regexp.MustCompile(`(PSN|RKey|VAddr) 0x[0-9a-f]+`), "$1 0x…"},
	// version: the toolchain, platform and revision of this build.
	{regexp.MustCompile(`(?m)^tbrdma (\S+)( \([0-9a-f]+(\+dirty)?\))?$`), "tbrdma <version>"},
	{regexp.MustCompile(`(?m)^go\d\S* \w+/\w+$`), "<go version> <os>/<arch>"},
	{regexp.MustCompile(`"(version|commit|go_version|os|arch|ver)":"[^"]*"`), `"$1":"…"`},
	{regexp.MustCompile(`"modified":(true|false),`), ``},
}

// perftestRow is a row of perftest's result table: size, iterations and
// the figures, which are timings.
var (
	perftestRow = regexp.MustCompile(`(?m)^ \d+\s+\d+\s+\d.*$`)
	figure      = regexp.MustCompile(`\d+\.\d+`)
	spaces      = regexp.MustCompile(`[ \t]+`)
)

func mask(s string) string {
	for _, m := range masks {
		s = m.re.ReplaceAllString(s, m.with)
	}
	s = perftestRow.ReplaceAllStringFunc(s, func(row string) string {
		// The columns' widths (and whether the row ends in a space) follow
		// the figures' digits: one space between columns, none at the end.
		return strings.TrimRight(spaces.ReplaceAllString(figure.ReplaceAllString(row, "#.##"), " "), " ")
	})
	// --csv of the test commands: the cells after iterations are figures.
	if strings.HasPrefix(s, "schemaVersion,test,role,bytes,iterations,") {
		lines := strings.Split(s, "\n")
		for i := 1; i < len(lines); i++ {
			cells := strings.Split(lines[i], ",")
			for j := 5; j < len(cells); j++ {
				if cells[j] != "" {
					cells[j] = "#"
				}
			}
			lines[i] = strings.Join(cells, ",")
		}
		s = strings.Join(lines, "\n")
	}
	return s
}

// golden compares got (masked) with testdata/name, or writes it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = mask(got)
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run Golden -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -run Golden -update rewrites it after a deliberate change):\n--- got:\n%s\n--- want:\n%s",
			name, quoteANSI(got), quoteANSI(string(want)))
	}
}

// quoteANSI makes escape sequences visible in failure messages.
func quoteANSI(s string) string { return strings.ReplaceAll(s, "\x1b", `\e`) }

// checkStyled checks a terminal rendering: styled (escape sequences), and
// the same text as the pipe rendering once they are stripped.
func checkStyled(t *testing.T, what, tty, plain string) {
	t.Helper()
	if !strings.Contains(tty, "\x1b[") {
		t.Errorf("%s on a terminal is not styled:\n%s", what, tty)
	}
	if got := ansi.Strip(tty); mask(got) != mask(plain) {
		t.Errorf("%s on a terminal, without its styles, differs from the pipe rendering:\n--- terminal:\n%s\n--- pipe:\n%s", what, got, plain)
	}
}

// checkNoColor checks that NO_COLOR and --no-color give the pipe rendering
// on a terminal.
func checkNoColor(t *testing.T, l *link, ns, plain string, args ...string) {
	t.Helper()
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{[]string{"NO_COLOR=1"}, args},
		{nil, append([]string{"--no-color"}, args...)},
	} {
		r := runTTY(t, l, ns, c.env, c.args...)
		if r.code != 0 {
			t.Fatalf("%v %v: %v", c.env, c.args, r)
		}
		if strings.Contains(r.stdout, "\x1b") || mask(r.stdout) != mask(plain) {
			t.Errorf("%v tbrdma %s on a terminal: want the plain rendering, got:\n%s", c.env, strings.Join(c.args, " "), quoteANSI(r.stdout))
		}
	}
}

// TestGoldenVersion needs no namespace.
func TestGoldenVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := tbrdma(t)
	plain := runPlain(t, bin, "version")
	golden(t, "version.txt", plain)
	golden(t, "version.json", runPlain(t, bin, "version", "--json"))
	r := runTTY(t, nil, "", nil, "version")
	if r.stdout != plain {
		t.Errorf("version on a terminal %q, want %q (it has nothing to style)", r.stdout, plain)
	}
}

func runPlain(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("tbrdma %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// TestGoldenRenderings: devices, peers, ping, and the perftest table, in
// a pipe, on a terminal, in JSON and CSV, on a link whose addresses and
// MACs are fixed.
func TestGoldenRenderings(t *testing.T) {
	needNetns(t)
	needHostname(t)
	l := newLink(t)
	if !l.ipv6 {
		t.Skip("no IPv6 in the namespaces: the goldens list link-local GIDs and addresses")
	}
	progress("golden renderings")

	t.Run("devices", func(t *testing.T) {
		r := l.run(t, l.nsA, 10*time.Second, "devices")
		if r.code != 0 {
			t.Fatal(r)
		}
		golden(t, "devices.txt", r.stdout)
		tty := runTTY(t, l, l.nsA, nil, "devices")
		golden(t, "devices.tty", tty.stdout)
		checkStyled(t, "devices", tty.stdout, r.stdout)
		checkNoColor(t, l, l.nsA, r.stdout, "devices")
		r = l.run(t, l.nsA, 10*time.Second, "devices", "--json")
		golden(t, "devices.json", r.stdout)
		r = l.run(t, l.nsA, 10*time.Second, "devices", "-v")
		golden(t, "devices-v.txt", r.stdout)
	})

	serve := l.start(t, l.nsB, "lab-b", "serve")
	serve.waitLine(t, "advertising", 10*time.Second)

	t.Run("peers", func(t *testing.T) {
		r := l.run(t, l.nsA, 15*time.Second, "peers", "--timeout", "3s")
		if r.code != 0 {
			t.Fatal(r)
		}
		golden(t, "peers.txt", r.stdout)
		r = l.run(t, l.nsA, 15*time.Second, "peers", "--timeout", "3s", "--json")
		golden(t, "peers.json", r.stdout)
	})

	t.Run("ping", func(t *testing.T) {
		args := []string{"ping", "-c", "2", "-i", "0", "lab-b"}
		r := l.run(t, l.nsA, 30*time.Second, args...)
		if r.code != 0 {
			t.Fatal(r)
		}
		golden(t, "ping.txt", r.stdout)
		tty := runTTY(t, l, l.nsA, nil, args...)
		golden(t, "ping.tty", tty.stdout)
		checkStyled(t, "ping", tty.stdout, r.stdout)
		checkNoColor(t, l, l.nsA, r.stdout, args...)
		r = l.run(t, l.nsA, 30*time.Second, append(args, "--json")...)
		golden(t, "ping.json", r.stdout)
	})

	serve.cmd.Process.Signal(syscall.SIGTERM)
	serve.wait(t, 15*time.Second)

	for _, c := range []struct {
		file string
		args []string
	}{
		{"write-bw.txt", []string{"write-bw", "-n", "200", "-s", "4096"}},
		{"write-bw.csv", []string{"write-bw", "-n", "200", "-s", "4096", "--csv"}},
		{"write-bw.json", []string{"write-bw", "-n", "200", "-s", "4096", "--json"}},
		{"read-lat.txt", []string{"read-lat", "-n", "100"}},
		{"read-lat.csv", []string{"read-lat", "-n", "100", "--csv"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			srv := l.start(t, l.nsB, "", c.args...)
			l.waitListenTCP(t, l.nsB, 18515, srv)
			r := l.run(t, l.nsA, 60*time.Second, append(c.args, l.addrB)...)
			if r.code != 0 {
				t.Fatal(r)
			}
			srv.wait(t, 30*time.Second)
			golden(t, c.file, r.stdout)
		})
	}
}

// TestUsageExit: a wrong flag or command prints the usage on stderr and
// exits 2; --help exits 0 with the usage on stdout.
func TestUsageExit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := tbrdma(t)
	for _, args := range [][]string{{"ping", "--no-such-flag", "x"}, {"no-such-command"}, {"ping", "-c", "-1", "x"}, {"completion", "tcsh"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = cleanEnv()
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		code := exitCode(cmd.Run())
		if code != 2 || out.Len() != 0 || !strings.HasPrefix(errOut.String(), "tbrdma: ") || !strings.Contains(errOut.String(), "Usage:") {
			t.Errorf("tbrdma %s: exit %d, stdout %q, stderr %q; want exit 2, the error and the usage on stderr", strings.Join(args, " "), code, out.String(), errOut.String())
		}
	}
	out := runPlain(t, bin, "ping", "--help")
	if !strings.Contains(out, "Usage:\n  tbrdma ping [flags] <peer>") {
		t.Errorf("ping --help:\n%s", out)
	}
}
