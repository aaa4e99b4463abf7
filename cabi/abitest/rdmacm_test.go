//go:build tbrdma_abitest

package abitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The librdmacm half of the library: Debian 12's rdmacm-utils and perftest
// with the library on both ends, between two namespaces, and against the
// tbrdma CLI.

// lined runs argv with stdout line-buffered (stdbuf -oL), so that a
// server's "listening" line shows before it is killed or ends.
func lined(ctx context.Context, t testing.TB, ns string, argv ...string) *exec.Cmd {
	return Command(ctx, t, ns, append([]string{"stdbuf", "-oL"}, argv...)...)
}

// cmPair starts server, waits until it printed ready (its rdma_listen is
// then microseconds away), gives it settle more, runs client, and
// returns both results; both must end within timeout.
func cmPair(t *testing.T, timeout time.Duration, server, client func(ctx context.Context) *exec.Cmd, ready string) (srv, cli Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s := Start(t, server(ctx))
	if !s.WaitFor(ready, 15*time.Second) {
		cancel()
		r := s.Wait()
		t.Fatalf("server did not print %q within 15s: %v\n%s", ready, r.Err, r.Out)
	}
	time.Sleep(300 * time.Millisecond)
	cli = Start(t, client(ctx)).Wait()
	srv = s.Wait()
	if ctx.Err() != nil {
		t.Errorf("the pair did not finish within %v", timeout)
	}
	return srv, cli
}

func mustExit0(t *testing.T, who string, r Result) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: %v after %v\n%s", who, r.Err, r.Took.Round(time.Millisecond), r.Out)
	}
}

func mustContain(t *testing.T, who string, r Result, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(r.Out, w) {
			t.Fatalf("%s: output lacks %q:\n%s", who, w, r.Out)
		}
	}
}

// rpingData is what rping -v prints after "ping data: " for iteration i
// with size bytes (rping's own pattern: "rdma-ping-<i>: " then the letters
// from 'A'+i on, cycling through 'A'..'z', the last byte a NUL).
func rpingData(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	c := byte(65 + i%58)
	for len(b) < size-1 {
		b = append(b, c)
		if c++; c > 122 {
			c = 65
		}
	}
	return string(b[:size-1])
}

// checkRpingData checks that out has exactly n lines prefix+data, for the
// iterations 0..n-1 in order.
func checkRpingData(t *testing.T, who, out, prefix string, n int) {
	t.Helper()
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			got = append(got, strings.TrimPrefix(line, prefix))
		}
	}
	if len(got) != n {
		t.Fatalf("%s: %d %q lines, want %d:\n%s", who, len(got), prefix, n, out)
	}
	for i, g := range got {
		if want := rpingData(i, 64); g != want {
			t.Fatalf("%s: iteration %d carried %q, want %q", who, i, g, want)
		}
	}
}

var cmaEvent = regexp.MustCompile(`cma_event type (RDMA_CM_EVENT_[A-Z_]+)`)

// checkEvents checks the rdma_cm events rping -d reported, in order. A
// DISCONNECTED after them is allowed: the side that disconnects first gets
// one when the peer's DREP comes, if it still reads events by then.
func checkEvents(t *testing.T, who, out string, want ...string) {
	t.Helper()
	var got []string
	for _, m := range cmaEvent.FindAllStringSubmatch(out, -1) {
		got = append(got, strings.TrimPrefix(m[1], "RDMA_CM_EVENT_"))
	}
	if n := len(got); n == len(want)+1 && got[n-1] == "DISCONNECTED" && want[n-2] != "DISCONNECTED" {
		got = got[:n-1]
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s: events %v, want %v:\n%s", who, got, want, out)
	}
}

// TestRdmacmRping runs rping's ten iterations with the data printed and
// checked on both sides: a server bound to its address, one bound to the
// wildcard address (every device), and both sides with QPs they create and
// move themselves through rdma_init_qp_attr and rdma_establish (-q).
func TestRdmacmRping(t *testing.T) {
	need(t, "rping", "stdbuf")
	l := NewLink(t)
	for _, c := range []struct {
		name             string
		server, client   []string
		clientEvents     []string
		serverEventsLast string
	}{
		{"bound", []string{"-a", l.AddrA}, nil, []string{"ADDR_RESOLVED", "ROUTE_RESOLVED", "ESTABLISHED"}, "DISCONNECTED"},
		{"wildcard", nil, nil, []string{"ADDR_RESOLVED", "ROUTE_RESOLVED", "ESTABLISHED"}, "DISCONNECTED"},
		{"self-made-QPs", []string{"-q"}, []string{"-q"}, []string{"ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECT_RESPONSE"}, "DISCONNECTED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			progress("rping %s: server in %s, client in %s", c.name, l.NsA, l.NsB)
			srv, cli := cmPair(t, 60*time.Second,
				func(ctx context.Context) *exec.Cmd {
					return lined(ctx, t, l.NsA, append([]string{"rping", "-s", "-v", "-d", "-C", "10"}, c.server...)...)
				},
				func(ctx context.Context) *exec.Cmd {
					return lined(ctx, t, l.NsB, append([]string{"rping", "-c", "-v", "-d", "-C", "10", "-a", l.AddrA}, c.client...)...)
				}, "rdma_listen")
			mustExit0(t, "rping -c", cli)
			mustExit0(t, "rping -s", srv)
			checkRpingData(t, "rping -c", cli.Out, "ping data: ", 10)
			checkRpingData(t, "rping -s", srv.Out, "server ping data: ", 10)
			checkEvents(t, "rping -c", cli.Out, c.clientEvents...)
			checkEvents(t, "rping -s", srv.Out, "CONNECT_REQUEST", "ESTABLISHED", c.serverEventsLast)
		})
	}
}

// TestRdmacmUdaddy resolves UD peers over rdma_cm (SIDR) and exchanges
// datagrams both ways.
func TestRdmacmUdaddy(t *testing.T) {
	need(t, "udaddy", "stdbuf")
	l := NewLink(t)
	progress("udaddy: server in %s, client in %s", l.NsA, l.NsB)
	srv, cli := cmPair(t, 60*time.Second,
		func(ctx context.Context) *exec.Cmd { return lined(ctx, t, l.NsA, "udaddy") },
		func(ctx context.Context) *exec.Cmd { return lined(ctx, t, l.NsB, "udaddy", "-s", l.AddrA) },
		"udaddy: starting server")
	mustExit0(t, "udaddy -s", cli)
	mustExit0(t, "udaddy", srv)
	mustContain(t, "udaddy -s", cli, "initiating data transfers", "receiving data transfers", "data transfers complete", "test complete", "return status 0")
	mustContain(t, "udaddy", srv, "receiving data transfers", "sending replies", "data transfers complete", "test complete", "return status 0")
}

// TestRdmacmUcmatose connects, moves data both ways and disconnects, the
// server waiting for its DISCONNECTED events; then with three connections
// on one channel, migrated to a new channel before the disconnect
// (rdma_migrate_id).
func TestRdmacmUcmatose(t *testing.T) {
	need(t, "ucmatose", "stdbuf")
	l := NewLink(t)
	for _, c := range []struct {
		name  string
		extra []string
	}{{"one", nil}, {"three-migrated", []string{"-c", "3", "-m"}}} {
		t.Run(c.name, func(t *testing.T) {
			progress("ucmatose %v: server in %s, client in %s", c.extra, l.NsA, l.NsB)
			srv, cli := cmPair(t, 60*time.Second,
				func(ctx context.Context) *exec.Cmd {
					return lined(ctx, t, l.NsA, append([]string{"ucmatose"}, c.extra...)...)
				},
				func(ctx context.Context) *exec.Cmd {
					return lined(ctx, t, l.NsB, append([]string{"ucmatose", "-s", l.AddrA}, c.extra...)...)
				}, "cmatose: starting server")
			mustExit0(t, "ucmatose -s", cli)
			mustExit0(t, "ucmatose", srv)
			mustContain(t, "ucmatose -s", cli, "receiving data transfers", "data transfers complete", "test complete", "return status 0")
			mustContain(t, "ucmatose", srv, "data transfers complete", "cmatose: disconnecting", "disconnected", "test complete", "return status 0")
			if c.extra != nil {
				mustContain(t, "ucmatose", srv, "migrating to new event channel")
				mustContain(t, "ucmatose -s", cli, "migrating to new event channel")
			}
		})
	}
}

// hostName gives namespace ns a hosts file (ip netns exec binds
// /etc/netns/NS/hosts over /etc/hosts) in which name is addr.
func hostName(t *testing.T, ns, name, addr string) {
	t.Helper()
	_, statErr := os.Stat("/etc/netns")
	dir := "/etc/netns/" + ns
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		if statErr != nil {
			os.Remove("/etc/netns") // made here; left if others use it
		}
	})
	if err := os.WriteFile(dir+"/hosts", []byte(addr+" "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRdmacmServerClient runs the synchronous-mode examples: rdma_getaddrinfo
// (an address, and a host name through the system resolver), rdma_create_ep
// (a default PD, CQs and channels made for the QP), rdma_get_request,
// rdma_accept, rdma_connect and the rdma_verbs.h helpers.
func TestRdmacmServerClient(t *testing.T) {
	need(t, "rdma_server", "rdma_client", "stdbuf")
	l := NewLink(t)
	hostName(t, l.NsB, "tbrdma-cm-peer", l.AddrA)
	for _, c := range []struct{ name, server string }{{"address", l.AddrA}, {"host-name", "tbrdma-cm-peer"}} {
		t.Run(c.name, func(t *testing.T) {
			progress("rdma_server in %s, rdma_client -s %s in %s", l.NsA, c.server, l.NsB)
			srv, cli := cmPair(t, 60*time.Second,
				func(ctx context.Context) *exec.Cmd { return lined(ctx, t, l.NsA, "rdma_server") },
				func(ctx context.Context) *exec.Cmd { return lined(ctx, t, l.NsB, "rdma_client", "-s", c.server) },
				"rdma_server: start")
			mustExit0(t, "rdma_client", cli)
			mustExit0(t, "rdma_server", srv)
			mustContain(t, "rdma_client", cli, "rdma_client: end 0")
			mustContain(t, "rdma_server", srv, "rdma_server: end 0")
		})
	}
}

// TestRdmacmRefused connects to a port nobody listens on, on a machine
// whose CM answers (an rping server listens on another port): each
// program must stop soon with the kernel's status, REJECTED 8 (invalid
// service ID), ECONNREFUSED from a synchronous rdma_connect, UNREACHABLE 1
// (SIDR: service ID not supported) for UD. (An RC connection tries for a
// second before it reports REJECTED 8: docs/cabi.md.)
func TestRdmacmRefused(t *testing.T) {
	need(t, "rping", "rdma_client", "udaddy", "stdbuf")
	l := NewLink(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := Start(t, lined(ctx, t, l.NsA, "rping", "-s", "-d", "-a", l.AddrA))
	if !s.WaitFor("rdma_listen", 15*time.Second) {
		t.Fatalf("rping -s did not listen:\n%s", s.Output())
	}
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"rping", "-c", "-a", l.AddrA, "-p", "7999", "-C", "1"}, "cma event RDMA_CM_EVENT_REJECTED, error 8"},
		{[]string{"rdma_client", "-s", l.AddrA, "-p", "7999"}, "rdma_connect: Connection refused"},
		// udaddy's port is rping's, 7174, but in the UDP port space.
		{[]string{"udaddy", "-s", l.AddrA}, "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1"},
	} {
		name := strings.Join(c.argv, " ")
		progress("%s: must be refused", name)
		r := Run(t, Command(ctx, t, l.NsB, c.argv...))
		if r.Err == nil {
			t.Fatalf("%s exited 0:\n%s", name, r.Out)
		}
		if r.Took > 10*time.Second {
			t.Errorf("%s took %v to be refused", name, r.Took)
		}
		mustContain(t, name, r, c.want)
	}
}

var perftestRow = regexp.MustCompile(`(?m)^\s*\d+\s+200\s+\d`)

// TestRdmacmPerftest runs perftest with its QPs connected by rdma_cm (-R):
// rdma_create_qp_ex with the new post-send API, READ resources, SENDs.
func TestRdmacmPerftest(t *testing.T) {
	need(t, "ib_write_bw", "ib_read_lat", "ib_send_bw", "stdbuf")
	l := NewLink(t)
	for _, args := range [][]string{
		{"ib_write_bw", "-R", "-x", "1", "-n", "200"},
		{"ib_read_lat", "-R", "-n", "200"},
		{"ib_send_bw", "-R", "-n", "200"},
	} {
		t.Run(args[0], func(t *testing.T) {
			progress("%s: server in %s, client in %s", strings.Join(args, " "), l.NsA, l.NsB)
			srv, cli := cmPair(t, 90*time.Second,
				func(ctx context.Context) *exec.Cmd { return lined(ctx, t, l.NsA, args...) },
				func(ctx context.Context) *exec.Cmd { return lined(ctx, t, l.NsB, append(args, l.AddrA)...) },
				"Waiting for client to connect")
			mustExit0(t, args[0]+" client", cli)
			mustExit0(t, args[0]+" server", srv)
			for who, r := range map[string]Result{"client": cli, "server": srv} {
				mustContain(t, args[0]+" "+who, r, "rdma_cm QPs\t : ON")
				if who == "server" && strings.HasSuffix(args[0], "_lat") {
					continue // a latency test's server prints no results
				}
				if !perftestRow.MatchString(r.Out) {
					t.Fatalf("%s %s: no result row for 200 iterations:\n%s", args[0], who, r.Out)
				}
			}
		})
	}
}

// TestRdmacmRstream: rsockets are not supported; rstream must say so and
// stop at once, on either side.
func TestRdmacmRstream(t *testing.T) {
	need(t, "rstream")
	l := NewLink(t)
	for _, argv := range [][]string{{"rstream"}, {"rstream", "-s", l.AddrA}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r := Run(t, Command(ctx, t, l.NsB, argv...))
		timedOut := ctx.Err() != nil
		cancel()
		name := strings.Join(argv, " ")
		if r.Err == nil || timedOut {
			t.Fatalf("%s: want a quick failure, got %v after %v:\n%s", name, r.Err, r.Took, r.Out)
		}
		if r.Took > 5*time.Second {
			t.Errorf("%s took %v to fail", name, r.Took)
		}
		if n := strings.Count(r.Out, "tbrdma: rsockets"); n != 1 {
			t.Fatalf("%s: the rsockets message %d times, want once:\n%s", name, n, r.Out)
		}
		mustContain(t, name, r, "are not supported by tbrdma's librdmacm", "Operation not supported")
	}
}

// TestRdmacmCLIInterop: the library's rping against the tbrdma CLI's
// rping-compatible ends (docs/cli.md, "ping and serve").
func TestRdmacmCLIInterop(t *testing.T) {
	need(t, "rping", "stdbuf")
	l := NewLink(t)
	bin := tbrdmaBin(t)

	t.Run("rping-c-to-tbrdma-serve", func(t *testing.T) {
		progress("tbrdma serve in %s, rping -c in %s", l.NsA, l.NsB)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s := Start(t, CommandNative(ctx, l.NsA, bin, "serve", "--no-advertise", "--oob-port", "0", "-v", "--bind", l.AddrA))
		if !s.WaitFor("listening on", 15*time.Second) {
			t.Fatalf("tbrdma serve did not start:\n%s", s.Output())
		}
		cli := Run(t, lined(ctx, t, l.NsB, "rping", "-c", "-v", "-C", "5", "-a", l.AddrA))
		mustExit0(t, "rping -c", cli)
		checkRpingData(t, "rping -c", cli.Out, "ping data: ", 5)
		if !s.WaitFor("closed after 5 pings", 10*time.Second) {
			t.Fatalf("tbrdma serve did not see the client go:\n%s", s.Output())
		}
		s.cmd.Process.Signal(os.Interrupt)
		srv := s.Wait()
		checkRpingData(t, "tbrdma serve", srv.Out, "server ping data: ", 5)
	})

	t.Run("tbrdma-ping-to-rping-s", func(t *testing.T) {
		progress("rping -s in %s, tbrdma ping in %s", l.NsA, l.NsB)
		srv, cli := cmPair(t, 60*time.Second,
			func(ctx context.Context) *exec.Cmd {
				return lined(ctx, t, l.NsA, "rping", "-s", "-v", "-d", "-C", "5", "-a", l.AddrA)
			},
			func(ctx context.Context) *exec.Cmd {
				return CommandNative(ctx, l.NsB, bin, "ping", "-c", "5", "-i", "0.1", l.AddrA)
			}, "rdma_listen")
		mustExit0(t, "tbrdma ping", cli)
		mustExit0(t, "rping -s", srv)
		mustContain(t, "tbrdma ping", cli, "5 packets transmitted, 5 received, 0% packet loss")
		checkRpingData(t, "rping -s", srv.Out, "server ping data: ", 5)
		checkEvents(t, "rping -s", srv.Out, "CONNECT_REQUEST", "ESTABLISHED", "DISCONNECTED")
	})
}

// TestRdmacmPeerKilled kills the server of an ib_write_bw -R run (SIGKILL:
// no exit handler, no DREQ) while the client streams WRITEs. The client's
// QP must report the loss within the bound its CM attributes give (ACK
// timeout 19, 4.096 µs × 2^19 = 2.147 s, retry_cnt 7: 8 × 2.147 s =
// 17.2 s, docs/reliability.md) and the client fail. (A peer's death is
// seen on the data path only while work is outstanding: an idle QP, such
// as an rping client waiting for its server's next message, notices
// nothing, over tbrdma as over the kernel.)
func TestRdmacmPeerKilled(t *testing.T) {
	need(t, "ib_write_bw", "stdbuf")
	l := NewLink(t)
	progress("ib_write_bw -R: server in %s killed mid-run, client in %s must fail within the QP's bound", l.NsA, l.NsB)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"ib_write_bw", "-R", "-x", "1", "-F", "-s", "65536", "-n", "5000000"}
	s := Start(t, lined(ctx, t, l.NsA, args...))
	time.Sleep(time.Second)
	c := Start(t, lined(ctx, t, l.NsB, append(args, l.AddrA)...))
	if !c.WaitFor("#bytes", 20*time.Second) {
		t.Fatalf("the client did not start its test:\n%s\nserver:\n%s", c.Output(), s.Output())
	}
	time.Sleep(500 * time.Millisecond)
	s.cmd.Process.Kill()
	killed := time.Now()
	s.Wait()
	cli := c.Wait()
	took := time.Since(killed)
	progress("client ended %v after the kill: %v", took.Round(time.Millisecond), cli.Err)
	if cli.Err == nil {
		t.Fatalf("ib_write_bw -R exited 0 after its server was killed:\n%s", tail(cli.Out, 20))
	}
	const bound = 17179869184 * time.Nanosecond
	if took > bound+10*time.Second {
		t.Fatalf("ib_write_bw -R ended %v after the kill, want within the QP's bound %v (+10s):\n%s", took, bound, tail(cli.Out, 20))
	}
	if took < bound/2 {
		t.Errorf("ib_write_bw -R ended %v after the kill, sooner than the QP's retries allow (%v): was it the loss that ended it?\n%s", took, bound, tail(cli.Out, 20))
	}
	mustContain(t, "ib_write_bw -R", cli, "Completion with error")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cmProbe is a small librdmacm program for what no stock tool shows: the
// channel fd as UCX and libfabric use it (O_NONBLOCK, EAGAIN, epoll), the
// ID fields after each event, failures that must be clean, and an exit
// without cleanup.
const cmProbe = `
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...) do { if (!(c)) { printf("FAIL line %d: ", __LINE__); printf(__VA_ARGS__); printf("\n"); exit(1); } } while (0)

static struct rdma_addrinfo *addr(const char *host, const char *port)
{
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	int r = rdma_getaddrinfo(host, port, &hints, &res);
	CHECK(r == 0, "rdma_getaddrinfo %s: %s", host, gai_strerror(r));
	CHECK(res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP,
	      "rdma_getaddrinfo: family %d qp type %d port space %#x", res->ai_family, res->ai_qp_type, res->ai_port_space);
	return res;
}

static void api(const char *peer)
{
	int n = 0;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n >= 1 && devs[0], "rdma_get_devices: %d", n);
	rdma_free_devices(devs);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "an empty non-blocking channel: errno %d", errno);

	struct rdma_cm_id *id;
	int ctx;
	CHECK(rdma_create_id(ch, &id, &ctx, RDMA_PS_TCP) == 0, "rdma_create_id: %s", strerror(errno));
	CHECK(id->channel == ch && id->context == &ctx && id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC && !id->verbs,
	      "a new ID's fields");
	int ep = epoll_create1(0);
	struct epoll_event ee = {.events = EPOLLIN}, out;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ee) == 0, "epoll_ctl");
	CHECK(epoll_wait(ep, &out, 1, 0) == 0, "epoll sees an event on an empty channel");

	struct rdma_addrinfo *res = addr(peer, "7471");
	CHECK(rdma_resolve_addr(id, NULL, res->ai_dst_addr, 2000) == 0, "rdma_resolve_addr: %s", strerror(errno));
	CHECK(epoll_wait(ep, &out, 1, 5000) == 1, "epoll did not see ADDR_RESOLVED");
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
	CHECK(ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->status == 0 && ev->id == id && !ev->listen_id,
	      "got %s status %d", rdma_event_str(ev->event), ev->status);
	CHECK(id->verbs && id->pd && id->pd->context == id->verbs && id->port_num == 1, "verbs %p pd %p port %d",
	      (void *)id->verbs, (void *)id->pd, id->port_num);
	CHECK(id->route.addr.src_addr.sa_family == AF_INET && id->route.addr.src_sin.sin_addr.s_addr != 0 &&
	      rdma_get_src_port(id) != 0, "source address");
	CHECK(id->route.addr.dst_sin.sin_addr.s_addr == ((struct sockaddr_in *)res->ai_dst_addr)->sin_addr.s_addr &&
	      ntohs(rdma_get_dst_port(id)) == 7471, "destination address");
	rdma_ack_cm_event(ev);
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "a second event");

	CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: %s", strerror(errno));
	CHECK(epoll_wait(ep, &out, 1, 5000) == 1, "epoll did not see ROUTE_RESOLVED");
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED");
	CHECK(id->route.num_paths == 1 && id->route.path_rec && id->route.path_rec->mtu >= IBV_MTU_1024, "path record");
	rdma_ack_cm_event(ev);

	struct sockaddr_in mc = {.sin_family = AF_INET};
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&mc, NULL) == -1 && errno == EOPNOTSUPP, "multicast");
	int tos = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "TOS");
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL, "a second rdma_destroy_id");
	rdma_freeaddrinfo(res);
	rdma_destroy_event_channel(ch);
	printf("api ok\n");
}

/* Connects to an rping server and returns from main without cleanup. */
static void leave(const char *peer)
{
	struct rdma_addrinfo *res = addr(peer, "7174");
	struct ibv_qp_init_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	struct rdma_cm_id *id;
	CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0, "rdma_create_ep: %s", strerror(errno));
	CHECK(id->qp && id->send_cq && id->recv_cq && id->send_cq_channel && id->pd, "rdma_create_ep's QP, CQs, channels, PD");
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.responder_resources = p.initiator_depth = 1;
	p.retry_count = p.rnr_retry_count = 7;
	/* as perftest 24.10 and later do with --qp-timeout on -R connections */
	uint8_t timeout = 14;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout) == 0,
	      "RDMA_OPTION_ID_ACK_TIMEOUT: %s", strerror(errno));
	CHECK(rdma_connect(id, &p) == 0, "rdma_connect: %s", strerror(errno));
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED && id->qp->state == IBV_QPS_RTS,
	      "synchronous rdma_connect left no ESTABLISHED, or the QP not in RTS");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(id->qp, &qa, IBV_QP_TIMEOUT, &qia) == 0 && qa.timeout == 14,
	      "the QP's ACK timeout is %d, want the 14 of RDMA_OPTION_ID_ACK_TIMEOUT", qa.timeout);
	printf("connected, exiting without cleanup\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	if (!strcmp(argv[1], "api"))
		api(argv[2]);
	else
		leave(argv[2]);
	return 0;
}
`

// buildProbe compiles cmProbe against the system's rdma-core headers (it
// runs over tbrdma's library through LD_LIBRARY_PATH, as stock programs do).
func buildProbe(t *testing.T) string {
	t.Helper()
	need(t, "gcc")
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/probe.c", []byte(cmProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O", "-Wall", "-Werror", "-o", dir+"/probe", dir+"/probe.c", "-lrdmacm", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("gcc (apt-get install gcc librdmacm-dev): %v\n%s", err, out)
	}
	return dir + "/probe"
}

// TestRdmacmChannelAndFields checks the event channel fd (non-blocking
// EAGAIN, epoll), the ID's fields after ADDR_RESOLVED and ROUTE_RESOLVED,
// and clean failures (multicast, a second rdma_destroy_id).
func TestRdmacmChannelAndFields(t *testing.T) {
	probe := buildProbe(t)
	l := NewLink(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := Run(t, Command(ctx, t, l.NsB, probe, "api", l.AddrA))
	mustExit0(t, "probe api", r)
	mustContain(t, "probe api", r, "api ok")
}

// TestRdmacmExitWithoutCleanup: a program that returns from main with a
// connection up must not leave its peer waiting; the library destroys
// its IDs at exit, as the kernel does for a process that ends, and the
// rping server gets DISCONNECTED at once.
func TestRdmacmExitWithoutCleanup(t *testing.T) {
	need(t, "rping", "stdbuf")
	probe := buildProbe(t)
	l := NewLink(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := Start(t, lined(ctx, t, l.NsA, "rping", "-s", "-d", "-a", l.AddrA))
	if !s.WaitFor("rdma_listen", 15*time.Second) {
		t.Fatalf("rping -s did not listen:\n%s", s.Output())
	}
	time.Sleep(300 * time.Millisecond)
	r := Run(t, Command(ctx, t, l.NsB, probe, "leave", l.AddrA))
	mustExit0(t, "probe leave", r)
	mustContain(t, "probe leave", r, "connected, exiting without cleanup")
	exited := time.Now()
	srv := s.Wait()
	if took := time.Since(exited); took > 5*time.Second {
		t.Errorf("rping -s ended %v after its client exited, want at once", took)
	}
	mustExit0(t, "rping -s", srv)
	checkEvents(t, "rping -s", srv.Out, "CONNECT_REQUEST", "ESTABLISHED", "DISCONNECTED")
}

// TestRdmacmNoCMUser: a device whose program uses verbs only (an
// ibv_rc_pingpong server) still answers a connection request, with REJ 8,
// as the kernel's CM always does, rather than leaving the requester to give
// up after about 98 s.
func TestRdmacmNoCMUser(t *testing.T) {
	need(t, "rping", "ibv_rc_pingpong", "stdbuf")
	l := NewLink(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := Start(t, Command(ctx, t, l.NsA, "ibv_rc_pingpong", "-g", "1", "-n", "5"))
	deadline := time.Now().Add(10 * time.Second)
	for !udpBound(ctx, l.NsA, 4791) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	progress("rping -c to a device used by ibv_rc_pingpong only: must be refused")
	r := Run(t, Command(ctx, t, l.NsB, "rping", "-c", "-a", l.AddrA, "-C", "1"))
	if r.Err == nil || r.Took > 10*time.Second {
		t.Fatalf("rping -c: %v after %v, want a refusal within seconds:\n%s", r.Err, r.Took, r.Out)
	}
	mustContain(t, "rping -c", r, "RDMA_CM_EVENT_REJECTED, error 8")
	s.cmd.Process.Kill()
}
