package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/verbs"
)

// runCMPair runs a tbrdma server and client of kind k with -R and args on
// fresh loopback addresses; wrap, if set, wraps each side's comm channel.
func runCMPair(t *testing.T, k *perftestKind, args []string, wrap func(server bool) func(perf.MsgConn) perf.MsgConn) (sout, cout, serr, cerr string) {
	t.Helper()
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, so1, se1 := testFactory()
	cf, co1, ce1 := testFactory()
	so := parsePerftest(t, sf, k, append([]string{"-R", "--bind", sa.String(), "-p", "0"}, args...)...)
	if wrap != nil {
		so.wrapMsg = wrap(true)
	}
	pair(t, func(l func(net.Addr)) error {
		so.Listening = l
		return runPerftest(context.Background(), so)
	}, func(port int) error {
		co := parsePerftest(t, cf, k, append([]string{"-R", "--bind", ca.String(), "-p", itoa(port), sa.String()}, args...)...)
		if wrap != nil {
			co.wrapMsg = wrap(false)
		}
		return runPerftest(context.Background(), co)
	})
	return so1.String(), co1.String(), se1.String(), ce1.String()
}

// TestPerftestRDMACMLoopback runs every perftest command with -R, tbrdma
// against tbrdma: both connections through rdma_cm, the exchange in SENDs.
func TestPerftestRDMACMLoopback(t *testing.T) {
	for _, c := range []struct {
		kind  *perftestKind
		args  []string
		size  int
		iters int
	}{
		{writeBWTest, []string{"-n", "20", "-s", "65536"}, 65536, 20},
		{readLatTest, []string{"-n", "20", "-s", "64"}, 64, 20},
		{sendLatTest, []string{"-n", "20"}, 2, 20},
		{writeLatTest, []string{"-n", "20", "-s", "32"}, 32, 20},
		{readBWTest, []string{"-n", "20", "-s", "65536"}, 65536, 20},
		{sendBWTest, []string{"-n", "20", "-s", "4096"}, 4096, 20},
		{atomicLatTest, []string{"-n", "20"}, 8, 20},
	} {
		t.Run(c.kind.name, func(t *testing.T) {
			if raceEnabled && c.kind == writeLatTest {
				t.Skip("write-lat polls memory the engine writes: a data race by design, as in perftest")
			}
			sout, cout, serr, cerr := runCMPair(t, c.kind, c.args, nil)
			switch {
			case c.kind.bw:
				if !bwRow(c.size, c.iters, false).MatchString(cout) {
					t.Errorf("client: no row:\n%s", cout)
				}
				zeroPeak := c.kind == sendBWTest
				if !bwRow(c.size, c.iters, zeroPeak).MatchString(sout) {
					t.Errorf("server: no row:\n%s", sout)
				}
			case c.kind == sendLatTest || c.kind == writeLatTest:
				if !latRow(c.size, c.iters).MatchString(cout) || !latRow(c.size, c.iters).MatchString(sout) {
					t.Errorf("no latency rows:\nserver:\n%s\nclient:\n%s", sout, cout)
				}
			default:
				if !latRow(c.size, c.iters).MatchString(cout) {
					t.Errorf("client: no latency row:\n%s", cout)
				}
			}
			for side, out := range map[string]string{"server": sout, "client": cout} {
				if !strings.Contains(out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n") {
					t.Errorf("%s: header does not say rdma_cm:\n%s", side, out)
				}
				if !strings.Contains(out, " local address: LID 0000 QPN 0x") || !strings.Contains(out, " remote address: LID 0000 QPN 0x") {
					t.Errorf("%s: address lines missing:\n%s", side, out)
				}
			}
			if !strings.Contains(sout, perf.CMWaitNote) {
				t.Errorf("server: no rdma_cm wait note:\n%s", sout)
			}
			if c.kind == atomicLatTest {
				if !strings.Contains(cerr, "results checked") || !strings.Contains(serr, "as expected") {
					t.Errorf("atomics not checked: server %q, client %q", serr, cerr)
				}
			} else if serr != "" || cerr != "" {
				t.Errorf("stderr: server %q, client %q", serr, cerr)
			}
		})
	}
}

// msgRecorder records the size of every message a side sends.
type msgRecorder struct {
	perf.MsgConn
	mu    *sync.Mutex
	sizes *[]int
}

func (r msgRecorder) Send(b []byte) error {
	r.mu.Lock()
	*r.sizes = append(*r.sizes, len(b))
	r.mu.Unlock()
	return r.MsgConn.Send(b)
}

// captureSends returns the payload sizes of the RC SEND Only packets each
// side of a golden capture sent (client 198.18.0.2, server 198.18.0.3):
// in perftest's -R mode, its exchange on the comm QP.
func captureSends(t *testing.T, name string) (client, server []int) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "..", "..", "testdata", "rxe", name))
	if err != nil {
		t.Skipf("capture not available: %v", err)
	}
	defer f.Close()
	r, err := sniff.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return client, server
		}
		if err != nil {
			t.Fatal(err)
		}
		b := p.Data
		if len(b) < 14+20+8+12 || binary.BigEndian.Uint16(b[12:]) != 0x0800 || b[14+9] != 17 {
			continue
		}
		ip := b[14:]
		ihl := int(ip[0]&15) * 4
		udp := ip[ihl:]
		if binary.BigEndian.Uint16(udp[2:]) != 4791 {
			continue
		}
		bth := udp[8:]
		if bth[0] != 0x04 { // RC SEND Only
			continue
		}
		n := int(binary.BigEndian.Uint16(udp[4:])) - 8 - 12 - 4 - int(bth[1]>>4&3)
		if bytes.Equal(ip[12:16], []byte{198, 18, 0, 2}) {
			client = append(client, n)
		} else {
			server = append(server, n)
		}
	}
}

// TestPerftestRDMACMExchangeMatchesCapture checks that each side of a
// write-bw -R run sends the messages two perftest 4.5 did over their comm
// QP (testdata/rxe/write_bw_rdma_cm.pcap): version 16, page size and cache
// line 4 each, MTU 2, the zeroed key (56) before and after the test QP's
// connection, three keys, after the run a key, five report values of 8
// bytes and the closing key.
func TestPerftestRDMACMExchangeMatchesCapture(t *testing.T) {
	wantC, wantS := captureSends(t, "write_bw_rdma_cm.pcap")
	if len(wantC) != 16 || wantC[0] != 16 || wantC[4] != perf.BinaryKeyLen {
		t.Fatalf("capture: client sent %v", wantC)
	}
	var mu sync.Mutex
	var gotC, gotS []int
	runCMPair(t, writeBWTest, []string{"-n", "5", "-s", "65536"}, func(server bool) func(perf.MsgConn) perf.MsgConn {
		return func(m perf.MsgConn) perf.MsgConn {
			if server {
				return msgRecorder{m, &mu, &gotS}
			}
			return msgRecorder{m, &mu, &gotC}
		}
	})
	if !slices.Equal(gotC, wantC) {
		t.Errorf("client sent %v, perftest 4.5 %v", gotC, wantC)
	}
	if !slices.Equal(gotS, wantS) {
		t.Errorf("server sent %v, perftest 4.5 %v", gotS, wantS)
	}
}

// TestPerftestRDMACMNoListener checks the error of a -R client whose peer
// has no rdma_cm listener on the port.
func TestPerftestRDMACMNoListener(t *testing.T) {
	sa, ca := loopbackAddr(), loopbackAddr()
	f, _, errOut := testFactory()
	// A device on sa whose CM listens on another port: it rejects a
	// request for 18599 (invalid service ID), as the kernel's would.
	dev, err := openDevice(sa, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ech.Destroy()
	l, err := ech.CreateID(dev, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy()
	if err := l.Bind(netip.AddrPortFrom(sa, 18598)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	code := run(context.Background(), f, []string{"write-bw", "-R", "--bind", ca.String(), "-p", "18599", "--timeout", "20s", sa.String()})
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d; stderr %q", code, ExitFailed, errOut)
	}
	if !strings.Contains(errOut.String(), "no rdma_cm listener on "+sa.String()+" port 18599") {
		t.Errorf("stderr %q does not name the missing listener", errOut)
	}
}

// TestPerftestRDMACMClientFirst starts the client before its server: the
// client retries the rejected comm connection until the server listens.
// The server's device is up from the start, with a CM that rejects the
// early requests (another listener keeps it running).
func TestPerftestRDMACMClientFirst(t *testing.T) {
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, sout, _ := testFactory()
	cf, cout, cerr := testFactory()
	dev, err := openDevice(sa, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ech.Destroy()
	other, err := ech.CreateID(dev, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	if err := other.Bind(netip.AddrPortFrom(sa, 18598)); err != nil {
		t.Fatal(err)
	}
	if err := other.Listen(1); err != nil {
		t.Fatal(err)
	}
	sf.OpenDevice = func(netip.Addr) (*verbs.Context, error) { return dev, nil }
	co := parsePerftest(t, cf, sendLatTest, "-R", "--bind", ca.String(), "--timeout", "30s", "-n", "10", sa.String())
	so := parsePerftest(t, sf, sendLatTest, "-R", "--bind", sa.String(), "--timeout", "30s", "-n", "10")
	cdone := make(chan error, 1)
	listening := make(chan struct{})
	co.wrapMsg = func(m perf.MsgConn) perf.MsgConn {
		<-listening // the client is connected: the server must have been listening
		return m
	}
	go func() { cdone <- runPerftest(context.Background(), co) }()
	time.Sleep(300 * time.Millisecond) // the client's first requests are rejected meanwhile
	so.Listening = func(net.Addr) { close(listening) }
	if err := runPerftest(context.Background(), so); err != nil {
		t.Fatalf("server: %v", err)
	}
	if err := <-cdone; err != nil {
		t.Fatalf("client: %v (stderr %q)", err, cerr)
	}
	if !latRow(2, 10).MatchString(cout.String()) || !latRow(2, 10).MatchString(sout.String()) {
		t.Errorf("no rows:\nserver:\n%s\nclient:\n%s", sout, cout)
	}
}
