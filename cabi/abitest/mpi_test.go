//go:build tbrdma_abitest

package abitest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Open MPI 4.1 (Debian 12's openmpi-bin) over the library. mpirun runs in
// the first namespace and starts one rank per namespace: its ssh is
// cabi/examples/netns-agent.sh (plm_rsh_agent), which finds the namespace
// that holds a host's address, and every rank is "tbrdma exec -- PROGRAM",
// so UCX finds the device (docs/engines.md). pml ucx carries MPI over
// UCX's rc_verbs (or ud_verbs) on tbrdma; the programs are
// cabi/examples/mpi_pingpong.c (every byte of every message checked) and
// cabi/examples/mpi_hello.py (mpi4py).

// mpiNode is one host of a job: a namespace and the address mpirun names
// it by.
type mpiNode struct{ ns, addr string }

// mpiChain makes the daisy chain X - Y - Z: X's thunderbolt0 to Y's
// thunderbolt0, Y's thunderbolt1 to Z's thunderbolt0, Y forwarding IP
// between them and X and Z routing each other's subnet through Y. X and Z
// are not directly connected.
func mpiChain(t *testing.T) []mpiNode {
	t.Helper()
	s1, s2 := allocSubnet(), allocSubnet()
	id := fmt.Sprintf("%05x", rand.Uint32()&0xfffff)
	x, y, z := "tbmpi-"+id+"-x", "tbmpi-"+id+"-y", "tbmpi-"+id+"-z"
	for _, ns := range []string{x, y, z} {
		addNetns(t, ns)
	}
	a := func(s, h int) string { return fmt.Sprintf("198.18.%d.%d", s, h) }
	veth(t, x, "thunderbolt0", a(s1, 1), y, "thunderbolt0", a(s1, 2))
	veth(t, y, "thunderbolt1", a(s2, 1), z, "thunderbolt0", a(s2, 2))
	if out, err := exec.Command("ip", "netns", "exec", y, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("ip_forward in %s: %v: %s", y, err, out)
	}
	ipCmd(t, "-n", x, "route", "add", fmt.Sprintf("198.18.%d.0/24", s2), "via", a(s1, 2))
	ipCmd(t, "-n", z, "route", "add", fmt.Sprintf("198.18.%d.0/24", s1), "via", a(s2, 1))
	return []mpiNode{{x, a(s1, 1)}, {y, a(s1, 2)}, {z, a(s2, 2)}}
}

// examplePath is a file of cabi/examples.
func examplePath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// mpiPingpongBin compiles cabi/examples/mpi_pingpong.c with mpicc.
func mpiPingpongBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mpi_pingpong")
	out, err := exec.Command("mpicc", "-O2", "-Wall", "-Werror", "-o", bin, examplePath(t, "mpi_pingpong.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("mpicc mpi_pingpong.c: %v\n%s", err, out)
	}
	return bin
}

// mpiJob is one mpirun.
type mpiJob struct {
	hosts []mpiNode
	mca   []string // more "--mca NAME VALUE" pairs
	env   []string // -x for every rank
	argv  []string // the rank's program, run through tbrdma exec
	raw   bool     // run argv without tbrdma exec (the TCP baseline)
}

// mpiEnv lets mpirun run as root, as the tests do (it refuses otherwise).
var mpiEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}

// ucxRC is the UCX setting for MPI over rc_verbs on tbrdma (UD for the
// handshake only, as in ucx_test.go).
var ucxRC = []string{"UCX_TLS=" + rcTLS, "UCX_LOG_LEVEL=info"}

// pmlUCX selects Open MPI's UCX layer and nothing that would bypass it.
var pmlUCX = []string{"pml", "ucx", "btl", "self", "osc", "ucx"}

func (j mpiJob) cmd(ctx context.Context, t *testing.T) *exec.Cmd {
	t.Helper()
	var hosts []string
	for _, h := range j.hosts {
		hosts = append(hosts, h.addr)
	}
	a := append([]string{"env"}, mpiEnv...)
	a = append(a, "mpirun", "-np", strconv.Itoa(len(j.hosts)), "--host", strings.Join(hosts, ","),
		"--mca", "plm_rsh_agent", examplePath(t, "netns-agent.sh"),
		// Open MPI 4.1's daemons share the topology through a mapping at
		// an address picked in mpirun; in a daemon that address can be
		// taken (it segfaulted once here in hwloc_shmem_topology_write).
		"--mca", "rtc_hwloc_vmhole", "none",
		// Every namespace sees all of the machine's cores, so mpirun
		// would bind each "host"'s rank 0 to core 0: both ranks on one core.
		"--bind-to", "none")
	for i := 0; i+1 < len(j.mca); i += 2 {
		a = append(a, "--mca", j.mca[i], j.mca[i+1])
	}
	for _, e := range j.env {
		a = append(a, "-x", e)
	}
	if !j.raw {
		a = append(a, tbrdmaBin(t), "exec", "--")
	}
	a = append(a, j.argv...)
	return CommandNative(ctx, j.hosts[0].ns, a...)
}

func (j mpiJob) run(t *testing.T, timeout time.Duration) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Run(t, j.cmd(ctx, t))
}

var (
	mpiLatRe = regexp.MustCompile(`(?m)^lat (\d+)<->(\d+) bytes (\d+) iters (\d+) usec ([\d.]+)$`)
	mpiBwRe  = regexp.MustCompile(`(?m)^bw (\d+)->(\d+) bytes (\d+) iters (\d+) MBps ([\d.]+)$`)
)

// checkMPIPingpong checks mpi_pingpong's report: every pair's two rows, the
// final line, and that the data went over lane (UCX's log).
func checkMPIPingpong(t *testing.T, r Result, ranks int, lane string) {
	t.Helper()
	pairs := ranks * (ranks - 1) / 2
	bad := r.Err != nil || !strings.Contains(r.Out, fmt.Sprintf("verified %d pairs, %d ranks\n", pairs, ranks)) ||
		len(mpiLatRe.FindAllString(r.Out, -1)) != pairs || len(mpiBwRe.FindAllString(r.Out, -1)) != pairs
	for _, m := range mpiLatRe.FindAllStringSubmatch(r.Out, -1) {
		if v, _ := strconv.ParseFloat(m[5], 64); v <= 0 {
			bad = true
		}
	}
	if lane != "" && !regexp.MustCompile(lane).MatchString(r.Out) {
		t.Errorf("no %s in UCX's log: MPI did not go over tbrdma", lane)
	}
	if bad {
		t.Fatalf("mpirun: %v after %v; want exit 0, %d lat and bw rows and \"verified %d pairs, %d ranks\"\n%s",
			errText(r.Err), r.Took.Round(time.Millisecond), pairs, pairs, ranks, indent(r.Out))
	}
	for _, m := range append(mpiLatRe.FindAllString(r.Out, -1), mpiBwRe.FindAllString(r.Out, -1)...) {
		t.Log(m)
	}
}

func needMPI(t *testing.T) {
	t.Helper()
	need(t, "mpirun", "mpicc", "ucx_info")
}

// TestMPI: mpirun -np 2, one rank per namespace, mpi_pingpong over
// rc_verbs and ud_verbs, and the mpi4py script.
func TestMPI(t *testing.T) {
	needMPI(t)
	l := NewLink(t)
	hosts := []mpiNode{{l.NsA, l.AddrA}, {l.NsB, l.AddrB}}
	bin := mpiPingpongBin(t)

	t.Run("placement", func(t *testing.T) {
		// One rank in each namespace: each prints its own address.
		r := mpiJob{hosts: hosts, raw: true, argv: []string{"ip", "-o", "-4", "addr", "show", "dev", "thunderbolt0"}}.run(t, time.Minute)
		if r.Err != nil || !strings.Contains(r.Out, " "+l.AddrA+"/24 ") || !strings.Contains(r.Out, " "+l.AddrB+"/24 ") {
			t.Fatalf("mpirun of ip addr: %v; want both %s and %s\n%s", errText(r.Err), l.AddrA, l.AddrB, indent(r.Out))
		}
	})
	t.Run("rc_verbs", func(t *testing.T) {
		r := mpiJob{hosts: hosts, mca: pmlUCX, env: ucxRC, argv: []string{bin, "-n", "1000", "-m", "32"}}.run(t, 2*time.Minute)
		checkMPIPingpong(t, r, 2, `ep_cfg\[\d+\]: tag\(rc_verbs/tb_thunderbolt0:1\)`)
	})
	t.Run("ud_verbs", func(t *testing.T) {
		env := []string{"UCX_TLS=ud_verbs", "UCX_LOG_LEVEL=info"}
		r := mpiJob{hosts: hosts, mca: pmlUCX, env: env, argv: []string{bin, "-n", "1000", "-m", "16"}}.run(t, 2*time.Minute)
		checkMPIPingpong(t, r, 2, `ep_cfg\[\d+\]: tag\(ud_verbs/tb_thunderbolt0:1\)`)
	})
	t.Run("mpi4py", func(t *testing.T) {
		if err := exec.Command("/usr/bin/python3", "-c", "import mpi4py").Run(); err != nil {
			t.Fatal("no mpi4py for /usr/bin/python3 (apt-get install python3-mpi4py)")
		}
		r := mpiJob{hosts: hosts, mca: pmlUCX, env: ucxRC, argv: []string{"/usr/bin/python3", examplePath(t, "mpi_hello.py")}}.run(t, 2*time.Minute)
		if r.Err != nil || !strings.Contains(r.Out, "mpi4py verified 2 ranks") {
			t.Fatalf("mpirun of mpi_hello.py: %v; want exit 0 and \"mpi4py verified 2 ranks\"\n%s", errText(r.Err), indent(r.Out))
		}
		if !regexp.MustCompile(`ep_cfg\[\d+\]: tag\(rc_verbs/tb_thunderbolt0:1\)`).MatchString(r.Out) {
			t.Errorf("no rc_verbs lane in UCX's log\n%s", indent(r.Out))
		}
	})
}

// TestMPIChain: mpirun -np 3 over the daisy chain X - Y - Z; ranks 0 and 2
// reach each other only through Y's forwarding, and the middle rank has a
// device on each of its links (UCX uses both).
func TestMPIChain(t *testing.T) {
	needMPI(t)
	hosts := mpiChain(t)
	bin := mpiPingpongBin(t)
	r := mpiJob{hosts: hosts, mca: pmlUCX, env: ucxRC, argv: []string{bin, "-n", "500", "-m", "16"}}.run(t, 3*time.Minute)
	checkMPIPingpong(t, r, 3, `ep_cfg\[\d+\]: tag\(rc_verbs/tb_thunderbolt\d:1`)
}

// TestMPILinkDown: the Thunderbolt link of rank 1 goes down in the middle
// of the latency loop. Rank 0's next send fails with retry exceeded, UCX
// names it and aborts, and mpirun exits non-zero: within RC's retry bound
// (UCX's 7 retries of ~1 s), not a hang. mpirun's own connections use a
// second link (lan0) here, as a laptop's Wi-Fi would carry them; over
// the Thunderbolt link alone mpirun loses its daemon at the same moment
// (the second case), which Open MPI reports first, once TCP keepalive
// notices (its default waits 300 s; the MCA settings shorten it).
func TestMPILinkDown(t *testing.T) {
	needMPI(t)
	bin := mpiPingpongBin(t)
	for _, c := range []struct {
		name string
		lan  bool
		mca  []string
		want string
		kill bool // kill rank 1 instead of taking its link down
	}{
		{"lan", true, []string{"oob_tcp_if_include", "lan0"}, "transport retry counter exceeded", false},
		{"thunderbolt-only", false, []string{"oob_tcp_if_include", "thunderbolt0",
			"oob_tcp_keepalive_time", "3", "oob_tcp_keepalive_intvl", "1", "oob_tcp_keepalive_probes", "3"},
			"ORTE has lost communication with a remote daemon", false},
		// The peer's process dies (SIGKILL): its daemon sees it and mpirun
		// ends the job.
		{"peer-killed", false, nil, "exited on signal 9", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := NewLink(t)
			hosts := []mpiNode{{l.NsA, l.AddrA}, {l.NsB, l.AddrB}}
			if c.lan {
				s := allocSubnet()
				la, lb := fmt.Sprintf("198.18.%d.1", s), fmt.Sprintf("198.18.%d.2", s)
				veth(t, l.NsA, "lan0", la, l.NsB, "lan0", lb)
				hosts = []mpiNode{{l.NsA, la}, {l.NsB, lb}}
			}
			env := append([]string{"UCX_NET_DEVICES=tb_thunderbolt0:1"}, ucxRC...)
			j := mpiJob{hosts: hosts, mca: append(append([]string{}, pmlUCX...), c.mca...), env: env,
				argv: []string{bin, "-n", "100000000"}}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s := Start(t, j.cmd(ctx, t))
			// Both ranks have their rc_verbs endpoint: the loop is running.
			lane := regexp.MustCompile(`ep_cfg\[\d+\]: tag\(rc_verbs/tb_thunderbolt0:1\)`)
			for end := time.Now().Add(time.Minute); len(lane.FindAllString(s.Output(), -1)) < 2; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("the job did not start in a minute\n%s", indent(s.Output()))
				}
			}
			time.Sleep(time.Second)
			down := time.Now()
			if c.kill {
				killRank(t, l.NsB, filepath.Base(bin))
				progress("TestMPILinkDown/%s: rank 1 killed; waiting for mpirun to exit", c.name)
			} else {
				ipCmd(t, "-n", l.NsB, "link", "set", "thunderbolt0", "down")
				progress("TestMPILinkDown/%s: rank 1's link is down; waiting for mpirun to exit", c.name)
			}
			r := s.Wait()
			took := time.Since(down)
			if r.Err == nil || !strings.Contains(r.Out, c.want) || took > 60*time.Second {
				t.Fatalf("mpirun: %v %v after the fault; want non-zero within 60 s, naming %q\n%s",
					errText(r.Err), took.Round(time.Millisecond), c.want, indent(r.Out))
			}
			t.Logf("mpirun: %v %v after the fault, %q", errText(r.Err), took.Round(time.Millisecond), c.want)
		})
	}
}

// killRank kills (SIGKILL) the processes named comm in namespace ns: a
// rank of the job this test started.
func killRank(t *testing.T, ns, comm string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v", ns, err)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		b, err := os.ReadFile("/proc/" + f + "/comm")
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		pid, _ := strconv.Atoi(f)
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no %s process in %s to kill", comm, ns)
	}
}
