//go:build tbrdma_abitest

package abitest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// devName is the device the library makes of thunderbolt0.
const devName = "tb_thunderbolt0"

// TestDevices runs ibv_devices and ibv_devinfo over the library in each
// namespace: one device, tb_thunderbolt0, its port active at 4096 on
// Ethernet with the namespace's address as GID[1] (RoCE v2). The real
// libibverbs1 finds no device here ("Failed to get IB devices list"), so
// these also prove the programs loaded the library.
func TestDevices(t *testing.T) {
	need(t, "ibv_devices", "ibv_devinfo", "ldd")
	l := NewLink(t)
	const timeout = 20 * time.Second

	t.Run("ldd", func(t *testing.T) {
		// LD_LIBRARY_PATH wins over the installed libibverbs1.
		r := RunIn(t, l.NsA, timeout, Lib("ldd", "/usr/bin/ibv_devinfo"))
		want := "libibverbs.so.1 => " + filepath.Join(libDir(t), "libibverbs.so.1")
		if r.Err != nil || !strings.Contains(r.Out, want) {
			t.Fatalf("ldd ibv_devinfo: %v: want %q in\n%s", r.Err, want, r.Out)
		}
	})

	t.Run("ibv_devices", func(t *testing.T) {
		progress("devices: ibv_devices")
		r := RunIn(t, l.NsA, timeout, Lib("ibv_devices"))
		// "    tb_thunderbolt0 \t c4a844fffe8e27ec"
		re := regexp.MustCompile(`(?m)^\s+` + devName + `\s+[0-9a-f]{16}\s*$`)
		if r.Err != nil || !re.MatchString(r.Out) || !strings.Contains(r.Out, "node GUID") {
			t.Fatalf("ibv_devices: %v: want a %s line with its node GUID in\n%s", r.Err, devName, r.Out)
		}
		if n := strings.Count(r.Out, "\n    tb_"); n != 1 {
			t.Errorf("ibv_devices lists %d tb_ devices, want 1 (only thunderbolt0 in the namespace):\n%s", n, r.Out)
		}
	})

	t.Run("ibv_devinfo-l", func(t *testing.T) {
		r := RunIn(t, l.NsA, timeout, Lib("ibv_devinfo", "-l"))
		if r.Err != nil || !strings.Contains(r.Out, "1 HCA found:") || !strings.Contains(r.Out, "\t"+devName) {
			t.Fatalf("ibv_devinfo -l: %v: want \"1 HCA found:\" and %s in\n%s", r.Err, devName, r.Out)
		}
	})

	for _, side := range []struct{ name, ns, addr string }{{"A", l.NsA, l.AddrA}, {"B", l.NsB, l.AddrB}} {
		t.Run("ibv_devinfo-v-"+side.name, func(t *testing.T) {
			progress("devices: ibv_devinfo -v in %s", side.ns)
			r := RunIn(t, side.ns, timeout, Lib("ibv_devinfo", "-v"))
			if r.Err != nil {
				t.Fatalf("ibv_devinfo -v: %v\n%s", r.Err, r.Out)
			}
			checkDevinfo(t, r.Out, true, side.addr)
		})
	}

	t.Run("ibv_devinfo-d", func(t *testing.T) {
		r := RunIn(t, l.NsB, timeout, Lib("ibv_devinfo", "-d", devName))
		if r.Err != nil {
			t.Fatalf("ibv_devinfo -d %s: %v\n%s", devName, r.Err, r.Out)
		}
		checkDevinfo(t, r.Out, false, l.AddrB)
	})

	t.Run("ibv_devinfo-d-nosuch", func(t *testing.T) {
		// rdma-core's devinfo.c: fprintf(stderr, "IB device '%s' wasn't
		// found\n") and return -1, exit status 255.
		r := RunIn(t, l.NsA, timeout, Lib("ibv_devinfo", "-d", "nosuch"))
		code := exitCode(r.Err)
		if code != 255 || !strings.Contains(r.Out, "IB device 'nosuch' wasn't found") {
			t.Fatalf("ibv_devinfo -d nosuch: exit %d (%v), want 255 and \"IB device 'nosuch' wasn't found\":\n%s", code, r.Err, r.Out)
		}
	})
}

// checkDevinfo checks what ibv_devinfo printed for the one device.
func checkDevinfo(t *testing.T, out string, verbose bool, addr string) {
	t.Helper()
	want := []string{
		`(?m)^hca_id:\s+` + devName + `$`,
		`(?m)^\s+phys_port_cnt:\s+1$`,
		`(?m)^\s+port:\s+1$`,
		`(?m)^\s+state:\s+PORT_ACTIVE \(4\)$`,
		`(?m)^\s+max_mtu:\s+4096 \(5\)$`,
		`(?m)^\s+active_mtu:\s+4096 \(5\)$`,
		`(?m)^\s+link_layer:\s+Ethernet$`,
	}
	if verbose {
		want = append(want,
			`(?m)^\s+GID\[\s*1\]:\s+::ffff:`+regexp.QuoteMeta(addr)+`, RoCE v2$`,
			`(?m)^\s+phys_state:\s+LINK_UP \(5\)$`,
			`(?m)^\s+atomic_cap:\s+ATOMIC_HCA \(1\)$`,
			`(?m)^\s+num_comp_vectors:\s+[1-9]`)
	}
	for _, w := range want {
		if !regexp.MustCompile(w).MatchString(out) {
			t.Errorf("ibv_devinfo: no line matching %s", w)
		}
	}
	if n := strings.Count(out, "hca_id:"); n != 1 {
		t.Errorf("ibv_devinfo lists %d devices, want 1", n)
	}
	if t.Failed() {
		t.Logf("ibv_devinfo printed:\n%s", out)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// ppBytesRe and ppItersRe match the pingpongs' result lines (rdma-core's
// examples and tbrdma pingpong print the same).
var (
	ppBytesRe = regexp.MustCompile(`(?m)^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec$`)
	ppItersRe = regexp.MustCompile(`(?m)^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$`)
)

// checkPingpong checks one side of a pingpong: exit 0, the two result
// lines with iters iterations and a positive rate, and no failed data
// check (the examples print "invalid data in page N" and still exit 0;
// tbrdma pingpong fails).
func checkPingpong(out string, iters int) error {
	m := ppItersRe.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("no \"N iters in S seconds = U usec/iter\" line")
	}
	if n, _ := strconv.Atoi(m[1]); n != iters {
		return fmt.Errorf("%s iters, want %d", m[1], iters)
	}
	if u, _ := strconv.ParseFloat(m[3], 64); !(u > 0) {
		return fmt.Errorf("usec/iter %s is not positive", m[3])
	}
	b := ppBytesRe.FindStringSubmatch(out)
	if b == nil {
		return fmt.Errorf("no \"N bytes in S seconds = R Mbit/sec\" line")
	}
	if r, _ := strconv.ParseFloat(b[3], 64); !(r > 0) {
		return fmt.Errorf("Mbit/sec %s is not positive", b[3])
	}
	if strings.Contains(strings.ToLower(out), "invalid data") {
		return fmt.Errorf("the data check failed (\"invalid data\")")
	}
	return nil
}

// ppCase is one pingpong pairing.
type ppCase struct {
	name     string
	srv, cli End
	iters    int // the count both "iters in" lines must show
}

func runPingpongs(t *testing.T, l *Link, cases []ppCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := RunPair(t, l, "pingpong/"+c.name, 30*time.Second, c.srv, TCPListen(18515), c.cli)
			if !p.OK() {
				t.Fatalf("%s: not both exit 0\n%s", c.name, p.Dump())
			}
			for _, s := range []struct {
				role string
				out  string
			}{{"server", p.Srv.Out}, {"client", p.Cli.Out}} {
				if err := checkPingpong(s.out, c.iters); err != nil {
					t.Errorf("%s: %s: %v", c.name, s.role, err)
				}
			}
			progress("pingpong/%s: server %q; client %q", c.name,
				ppItersRe.FindString(p.Srv.Out), ppItersRe.FindString(p.Cli.Out))
			if t.Failed() {
				t.Logf("%s", p.Dump())
			}
		})
	}
}

// TestPingpong runs rdma-core's example programs over the library on both
// ends: ibv_rc_pingpong (default, 8 KiB, events, the new post-send API,
// the data check, receive re-posting), ibv_uc_pingpong, ibv_ud_pingpong
// and ibv_srq_pingpong. -g 1 (GID[1], the IPv4 one) is what RoCE needs.
func TestPingpong(t *testing.T) {
	need(t, "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong")
	l := NewLink(t)
	pp := func(name, tool string, iters int, args ...string) ppCase {
		argv := append([]string{tool, "-g", "1", "-n", strconv.Itoa(iters)}, args...)
		return ppCase{name: name, iters: iters,
			srv: Lib(argv...), cli: Lib(append(argv[:len(argv):len(argv)], l.AddrA)...)}
	}
	cases := []ppCase{
		pp("rc-default", "ibv_rc_pingpong", 100),
		pp("rc-s8192", "ibv_rc_pingpong", 100, "-s", "8192"),
		pp("rc-s64-m4096", "ibv_rc_pingpong", 100, "-s", "64", "-m", "4096"),
		pp("rc-events", "ibv_rc_pingpong", 100, "-e"),
		pp("rc-new-send", "ibv_rc_pingpong", 100, "-N"),
		pp("rc-new-send-events-chk", "ibv_rc_pingpong", 100, "-N", "-e", "-c"),
		pp("rc-chk", "ibv_rc_pingpong", 100, "-c"),
		pp("rc-chk-s8192", "ibv_rc_pingpong", 100, "-c", "-s", "8192"),
		pp("rc-repost-r16-n300", "ibv_rc_pingpong", 300, "-r", "16"),
		pp("uc-default", "ibv_uc_pingpong", 100),
		pp("uc-chk-events", "ibv_uc_pingpong", 100, "-c", "-e"),
		pp("ud-default", "ibv_ud_pingpong", 100),
		pp("ud-s4096-chk", "ibv_ud_pingpong", 100, "-s", "4096", "-c"),
		pp("ud-events", "ibv_ud_pingpong", 100, "-e"),
		// 16 QPs (-q 4: four) on one SRQ; -n counts the exchanges per QP,
		// and "N iters in" prints -n.
		pp("srq-default", "ibv_srq_pingpong", 50),
		pp("srq-q4-chk-events", "ibv_srq_pingpong", 50, "-q", "4", "-c", "-e"),
	}
	runPingpongs(t, l, cases)
}

// TestPingpongCLI pairs the examples over the library with tbrdma
// pingpong (ibv_rc_pingpong's twin) and pingpong --ud (ibv_ud_pingpong's)
// in both roles.
func TestPingpongCLI(t *testing.T) {
	need(t, "ibv_rc_pingpong", "ibv_ud_pingpong")
	l := NewLink(t)
	tb := tbrdmaBin(t)
	const n = 100
	ns := strconv.Itoa(n)
	var cases []ppCase
	for _, v := range []struct {
		name string
		tool string
		tbf  []string // tbrdma pingpong flags before the rest
		args []string // both sides
	}{
		{"rc", "ibv_rc_pingpong", nil, []string{"-n", ns}},
		{"rc-s8192-chk", "ibv_rc_pingpong", nil, []string{"-n", ns, "-s", "8192", "-c"}},
		{"rc-events", "ibv_rc_pingpong", nil, []string{"-n", ns, "-e"}},
		{"ud", "ibv_ud_pingpong", []string{"--ud"}, []string{"-n", ns}},
		{"ud-s4096-chk", "ibv_ud_pingpong", []string{"--ud"}, []string{"-n", ns, "-s", "4096", "-c"}},
	} {
		stock := append([]string{v.tool, "-g", "1"}, v.args...)
		tbPP := func(addr string) []string {
			a := append([]string{tb, "pingpong"}, v.tbf...)
			return append(append(a, "--bind", addr, "-g", "1", "--timeout", "25s"), v.args...)
		}
		cases = append(cases,
			ppCase{name: v.name + "-lib-server", iters: n,
				srv: Lib(stock...),
				cli: Native(append(tbPP(l.AddrB), l.AddrA)...)},
			ppCase{name: v.name + "-tbrdma-server", iters: n,
				srv: Native(tbPP(l.AddrA)...),
				cli: Lib(append(stock[:len(stock):len(stock)], l.AddrA)...)})
	}
	runPingpongs(t, l, cases)
}
