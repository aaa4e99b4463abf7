package discovery

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Interoperability with a real avahi-daemon (Debian packages avahi-daemon,
// avahi-utils and dbus-daemon), across the two namespaces of newTestNet.
// Each test runs a private avahi-daemon in one namespace: its own config
// file, a private D-Bus system bus (dbus-daemon with a socket in
// t.TempDir(), reached through DBUS_SYSTEM_BUS_ADDRESS), and a private
// tmpfs on /run (the daemon keeps its pid file and socket in
// /run/avahi-daemon), so a system avahi-daemon or D-Bus is never touched.
//
// Timings are measured and logged, not asserted: the only bound checked is
// that a service disappears well before any of its records could have
// expired (goodbyeBound), i.e. that the goodbye removed it.

// goodbyeBound is the longest wait for a removal: a quarter of the
// shortest record TTL (120 s). A peer removed later than that was not
// removed by its goodbye.
const goodbyeBound = HostTTL / 4

// appearWait bounds the wait for a service to appear (a hung test, not a
// measurement).
const appearWait = 15 * time.Second

type avahi struct {
	ns   string
	bus  string // D-Bus address for DBUS_SYSTEM_BUS_ADDRESS
	host string // avahi's host name, without .local
	dir  string
	log  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func needAvahi(t *testing.T) {
	t.Helper()
	needRoot(t, "avahi-daemon", "avahi-browse", "avahi-publish", "dbus-daemon", "sh", "mount")
}

const dbusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

const avahiConfig = `[server]
host-name=%s
allow-interfaces=thunderbolt0
use-ipv4=yes
use-ipv6=yes
enable-dbus=yes
[wide-area]
enable-wide-area=no
[publish]
publish-addresses=yes
publish-hinfo=no
publish-workstation=no
[reflector]
enable-reflector=no
`

// startAvahi starts a private D-Bus system bus and avahi-daemon in ns and
// waits for the daemon's "Server startup complete".
func startAvahi(t *testing.T, ns string) *avahi {
	t.Helper()
	dir := t.TempDir()
	av := &avahi{ns: ns, dir: dir, host: "tbrdma-avahi-" + uniq()[:6], log: &lockedBuffer{}}

	sock := filepath.Join(dir, "bus")
	if err := os.WriteFile(filepath.Join(dir, "dbus.conf"), fmt.Appendf(nil, dbusConfig, sock), 0o644); err != nil {
		t.Fatal(err)
	}
	dbus := exec.Command("dbus-daemon", "--config-file="+filepath.Join(dir, "dbus.conf"), "--nofork", "--print-address")
	dbus.Stderr = av.log
	out, err := dbus.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dbus.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { terminate(dbus) })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v\n%s", err, av.log)
	}
	av.bus = strings.TrimSpace(addr)

	conf := filepath.Join(dir, "avahi-daemon.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, avahiConfig, av.host), 0o644); err != nil {
		t.Fatal(err)
	}
	// ip netns exec gives the command a mount namespace of its own, so the
	// tmpfs on /run stays private to this daemon.
	d := exec.Command("ip", "netns", "exec", ns, "sh", "-c",
		"mount -t tmpfs tbrdma-avahi /run && exec avahi-daemon --no-drop-root --no-chroot --no-rlimits -f "+conf)
	d.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+av.bus)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d.Stdout, d.Stderr = pw, pw
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() { terminate(d) })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(av.log, sc.Text())
			if strings.Contains(sc.Text(), "Server startup complete") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(appearWait):
		t.Fatalf("avahi-daemon did not start:\n%s", av.log)
	}
	fmt.Fprintf(os.Stderr, "avahi: avahi-daemon %s.local running in %s\n", av.host, ns)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("avahi-daemon and dbus-daemon output:\n%s", av.log)
		}
	})
	return av
}

// terminate stops a process this test started: SIGTERM, then SIGKILL.
func terminate(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.Process.Kill()
		<-done
	}
}

// command returns an avahi client command run in the daemon's namespace
// and bus.
func (av *avahi) command(name string, args ...string) *exec.Cmd {
	c := exec.Command("ip", append([]string{"netns", "exec", av.ns, name}, args...)...)
	c.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+av.bus)
	return c
}

// browseLine is one line of avahi-browse -p output.
type browseLine struct {
	at     time.Time
	ev     string // +, -, =
	iface  string
	proto  string // IPv4, IPv6
	name   string // unescaped
	host   string
	addr   string
	port   int
	txt    map[string]string
	rawTXT []string
}

// parseBrowseLine parses "+;if;IPv4;name;type;domain" and
// "=;if;IPv4;name;type;domain;host;addr;port;"k=v" "k2=v2"".
func parseBrowseLine(s string) (browseLine, bool) {
	f := strings.Split(s, ";")
	if len(f) < 6 || (f[0] != "+" && f[0] != "-" && f[0] != "=") {
		return browseLine{}, false
	}
	l := browseLine{ev: f[0], iface: f[1], proto: f[2], name: unescapeAvahi(f[3])}
	if f[0] == "=" {
		if len(f) < 10 {
			return browseLine{}, false
		}
		l.host, l.addr = f[6], f[7]
		l.port, _ = strconv.Atoi(f[8])
		txt := strings.Join(f[9:], ";")
		if txt != "" {
			l.rawTXT = strings.Split(strings.TrimSuffix(strings.TrimPrefix(txt, `"`), `"`), `" "`)
		}
		l.txt = map[string]string{}
		for _, kv := range l.rawTXT {
			k, v, _ := strings.Cut(kv, "=")
			l.txt[k] = v
		}
	}
	return l, true
}

// unescapeAvahi undoes avahi's label escaping (\DDD decimal, \c).
func unescapeAvahi(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isDigits(s[i+1:i+4]) {
			n, _ := strconv.Atoi(s[i+1 : i+4])
			b.WriteByte(byte(n))
			i += 3
			continue
		}
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(s) > 0
}

// browser is a running `avahi-browse -rp` whose lines arrive timestamped.
type avahiBrowser struct {
	cmd   *exec.Cmd
	lines chan browseLine
}

func (av *avahi) browse(t *testing.T, service string) *avahiBrowser {
	t.Helper()
	c := av.command("avahi-browse", "-rp", service)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = av.log
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	b := &avahiBrowser{cmd: c, lines: make(chan browseLine, 64)}
	go func() {
		defer close(b.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := parseBrowseLine(sc.Text()); ok {
				l.at = time.Now()
				fmt.Fprintf(os.Stderr, "avahi-browse: %s\n", sc.Text())
				b.lines <- l
			}
		}
	}()
	t.Cleanup(func() { terminate(c) })
	return b
}

// wait returns the first line of event ev, IPv4, for instance name.
func (b *avahiBrowser) wait(t *testing.T, ev, name string, timeout time.Duration) browseLine {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-b.lines:
			if !ok {
				t.Fatalf("avahi-browse ended before %s %q", ev, name)
			}
			if l.ev == ev && l.name == name && l.proto == "IPv4" {
				return l
			}
		case <-deadline:
			t.Fatalf("avahi-browse: no %q line for %q within %v", ev, name, timeout)
		}
	}
}

// oneShot runs avahi-browse -rpt (or -pt) and returns its lines.
func (av *avahi) oneShot(t *testing.T, args ...string) []browseLine {
	t.Helper()
	c := av.command("avahi-browse", args...)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("avahi-browse %v: %v\n%s", args, err, out)
	}
	var ls []browseLine
	for s := range strings.Lines(string(out)) {
		if l, ok := parseBrowseLine(strings.TrimSpace(s)); ok {
			ls = append(ls, l)
		}
	}
	return ls
}

// checkAvahiResolved checks a resolved line against the advertised service.
func checkAvahiResolved(t *testing.T, l browseLine, s Service, host, addr string) {
	t.Helper()
	want := map[string]string{}
	for _, p := range s.txt() {
		want[p.key] = p.value
	}
	if l.host != host || l.addr != addr || l.port != int(s.Port) || l.iface != "thunderbolt0" {
		t.Errorf("avahi resolved host %s address %s port %d on %s, want %s %s %d on thunderbolt0",
			l.host, l.addr, l.port, l.iface, host, addr, s.Port)
	}
	if !maps.Equal(l.txt, want) || len(l.rawTXT) != len(want) {
		t.Errorf("avahi TXT %q, want every key of %v", l.rawTXT, want)
	}
}

// TestAvahiSeesTbrdma: an avahi-browse started before tbrdma advertises
// lists and resolves the service (address, port, every TXT key) and drops
// it after tbrdma's goodbye; one-shot avahi-browse -rpt agrees.
func TestAvahiSeesTbrdma(t *testing.T) {
	needAvahi(t)
	n := newTestNet(t)
	av := startAvahi(t, n.b)
	testAvahiSeesTbrdma(t, av, n.a, netnsAddrA)
}

// TestAvahiSameHost: avahi-daemon and tbrdma in one namespace (one
// host): each sees the other's services.
func TestAvahiSameHost(t *testing.T) {
	needAvahi(t)
	n := newTestNet(t)
	av := startAvahi(t, n.b)
	t.Run("avahi-browse", func(t *testing.T) { testAvahiSeesTbrdma(t, av, n.b, netnsAddrB) })
	t.Run("tbrdma", func(t *testing.T) { testTbrdmaSeesAvahi(t, av, n.b) })
}

func testAvahiSeesTbrdma(t *testing.T, av *avahi, advNS, advAddr string) {
	br := av.browse(t, ServiceType)
	time.Sleep(time.Second) // the browse is running before tbrdma starts

	name := "tbrdma-" + uniq()[:6]
	adv := startHelper(t, advNS, "advertise", "TBRDMA_NETNS_NAMES="+name)
	start := adv.wait(t, "starting", appearWait, nil)
	ad := adv.wait(t, "advertised", appearWait, nil)
	l := br.wait(t, "=", name, appearWait)
	appear := l.at.Sub(start.Time)
	t.Logf("avahi-browse (running) resolved %q %v after Advertise started (%v after it returned)",
		name, appear.Round(time.Millisecond), l.at.Sub(ad.Time).Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "FIGURE avahi-browse sees tbrdma: %v after start\n", appear.Round(time.Millisecond))
	s := testService(name)
	checkAvahiResolved(t, l, s, ad.Host, advAddr)

	// One-shot browse: lists and resolves it too.
	found := false
	for _, l := range av.oneShot(t, "-rpt", ServiceType) {
		if l.ev == "=" && l.name == name && l.proto == "IPv4" {
			found = true
			checkAvahiResolved(t, l, s, ad.Host, advAddr)
		}
	}
	if !found {
		t.Errorf("avahi-browse -rpt did not resolve %q", name)
	}

	adv.stdin.Close()
	closing := adv.wait(t, "closing", appearWait, nil)
	l = br.wait(t, "-", name, goodbyeBound)
	gone := l.at.Sub(closing.Time)
	t.Logf("avahi-browse dropped %q %v after Close", name, gone.Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "FIGURE avahi-browse drops tbrdma: %v after Close\n", gone.Round(time.Millisecond))
	for _, l := range av.oneShot(t, "-pt", ServiceType) {
		if l.name == name {
			t.Errorf("avahi-browse -pt still lists %q after the goodbye: %+v", name, l)
		}
	}
}

// TestTbrdmaSeesAvahi: two instances published by avahi-publish on one
// host are found by tbrdma's Watch (started first), Browse and Resolve,
// with port and TXT; stopping avahi-publish (Avahi's goodbye) makes the
// instance leave the Watch.
func TestTbrdmaSeesAvahi(t *testing.T) {
	needAvahi(t)
	n := newTestNet(t)
	av := startAvahi(t, n.b)
	testTbrdmaSeesAvahi(t, av, n.a)
}

func testTbrdmaSeesAvahi(t *testing.T, av *avahi, watchNS string) {
	watch := startHelper(t, watchNS, "watch")
	watch.wait(t, "watching", appearWait, nil)

	id := uniq()[:6]
	type pub struct {
		name string
		port uint16
		txt  []string
	}
	pubs := []pub{
		{"avahi one " + id, 4791, []string{"txtvers=1", "gid=::ffff:" + netnsAddrB, "mtu=4096", "dev=rxe0", "caps=rc,ud"}},
		{"avahi.two-" + id, 4792, []string{"txtvers=1", "dev=rxe1", "flag"}},
	}
	var procs []*exec.Cmd
	var started []time.Time
	for _, p := range pubs {
		c := av.command("avahi-publish", append([]string{"-s", p.name, ServiceType, strconv.Itoa(int(p.port))}, p.txt...)...)
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.Stderr = c.Stdout
		started = append(started, time.Now())
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { terminate(c) })
		procs = append(procs, c)
		established := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			once := sync.Once{}
			for sc.Scan() {
				fmt.Fprintf(os.Stderr, "avahi-publish: %s\n", sc.Text())
				if strings.HasPrefix(sc.Text(), "Established") {
					once.Do(func() { close(established) })
				}
			}
		}()
		select {
		case <-established:
		case <-time.After(appearWait):
			t.Fatalf("avahi-publish %q: not established", p.name)
		}
	}
	check := func(what string, got Peer, p pub) {
		t.Helper()
		want := map[string]string{}
		for _, kv := range p.txt {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
		if got.Port != p.port || !maps.Equal(got.TXT, want) || got.Host != av.host+".local" ||
			!slices.ContainsFunc(got.Addrs, func(a netip.Addr) bool { return a.String() == netnsAddrB }) {
			t.Errorf("%s %q: got %+v, want port %d, TXT %v, host %s.local, address %s", what, p.name, got, p.port, want, av.host, netnsAddrB)
		}
	}
	hasV4 := func(p *Peer) bool {
		return slices.ContainsFunc(p.Addrs, func(a netip.Addr) bool { return a.String() == netnsAddrB })
	}
	// Avahi answers A on IPv4 and AAAA on IPv6: a peer may appear with
	// the address whose answer came first, then change.
	latest := map[string]*Peer{}
	appeared := map[string]time.Time{}
	complete := func() bool {
		for _, p := range pubs {
			if latest[p.name] == nil || !hasV4(latest[p.name]) {
				return false
			}
		}
		return true
	}
	deadline := time.After(appearWait)
	for !complete() {
		select {
		case m, ok := <-watch.msgs:
			if !ok {
				t.Fatal("watch helper ended")
			}
			if m.Ev != "event" {
				continue
			}
			latest[m.Peer.Name] = m.Peer
			if m.Type == "appeared" {
				appeared[m.Peer.Name] = m.Time
			}
		case <-deadline:
			t.Fatalf("Watch did not report both instances with address %s within %v: %v", netnsAddrB, appearWait, latest)
		}
	}
	for i, p := range pubs {
		d := appeared[p.name].Sub(started[i])
		t.Logf("Watch saw %q %v after avahi-publish started", p.name, d.Round(time.Millisecond))
		fmt.Fprintf(os.Stderr, "FIGURE tbrdma Watch sees avahi-publish: %v after start\n", d.Round(time.Millisecond))
		check("Watch", *latest[p.name], p)
	}

	browse := startHelper(t, watchNS, "browse")
	peers := browse.wait(t, "peers", appearWait, nil).Peers
	for _, p := range pubs {
		got, ok := find(peers, p.name)
		if !ok {
			t.Errorf("Browse did not find %q in %v", p.name, peers)
			continue
		}
		check("Browse", got, p)
	}

	resolve := startHelper(t, watchNS, "resolve", "TBRDMA_NETNS_NAMES="+pubs[0].name+","+pubs[1].name)
	for _, p := range pubs {
		m := resolve.wait(t, "resolved", appearWait, func(m helperMsg) bool { return m.Name == p.name })
		t.Logf("Resolve %q: %v in %s", p.name, m.Peer, m.Took)
		check("Resolve", *m.Peer, p)
	}

	// avahi-publish withdraws its entry group on SIGTERM: goodbye.
	stopped := time.Now()
	terminate(procs[0])
	m := watch.wait(t, "event", goodbyeBound, func(m helperMsg) bool { return m.Type == "left" && m.Peer.Name == pubs[0].name })
	d := m.Time.Sub(stopped)
	t.Logf("Watch saw %q leave %v after avahi-publish stopped", pubs[0].name, d.Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "FIGURE tbrdma Watch drops avahi-publish: %v after stop\n", d.Round(time.Millisecond))
}
