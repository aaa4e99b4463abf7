//go:build tbrdma_abitest

package abitest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// UCX 1.13 (Debian 12's ucx-utils) over the library, every program
// started through "tbrdma exec", which gives it the device files UCX looks
// for (/dev/infiniband/uverbsN, /sys/class/infiniband/...: docs/cabi.md,
// Device files). Each test runs as root (a mount namespace only) and as
// an unprivileged user (setpriv to nobody: a user and mount namespace),
// since the mechanism must not need root.
//
// ucx_perftest checks data where it can: its latency tests (tag_lat,
// ucp_put_lat, put_lat) wait for each iteration's sequence number to
// arrive in the receive buffer, so a message that arrived wrong or not at
// all shows as a hang, which the pairing's timeout ends; its bandwidth
// tests only count completions.
//
// rc_verbs runs as UCX_TLS=rc_verbs,ud_verbs:aux (UCX's own alias rc_v):
// ucx_perftest connects its endpoints with worker addresses, and a
// transport that connects to an endpoint (RC) needs one that connects to
// an interface (UD) to carry the connection setup, on any hardware; with
// UCX_TLS=rc_verbs alone UCX says "no auxiliary transport". The :aux
// suffix keeps UD to that handshake; the tests check that the data lanes
// are rc_verbs (UCX_LOG_LEVEL=info prints them: "ep_cfg[0]: tag(...)").

// nobody runs a program as an unprivileged user (util-linux setpriv).
var nobody = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}

// ucxUser is one way of starting the programs: as root, or as nobody with
// a copy of the build that nobody can read.
type ucxUser struct {
	name string
	pre  []string // the command that drops root, if any
	tb   string   // the tbrdma binary (the library beside it, in lib/)
}

func ucxUsers(t *testing.T) []ucxUser {
	t.Helper()
	return []ucxUser{{"root", nil, tbrdmaBin(t)}, {"unprivileged", nobody, readableBuild(t)}}
}

// readableBuild copies tbrdma and the library to a directory anyone may
// read (the build directory may be private to root, as .ci/run's is) and
// returns the copied tbrdma.
func readableBuild(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tbrdma-ucx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile := func(src, dst string, mode os.FileMode) {
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(tbrdmaBin(t), filepath.Join(dir, "tbrdma"), 0o755)
	copyFile(filepath.Join(libDir(t), "libibverbs.so.1"), filepath.Join(dir, "lib", "libibverbs.so.1"), 0o755)
	if err := os.Symlink("libibverbs.so.1", filepath.Join(dir, "lib", "librdmacm.so.1")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "lib")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "tbrdma")
}

// argv is u's command line for "tbrdma exec" with env set: env VAR=... tbrdma exec argv...
func (u ucxUser) argv(env []string, argv ...string) []string {
	a := append(append([]string{}, u.pre...), "env")
	a = append(a, env...)
	return append(append(a, u.tb, "exec"), argv...)
}

// sysfsGID is a GID as sysfs prints it.
func sysfsGID(ip4 string) string {
	var b [4]int
	fmt.Sscanf(ip4, "%d.%d.%d.%d", &b[0], &b[1], &b[2], &b[3])
	return fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3])
}

// TestUCXInfo: ucx_info -d lists the device with rc_verbs and ud_verbs,
// and UCX reads the view's files (the address at GID index 0 as RoCE v1
// and at 1 as RoCE v2, its netdev), which say what the library says.
func TestUCXInfo(t *testing.T) {
	need(t, "ucx_info", "setpriv", "ibv_devinfo")
	l := NewLink(t)
	for _, u := range ucxUsers(t) {
		t.Run(u.name, func(t *testing.T) {
			// The files, and the library's view of the same GID.
			p := "/sys/class/infiniband/tb_thunderbolt0/ports/1/"
			script := `stat -L -c %F /dev/infiniband/uverbs0 /dev/infiniband/rdma_cm; cat ` +
				p + `gids/0 ` + p + `gid_attrs/types/0 ` + p + `gids/1 ` + p + `gid_attrs/types/1 ` + p + `gid_attrs/ndevs/1; ` +
				`ibv_devinfo -v -d tb_thunderbolt0 | grep 'GID\[  [01]\]'`
			r := RunIn(t, l.NsA, 30*time.Second, Native(u.argv(nil, "sh", "-c", script)...))
			g := sysfsGID(l.AddrA)
			want := "character special file\ncharacter special file\n" + g + "\nIB/RoCE v1\n" + g + "\nRoCE v2\nthunderbolt0\n"
			devinfo := `(?m)^\s+GID\[\s*0\]:\s+` + g + `, RoCE v1\n\s+GID\[\s*1\]:\s+::ffff:` + regexp.QuoteMeta(l.AddrA) + `, RoCE v2$`
			if r.Err != nil || !strings.HasPrefix(r.Out, want) || !regexp.MustCompile(devinfo).MatchString(r.Out) {
				t.Fatalf("the device files: %v\n%s\nwant:\n%s(and ibv_devinfo's GID[0] and GID[1], the same address as RoCE v1 and v2)", r.Err, indent(r.Out), indent(want))
			}

			r = RunIn(t, l.NsA, 60*time.Second, Native(u.argv([]string{"UCX_LOG_LEVEL=debug"}, "ucx_info", "-d")...))
			if r.Err != nil {
				t.Fatalf("ucx_info -d: %v\n%s", r.Err, indent(r.Out))
			}
			for _, w := range []string{
				`(?m)^# Memory domain: tb_thunderbolt0$`,
				`(?m)^#\s+Transport: rc_verbs\n#\s+Device: tb_thunderbolt0:1$`,
				`(?m)^#\s+Transport: ud_verbs\n#\s+Device: tb_thunderbolt0:1$`,
				// GID selection found a RoCE v2 IPv4 entry at 1 ...
				`tb_thunderbolt0:1 using gid_index 1\b`,
				// ... and the netdev behind it (gid_attrs/ndevs).
				`RoCE LAG level on tb_thunderbolt0:1 \(thunderbolt0\) is 1`,
			} {
				if !regexp.MustCompile(w).MatchString(r.Out) {
					t.Errorf("ucx_info -d: no match for %s", w)
				}
			}
			if t.Failed() {
				t.Logf("ucx_info -d (UCX_LOG_LEVEL=debug):\n%s", indent(r.Out))
			}
		})
	}
	// Without the view UCX skips the device, silently: what the view is for.
	r := RunIn(t, l.NsA, 60*time.Second, Native(tbrdmaBin(t), "exec", "--ns=off", "ucx_info", "-d"))
	if r.Err != nil || strings.Contains(r.Out, "tb_thunderbolt0") {
		t.Errorf("ucx_info -d with --ns=off: %v; want exit 0 and no tb_thunderbolt0\n%s", r.Err, indent(r.Out))
	}
}

// ucxCase is one ucx_perftest run.
type ucxCase struct {
	tls   string // UCX_TLS ("" for a UCT test, which names its transport with -x)
	test  string
	size  int
	iters int
	extra []string // UCT: -d, -x, -D
	lane  string   // what UCX_LOG_LEVEL=info must print on the client ("" for UCT)
}

const rcTLS, udTLS = "rc_verbs,ud_verbs:aux", "ud_verbs"

var ucxCases = []ucxCase{
	{tls: rcTLS, test: "tag_bw", size: 65536, iters: 1000, lane: `ep_cfg\[\d+\]: tag\(rc_verbs/tb_thunderbolt0:1\)`},
	{tls: rcTLS, test: "tag_lat", size: 8, iters: 1000, lane: `ep_cfg\[\d+\]: tag\(rc_verbs/tb_thunderbolt0:1\)`},
	{tls: rcTLS, test: "ucp_put_bw", size: 65536, iters: 500, lane: `ep_cfg\[\d+\]: rma\(rc_verbs/tb_thunderbolt0:1\)`},
	{tls: rcTLS, test: "ucp_put_lat", size: 4096, iters: 500, lane: `ep_cfg\[\d+\]: rma\(rc_verbs/tb_thunderbolt0:1\)`},
	{tls: rcTLS, test: "ucp_get", size: 65536, iters: 200, lane: `ep_cfg\[\d+\]: rma\(rc_verbs/tb_thunderbolt0:1\)`},
	{test: "put_bw", size: 65536, iters: 500, extra: []string{"-d", "tb_thunderbolt0:1", "-x", "rc_verbs", "-D", "zcopy"}},
	{test: "put_lat", size: 4096, iters: 500, extra: []string{"-d", "tb_thunderbolt0:1", "-x", "rc_verbs", "-D", "zcopy"}},
	{test: "get", size: 65536, iters: 200, extra: []string{"-d", "tb_thunderbolt0:1", "-x", "rc_verbs", "-D", "zcopy"}},
	{tls: udTLS, test: "tag_bw", size: 65536, iters: 1000, lane: `ep_cfg\[\d+\]: tag\(ud_verbs/tb_thunderbolt0:1\)`},
	{tls: udTLS, test: "tag_lat", size: 8, iters: 1000, lane: `ep_cfg\[\d+\]: tag\(ud_verbs/tb_thunderbolt0:1\)`},
	{tls: udTLS, test: "ucp_put_bw", size: 65536, iters: 200, lane: `ep_cfg\[\d+\]: rma_am\(ud_verbs/tb_thunderbolt0:1\)`},
	{tls: udTLS, test: "ucp_get", size: 65536, iters: 100, lane: `ep_cfg\[\d+\]: rma_am\(ud_verbs/tb_thunderbolt0:1\)`},
	{tls: udTLS, test: "ucp_put_lat", size: 4096, iters: 200, lane: `ep_cfg\[\d+\]: rma_am\(ud_verbs/tb_thunderbolt0:1\)`},
}

func (c ucxCase) name() string {
	switch c.tls {
	case rcTLS:
		return "rc_verbs/" + c.test
	case udTLS:
		return "ud_verbs/" + c.test
	}
	return "uct-rc_verbs/" + c.test
}

// "Final:        1000     20.924    35.449    35.449        0.22       0.22       28210       28210"
var ucxFinalRe = regexp.MustCompile(`(?m)^Final:\s+(\d+)((?:\s+\d+\.\d+){5})\s+(\d+)\s+(\d+)\s*$`)

// TestUCXPerftest runs ucx_perftest between the namespaces over rc_verbs
// and ud_verbs (UCP tag matching, put and get; UCT put and get over
// rc_verbs) as root, and the rc_verbs tag tests as nobody.
func TestUCXPerftest(t *testing.T) {
	need(t, "ucx_perftest", "setpriv")
	l := NewLink(t)
	users := ucxUsers(t)
	port := 13337
	for _, u := range users {
		for _, c := range ucxCases {
			if u.pre != nil && (c.tls != rcTLS || !strings.HasPrefix(c.test, "tag_")) {
				continue
			}
			port++
			name := u.name + "/" + c.name()
			t.Run(name, func(t *testing.T) {
				env := []string{"UCX_NET_DEVICES=tb_thunderbolt0:1", "UCX_LOG_LEVEL=info"}
				if c.tls != "" {
					env = append(env, "UCX_TLS="+c.tls)
				}
				p := strconv.Itoa(port)
				srv := Native(u.argv(env, "ucx_perftest", "-p", p)...)
				cliArgs := append([]string{"ucx_perftest", l.AddrA, "-p", p, "-t", c.test,
					"-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters), "-w", "10"}, c.extra...)
				cli := Native(u.argv(env, cliArgs...)...)
				r := RunPair(t, l, name, 60*time.Second, srv, TCPListen(port), cli)
				if !r.OK() {
					t.Fatalf("%s: not both exit 0\n%s", name, r.Dump())
				}
				m := ucxFinalRe.FindStringSubmatch(r.Cli.Out)
				if m == nil {
					t.Fatalf("%s: no Final row in the client's output\n%s", name, r.Dump())
				}
				if n, _ := strconv.Atoi(m[1]); n != c.iters {
					t.Errorf("%s: %d iterations, want %d", name, n, c.iters)
				}
				for _, f := range strings.Fields(m[2])[1:3] { // average and overall; the median may round to 0
					if v, _ := strconv.ParseFloat(f, 64); v <= 0 {
						t.Errorf("%s: a time of %s in %q", name, f, m[0])
					}
				}
				if c.lane != "" && !regexp.MustCompile(c.lane).MatchString(r.Cli.Out) {
					t.Errorf("%s: the client's lanes are not %s", name, c.lane)
				}
				if t.Failed() {
					t.Logf("%s", r.Dump())
				}
			})
		}
	}
}

// TestUCXLinkDown: the link goes down under a running tag_lat. The end
// with a message not yet acknowledged fails after RC's retries (7 of about
// 1 s): UCX names the error ("transport retry counter exceeded") and
// aborts, not a hang. The other end may have nothing outstanding at that
// moment (its last message was acknowledged, it waits for the next one);
// RC then tells it nothing, over rdma_rxe as here, and ucx_perftest has no
// timeout of its own: it waits until it is stopped. Both ends aborted in
// some runs, one in others. A job (MPI) is ended by its launcher when one
// rank fails: TestMPILinkDown.
func TestUCXLinkDown(t *testing.T) {
	need(t, "ucx_perftest")
	l := NewLink(t)
	u := ucxUsers(t)[0]
	env := []string{"UCX_NET_DEVICES=tb_thunderbolt0:1", "UCX_TLS=" + rcTLS}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := Start(t, Native(u.argv(env, "ucx_perftest", "-p", "13399")...).Cmd(ctx, t, l.NsA))
	if err := TCPListen(13399)(ctx, l.NsA, srv); err != nil {
		t.Fatalf("ucx_perftest server: %v\n%s", err, indent(srv.Output()))
	}
	cli := Start(t, Native(u.argv(env, "ucx_perftest", l.AddrA, "-p", "13399", "-t", "tag_lat", "-s", "8", "-n", "1000000000")...).Cmd(ctx, t, l.NsB))
	// The client prints its table's header once the endpoints are up.
	if !cli.WaitFor("# iterations", time.Minute) {
		t.Fatalf("the test did not start\nclient:\n%s\nserver:\n%s", indent(cli.Output()), indent(srv.Output()))
	}
	time.Sleep(time.Second)
	down := time.Now()
	ipCmd(t, "-n", l.NsA, "link", "set", "thunderbolt0", "down")
	progress("TestUCXLinkDown: the link is down; waiting for an end to exit")
	ends := map[string]*Started{"client": cli, "server": srv}
	first := ""
	for first == "" && time.Since(down) < 60*time.Second {
		for name, s := range ends {
			select {
			case <-s.done:
				first = name
			default:
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if first == "" {
		t.Fatalf("neither end exited within 60 s of the link going down\nclient:\n%s\nserver:\n%s", indent(cli.Output()), indent(srv.Output()))
	}
	const want = "transport retry counter exceeded"
	r := ends[first].Wait()
	if r.Err == nil || !strings.Contains(r.Out, want) {
		t.Fatalf("%s: %v %v after the link went down; want non-zero, naming %q\n%s",
			first, errText(r.Err), r.Took.Round(time.Millisecond), want, indent(r.Out))
	}
	t.Logf("%s: %v %v after the link went down, naming %q", first, errText(r.Err), time.Since(down).Round(time.Millisecond), want)
	// The other end: within the same bound if it had a message in flight.
	for name, s := range ends {
		if name == first {
			continue
		}
		select {
		case <-s.done:
			t.Logf("%s: %v as well", name, errText(s.Wait().Err))
		case <-time.After(15 * time.Second):
			t.Logf("%s: still waiting 15 s later (nothing outstanding: RC cannot tell it); stopped", name)
		}
	}
}
