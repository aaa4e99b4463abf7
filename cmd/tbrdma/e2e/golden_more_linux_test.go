package e2e

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// subcommands lists the commands of the root's help ("Available
// Commands:"), so that a new command gets a help golden without a change
// here.
func subcommands(t *testing.T, rootHelp string) []string {
	t.Helper()
	_, after, ok := strings.Cut(rootHelp, "Available Commands:\n")
	if !ok {
		t.Fatalf("tbrdma --help has no \"Available Commands:\":\n%s", rootHelp)
	}
	var cmds []string
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		if f := strings.Fields(line); len(f) > 0 && f[0] != "help" {
			cmds = append(cmds, f[0])
		}
	}
	return cmds
}

// TestGoldenHelp: the help of the root and of every command (pipe
// rendering), a usage error, and the bash completion script. No namespace:
// it runs as any user.
func TestGoldenHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := tbrdma(t)
	root := runPlain(t, bin, "--help")
	golden(t, "help/tbrdma.txt", root)
	cmds := subcommands(t, root)
	// The commands of issue #6; a command that disappears from the help
	// is a change to make deliberately.
	for _, want := range []string{"atomic-lat", "cat", "completion", "demo", "devices", "peers", "ping", "pingpong",
		"read-bw", "read-lat", "send-bw", "send-lat", "serve", "udaddy", "version", "write-bw", "write-lat"} {
		if !strings.Contains(" "+strings.Join(cmds, " ")+" ", " "+want+" ") {
			t.Errorf("tbrdma --help does not list %s: %v", want, cmds)
		}
	}
	for _, c := range cmds {
		t.Run(c, func(t *testing.T) {
			out := runPlain(t, bin, c, "--help")
			if !strings.Contains(out, "Usage:\n  tbrdma "+c) {
				t.Errorf("tbrdma %s --help has no usage line:\n%s", c, out)
			}
			// "help <cmd>" prints the same.
			if h := runPlain(t, bin, "help", c); h != out {
				t.Errorf("tbrdma help %s differs from tbrdma %s --help:\n%s\n---\n%s", c, c, h, out)
			}
			golden(t, "help/"+c+".txt", out)
		})
	}

	t.Run("usage error", func(t *testing.T) {
		cmd := exec.Command(bin, "write-bw", "--no-such-flag", "198.18.0.2")
		cmd.Env = cleanEnv()
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if code := exitCode(cmd.Run()); code != 2 || out.Len() != 0 {
			t.Errorf("exit %d, stdout %q; want exit 2 and nothing on stdout", code, out.String())
		}
		golden(t, "usage-error.txt", errOut.String())
	})

	t.Run("completion bash", func(t *testing.T) {
		a := runPlain(t, bin, "completion", "bash")
		if b := runPlain(t, bin, "completion", "bash"); a != b {
			t.Error("tbrdma completion bash differs between two runs")
		}
		if !strings.Contains(a, "tbrdma") || !strings.Contains(a, "complete ") {
			t.Errorf("tbrdma completion bash is no bash completion script:\n%.500s", a)
		}
		golden(t, "completion.bash", a)
	})
}

// TestGoldenCommands: the rest of the commands' outputs on the link:
// pingpong (RC and UD), the perftest family (table, CSV, JSON; a terminal
// rendering of a bandwidth and a latency test), udaddy, cat's messages,
// serve's startup lines and demo.
func TestGoldenCommands(t *testing.T) {
	needNetns(t)
	needHostname(t)
	l := newLink(t)
	progress("golden renderings of the test commands")

	t.Run("demo", func(t *testing.T) {
		// In A's namespace: its loopback is its own (UDP 4791 on
		// 127.0.0.1 and .2 free whatever runs on this machine).
		r := l.run(t, l.nsA, 60*time.Second, "demo", "--quick")
		if r.code != 0 {
			t.Fatal(r)
		}
		golden(t, "demo.txt", (r.stdout))
		if r.stderr != "" {
			t.Errorf("demo wrote on stderr: %q", r.stderr)
		}
		tty := runTTY(t, l, l.nsA, nil, "demo", "--quick")
		if tty.code != 0 {
			t.Fatal(tty)
		}
		golden(t, "demo.tty", (tty.stdout))
		checkStyled(t, "demo", (tty.stdout), (r.stdout))
	})

	t.Run("serve startup", func(t *testing.T) {
		if !l.ipv6 {
			t.Skip("no IPv6 in the namespaces: serve does not advertise")
		}
		s := l.start(t, l.nsB, "lab-b", "serve")
		s.waitLine(t, "advertising", 10*time.Second)
		golden(t, "serve-startup.txt", s.errText())
	})

	type perf struct {
		file string
		args []string
		tty  bool // also on a terminal
	}
	var runs []perf
	for _, c := range []struct {
		name string
		args []string
		tty  bool
	}{
		{"read-bw", []string{"-n", "200", "-s", "4096"}, true},
		{"send-bw", []string{"-n", "200", "-s", "4096"}, false},
		{"write-lat", []string{"-n", "100"}, false},
		{"send-lat", []string{"-n", "100"}, true},
		{"atomic-lat", []string{"-n", "100"}, false},
		{"atomic-lat-cas", []string{"-n", "100", "-A", "CMP_AND_SWAP"}, false},
	} {
		name := c.name
		cmd, _, _ := strings.Cut(c.name, "-cas")
		args := append([]string{cmd}, c.args...)
		runs = append(runs,
			perf{name + ".txt", args, c.tty},
			perf{name + ".csv", append(args[:len(args):len(args)], "--csv"), false},
			perf{name + ".json", append(args[:len(args):len(args)], "--json"), false})
	}
	runs = append(runs,
		perf{"pingpong.txt", []string{"pingpong", "-n", "20", "-s", "64"}, false},
		perf{"pingpong-ud.txt", []string{"pingpong", "--ud", "-n", "20", "-s", "64"}, false})
	for _, c := range runs {
		t.Run(c.file, func(t *testing.T) {
			srv := l.start(t, l.nsB, "", c.args...)
			l.waitListenTCP(t, l.nsB, 18515, srv)
			r := l.run(t, l.nsA, 60*time.Second, append(c.args, l.addrB)...)
			if r.code != 0 {
				t.Fatal(r)
			}
			if code := srv.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("server: exit %d\n%s", code, srv.errText())
			}
			golden(t, c.file, (r.stdout))
			// The server's output, for the tables: it prints its own.
			if strings.HasSuffix(c.file, ".txt") {
				golden(t, strings.TrimSuffix(c.file, ".txt")+".server.txt", (srv.stdout.String()))
			}
			if !c.tty {
				return
			}
			srv = l.start(t, l.nsB, "", c.args...)
			l.waitListenTCP(t, l.nsB, 18515, srv)
			tty := runTTY(t, l, l.nsA, nil, append(c.args, l.addrB)...)
			if tty.code != 0 {
				t.Fatal(tty)
			}
			srv.wait(t, 30*time.Second)
			// perftest's output is the stock tool's, on a terminal too:
			// no styles.
			if strings.Contains(tty.stdout, "\x1b") || mask(tty.stdout) != mask(r.stdout) {
				t.Errorf("%s on a terminal: want the pipe rendering (perftest's), got:\n%s", c.args[0], quoteANSI(tty.stdout))
			}
		})
	}

	t.Run("udaddy", func(t *testing.T) {
		srv := l.start(t, l.nsB, "", "udaddy", "-b", l.addrB, "-C", "3", "-S", "100")
		srv.waitLine(t, "listening", 10*time.Second)
		r := l.run(t, l.nsA, 60*time.Second, "udaddy", "-C", "3", "-S", "100", l.addrB)
		if r.code != 0 {
			t.Fatal(r)
		}
		if code := srv.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("server: exit %d\n%s", code, srv.errText())
		}
		golden(t, "udaddy.txt", (r.stdout))
		golden(t, "udaddy.server.txt", (srv.stdout.String()))
		golden(t, "udaddy.server.stderr", (srv.errText()))
	})

	t.Run("cat", func(t *testing.T) {
		// Success: stdout carries the data, and stderr (not a terminal)
		// nothing.
		recv := l.start(t, l.nsB, "", "cat")
		waitUDP(t, l.nsB, l.addrB, recv)
		data := make([]byte, 3<<20+12345)
		rand.NewChaCha8([32]byte{6}).Read(data)
		send := catSend(t, l, data, "cat", l.addrB)
		if send.code != 0 {
			t.Fatal(send)
		}
		if code := recv.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("receiver: exit %d\n%s", code, recv.errText())
		}
		if !bytes.Equal(recv.stdout.bytes(), data) {
			t.Errorf("received %d bytes, not the %d sent", len(recv.stdout.bytes()), len(data))
		}
		golden(t, "cat.sender.stderr", send.stderr)
		golden(t, "cat.receiver.stderr", recv.errText())
		// No receiver: the sender's message.
		send = catSend(t, l, data[:100], "cat", "-W", "2", l.addrB)
		if send.code != 1 {
			t.Errorf("cat to no receiver: %v; want exit 1", send)
		}
		golden(t, "cat-no-receiver.stderr", send.stderr)

		// stderr a terminal: the summary line replaces the progress line.
		recv = l.start(t, l.nsB, "", "cat")
		waitUDP(t, l.nsB, l.addrB, recv)
		send = catTTY(t, l, data, "cat", l.addrB)
		if send.code != 0 {
			t.Fatal(send)
		}
		recv.wait(t, 30*time.Second)
		golden(t, "cat.sender.tty", lastLine(send.stderr))
	})
}

// catSend runs tbrdma cat args... in A with data on its stdin.
func catSend(t *testing.T, l *link, data []byte, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := l.command(ctx, t, l.nsA, "", args...)
	cmd.Stdin = bytes.NewReader(data)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("tbrdma %s did not end within 60s", strings.Join(args, " "))
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: exitCode(err)}
}

// catTTY runs tbrdma cat args... in A with data on its stdin and its
// stderr on a pseudo-terminal (returned as stderr).
func catTTY(t *testing.T, l *link, data []byte, args ...string) result {
	t.Helper()
	p := openPTY(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := l.command(ctx, t, l.nsA, "", args...)
	cmd.Env = cleanEnv("TERM=xterm-256color")
	cmd.Stdin = bytes.NewReader(data)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, p.tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.tty.Close()
	var errOut bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		io.Copy(&errOut, p.master) // EIO at the end
		close(readDone)
	}()
	err := cmd.Wait()
	<-readDone
	if ctx.Err() != nil {
		t.Fatalf("tbrdma %s did not end within 60s", strings.Join(args, " "))
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: exitCode(err)}
}

// lastLine is what a terminal shows last of s: its last line, after the
// last carriage return and without escape sequences (the progress line
// redrawn in place, as often as the transfer's speed makes it).
func lastLine(s string) string {
	s = strings.TrimRight(ansi.Strip(s), "\n")
	if i := strings.LastIndexAny(s, "\r\n"); i >= 0 {
		s = s[i+1:]
	}
	return s + "\n"
}
