package cli

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/verbs"
)

// The exchange string and the local address line of a real ibv_ud_pingpong
// (rdma-core 44) client: testdata/rxe/ud_pingpong.pcap, frame 4 (the
// client's 52 bytes on TCP 18515) and ud_pingpong.client.txt.
const (
	udStockMsg  = "0000:000011:4db16c:00000000000000000000ffffc6120002\x00"
	udStockLine = "  local address:  LID 0x0000, QPN 0x000011, PSN 0x4db16c: GID ::ffff:198.18.0.2"
	// The server's remote line in ud_pingpong.server.txt (a comma there).
	udStockRemote = "  remote address: LID 0x0000, QPN 0x000011, PSN 0x4db16c, GID ::ffff:198.18.0.2"
)

func TestUDPingpongExchangeString(t *testing.T) {
	d, err := perf.ParsePingpongDest([]byte(udStockMsg))
	if err != nil {
		t.Fatal(err)
	}
	want := perf.PingpongDest{QPN: 0x11, PSN: 0x4db16c,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 2}}
	if d != want {
		t.Fatalf("parsed %+v, want %+v", d, want)
	}
	if got := d.Marshal(); !bytes.Equal(got, []byte(udStockMsg)) {
		t.Errorf("marshal: %q, want %q", got, udStockMsg)
	}
	if len(udStockMsg) != perf.PingpongMsgLen {
		t.Errorf("the stock message is %d bytes, PingpongMsgLen %d", len(udStockMsg), perf.PingpongMsgLen)
	}
	if got := pingpongAddrLine("local", d, true); got != udStockLine {
		t.Errorf("local line\n%q, want\n%q", got, udStockLine)
	}
	if got := pingpongAddrLine("remote", d, true); got != udStockRemote {
		t.Errorf("remote line\n%q, want\n%q", got, udStockRemote)
	}
	// RC keeps its comma.
	if got := pingpongAddrLine("local", d, false); !strings.Contains(got, "PSN 0x4db16c, GID") {
		t.Errorf("RC local line %q", got)
	}
}

var (
	udLocalRE  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID ::ffff:127\.79\.\d+\.\d+$`)
	udRemoteRE = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.79\.\d+\.\d+$`)
)

func TestUDPingpongLoopback(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		size int
	}{
		{"default-size", []string{"-n", "20"}, udPingpongDefaultSize},
		{"64B-chk", []string{"-n", "20", "-s", "64", "-c"}, 64},
		{"mtu-chk", []string{"-n", "10", "-s", "4096", "-c"}, 4096},
		{"events-small-rxdepth", []string{"-n", "50", "-s", "1", "-r", "3", "-e"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := loopbackAddr(), loopbackAddr()
			sf, sout, serr := testFactory()
			cf, cout, cerr := testFactory()
			so := parsePingpong(t, sf, append([]string{"--ud", "--bind", sa.String(), "-p", "0"}, c.args...)...)
			if so.Size != c.size {
				t.Fatalf("-s %d, want %d", so.Size, c.size)
			}
			var sbuf []byte
			so.Inspect = func(b []byte) { sbuf = b }
			pair(t, func(l func(net.Addr)) error {
				so.Listening = l
				return runPingpong(context.Background(), so)
			}, func(port int) error {
				co := parsePingpong(t, cf, append([]string{"--ud", "--bind", ca.String(), "-p", itoa(port), sa.String()}, c.args...)...)
				return runPingpong(context.Background(), co)
			})
			for side, out := range map[string]string{"server": sout.String(), "client": cout.String()} {
				if !udLocalRE.MatchString(out) || !udRemoteRE.MatchString(out) {
					t.Errorf("%s: address lines missing:\n%s", side, out)
				}
				want := regexp.MustCompile(`(?m)^` + itoa(c.size*so.Iters*2) + ` bytes in \d+\.\d\d seconds = [\d.]+ Mbit/sec\n` +
					itoa(so.Iters) + ` iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter\n`)
				if !want.MatchString(out) {
					t.Errorf("%s: result lines missing:\n%s", side, out)
				}
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s: %s", side, out)
				}
			}
			if serr.Len() > 0 || cerr.Len() > 0 {
				t.Errorf("stderr: server %q, client %q", serr, cerr)
			}
			// The server's buffer holds the last datagram: the GRH area
			// (an IPv4 header in bytes 20..39 on RoCEv2 over IPv4) and
			// behind it the client's message, 0x7b but for the zero
			// that -c puts at each page start.
			if len(sbuf) != udGRHSize+c.size || sbuf[20] != 0x45 || sbuf[29] != 17 {
				t.Fatalf("server buffer: %d bytes, GRH % x", len(sbuf), sbuf[:min(len(sbuf), 40)])
			}
			msg := sbuf[udGRHSize:]
			wantFirst := byte(0x7b)
			if so.Chk {
				wantFirst = 0
			}
			if msg[0] != wantFirst || bytes.Count(msg[1:], []byte{0x7b}) != len(msg)-1 {
				t.Errorf("server buffer behind the GRH: % x…, want %#02x then 0x7b", msg[:min(len(msg), 8)], wantFirst)
			}
		})
	}
}

// TestUDPingpongBufferLayout checks the buffer as ibv_ud_pingpong lays it
// out: 40 bytes of GRH room, then the message, 0x7b everywhere.
func TestUDPingpongBufferLayout(t *testing.T) {
	sa := loopbackAddr()
	f, _, _ := testFactory()
	pp := &pingpong{o: parsePingpong(t, f, "--ud", "--bind", sa.String(), "-p", "0", "-s", "64")}
	defer pp.close()
	if err := pp.open(sa); err != nil {
		t.Fatal(err)
	}
	if pp.off != udGRHSize || len(pp.buf) != udGRHSize+64 || bytes.Count(pp.buf, []byte{0x7b}) != len(pp.buf) {
		t.Fatalf("offset %d, buffer %d bytes % x: want the message at 40 of 104, all 0x7b", pp.off, len(pp.buf), pp.buf)
	}
}

func TestUDPingpongSizeAboveMTU(t *testing.T) {
	// Above any port's MTU: refused before any connection (no peer runs).
	f, _, errOut := testFactory()
	code := run(context.Background(), f, []string{"pingpong", "--ud", "--bind", loopbackAddr().String(), "-p", "1", "-s", "8192", "127.0.0.1"})
	if code != ExitFailed || !strings.Contains(errOut.String(), "larger than port MTU (at most 4096)") {
		t.Errorf("-s 8192: exit %d, stderr %q", code, errOut)
	}
	// Above this port's active MTU (1024): refused when the device opens.
	sa := loopbackAddr()
	f, _, errOut = testFactory()
	f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) {
		return verbs.NewContext(&verbs.Options{Addr: a, ActiveMTU: verbs.MTU1024})
	}
	code = run(context.Background(), f, []string{"pingpong", "--ud", "--bind", sa.String(), "-p", "0", "-s", "2048"})
	if code != ExitFailed || !strings.Contains(errOut.String(), "larger than port MTU (1024)") {
		t.Errorf("-s 2048 on MTU 1024: exit %d, stderr %q", code, errOut)
	}
}

func TestUDPingpongFlags(t *testing.T) {
	f, _, errOut := testFactory()
	if code := run(context.Background(), f, []string{"pingpong", "--ud", "-m", "1024", "127.0.0.1"}); code != ExitUsage {
		t.Errorf("--ud -m: exit %d, want %d (%s)", code, ExitUsage, errOut)
	}
	o := parsePingpong(t, f, "--ud", "127.0.0.1")
	if o.Size != 1024 || o.RxDepth != 500 || o.Iters != 1000 || o.Port != 18515 {
		t.Errorf("defaults -s %d -r %d -n %d -p %d, want ibv_ud_pingpong's 1024 500 1000 18515", o.Size, o.RxDepth, o.Iters, o.Port)
	}
	if o = parsePingpong(t, f, "--ud", "-s", "100", "127.0.0.1"); o.Size != 100 {
		t.Errorf("-s 100 gave %d", o.Size)
	}
	if o = parsePingpong(t, f, "127.0.0.1"); o.Size != 4096 {
		t.Errorf("RC default size %d, want 4096", o.Size)
	}
}
