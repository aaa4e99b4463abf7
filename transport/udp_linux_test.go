package transport

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// inTunNetns runs f on a goroutine locked to an OS thread that has moved to
// a fresh network namespace holding one TUN device, tbr0, with address
// 10.77.0.1/24 and no offloads. A socket opened inside f lives in that
// namespace; what it sends to 10.77.0.0/24 can be read, as the exact IP
// packets the kernel built, from tun. The thread is never unlocked, so it
// exits with the goroutine and the namespace with it. It skips the test
// without root or TUN support.
func inTunNetns(t *testing.T, f func(tun *os.File)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN/CAP_SYS_ADMIN) to create a network namespace and a TUN device")
	}
	skip := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: see above
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			skip <- "unshare(CLONE_NEWNET): " + err.Error()
			return
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			skip <- "open /dev/net/tun: " + err.Error()
			return
		}
		ifr, err := unix.NewIfreq("tbr0")
		if err != nil {
			t.Error(err)
			return
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			skip <- "TUNSETIFF: " + err.Error()
			unix.Close(fd)
			return
		}
		tun := os.NewFile(uintptr(fd), "tbr0")
		defer tun.Close()
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(s)
		for _, step := range []struct {
			req  uint
			set  func(*unix.Ifreq) error
			name string
		}{
			{unix.SIOCSIFADDR, func(r *unix.Ifreq) error { return r.SetInet4Addr([]byte{10, 77, 0, 1}) }, "address"},
			{unix.SIOCSIFNETMASK, func(r *unix.Ifreq) error { return r.SetInet4Addr([]byte{255, 255, 255, 0}) }, "netmask"},
			{unix.SIOCSIFFLAGS, func(r *unix.Ifreq) error { r.SetUint16(unix.IFF_UP | unix.IFF_RUNNING); return nil }, "flags"},
		} {
			r, _ := unix.NewIfreq("tbr0")
			if err := step.set(r); err != nil {
				t.Error(err)
				return
			}
			if err := unix.IoctlIfreq(s, step.req, r); err != nil {
				t.Errorf("set tbr0 %s: %v", step.name, err)
				return
			}
		}
		f(tun)
	}()
	select {
	case reason := <-skip:
		<-done
		t.Skip(reason)
	case <-done:
	}
}

// readIPv4 reads IPv4 UDP packets to port 4791 from tun until it has n or
// the deadline passes.
func readIPv4(tun *os.File, n int) ([][]byte, error) {
	var out [][]byte
	buf := make([]byte, 1<<16)
	tun.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(out) < n {
		k, err := tun.Read(buf)
		if err != nil {
			return out, err
		}
		p := buf[:k]
		if k < 28 || p[0] != 0x45 || p[9] != 17 || binary.BigEndian.Uint16(p[22:]) != wire.UDPPort {
			continue // not ours (the kernel may send other traffic)
		}
		out = append(out, append([]byte(nil), p...))
	}
	return out, nil
}

// TestGSOIPIDOnWire checks, on the packets the kernel actually puts on a
// link, the premise of the send path: an unconnected socket with
// IP_PMTUDISC_DO sends DF and IPv4 identification 0, and UDP GSO segment k
// carries identification k, so the ICRC the endpoint computed matches the
// real IP header. The TUN device has no offloads, so the kernel segments in
// software before the packets reach it (hardware USO might differ).
func TestGSOIPIDOnWire(t *testing.T) {
	inTunNetns(t, func(tun *os.File) {
		for _, tc := range []struct {
			name    string
			opts    Options
			sizes   []int
			wantIDs []uint16
		}{
			{"plain", Options{DisableGSO: true}, []int{1000, 1000, 1000, 500}, []uint16{0, 0, 0, 0}},
			{"gso", Options{}, []int{1000, 1000, 1000, 1000, 1000, 600}, []uint16{0, 1, 2, 3, 4, 5}},
			{"gso two runs", Options{}, []int{800, 800, 800, 1200, 1200}, []uint16{0, 1, 2, 0, 1}},
		} {
			c, err := Open(netip.MustParseAddrPort("10.77.0.1:4791"), &tc.opts)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			dst := netip.MustParseAddrPort("10.77.0.2:4791")
			msgs := make([]Message, len(tc.sizes))
			for i, sz := range tc.sizes {
				msgs[i] = Message{Buf: testPacket(wire.SendOnly, uint32(i), sz-wire.BTHSize-wire.ICRCSize), Addr: dst}
			}
			if n, err := c.WriteBatch(msgs); n != len(msgs) || err != nil {
				t.Errorf("%s: WriteBatch = %d, %v", tc.name, n, err)
				c.Close()
				return
			}
			if off, _ := OffloadsOf(c); !tc.opts.DisableGSO && !off.GSO {
				t.Logf("%s: GSO off: %v", tc.name, off.GSOError)
			}
			pkts, err := readIPv4(tun, len(msgs))
			c.Close()
			if err != nil {
				t.Errorf("%s: read tun: %v (got %d packets)", tc.name, err, len(pkts))
				return
			}
			for i, p := range pkts {
				id := binary.BigEndian.Uint16(p[4:])
				df := binary.BigEndian.Uint16(p[6:])&0x4000 != 0
				ip, udp, roce := p[:20], p[20:28], p[28:]
				want := msgs[i].Buf
				if string(roce) != string(want) {
					t.Errorf("%s: packet %d: payload differs from message %d (len %d vs %d)", tc.name, i, i, len(roce), len(want))
					continue
				}
				icrc, ok := wire.ICRCFromHeaders(ip, udp, roce[:len(roce)-wire.ICRCSize])
				t.Logf("%s: packet %d: len %d IP ID %d DF %v ICRC from real headers %#08x trailer %#08x",
					tc.name, i, len(p), id, df, icrc, wire.Trailer(roce))
				if !df || id != tc.wantIDs[i] {
					t.Errorf("%s: packet %d: IP ID %d DF %v, want ID %d and DF", tc.name, i, id, df, tc.wantIDs[i])
				}
				if !ok || icrc != wire.Trailer(roce) {
					t.Errorf("%s: packet %d: ICRC over the real headers %#08x, trailer %#08x", tc.name, i, icrc, wire.Trailer(roce))
				}
			}
		}
	})
}

func TestGROSegmentParse(t *testing.T) {
	ctrl := make([]byte, 64)
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
	cm.Level, cm.Type = unix.IPPROTO_UDP, unix.UDP_GRO
	cm.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(ctrl[unix.CmsgLen(0):], 4120)
	if got := groSegment(ctrl[:unix.CmsgSpace(4)]); got != 4120 {
		t.Errorf("groSegment = %d, want 4120", got)
	}
	if got := groSegment(ctrl[:unix.CmsgLen(0)]); got != 0 {
		t.Errorf("groSegment(truncated) = %d, want 0", got)
	}
	cm.Type = unix.UDP_SEGMENT
	if got := groSegment(ctrl[:unix.CmsgSpace(4)]); got != 0 {
		t.Errorf("groSegment(other type) = %d, want 0", got)
	}
	if got := groSegment(nil); got != 0 {
		t.Errorf("groSegment(nil) = %d", got)
	}
}

// TestIPv6ZeroChecksum sends an IPv6 datagram with UDP checksum 0, as
// rdma_rxe does: UDP_NO_CHECK6_RX makes the endpoint accept it.
func TestIPv6ZeroChecksum(t *testing.T) {
	b6 := netip.MustParseAddrPort("[::1]:4792")
	b, err := Open(b6, nil)
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer b.Close()
	s, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)
	if err := unix.SetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1); err != nil {
		t.Skipf("UDP_NO_CHECK6_TX: %v", err)
	}
	if err := unix.Bind(s, &unix.SockaddrInet6{Port: 4793, Addr: [16]byte{15: 1}}); err != nil {
		t.Fatal(err)
	}
	src := netip.MustParseAddrPort("[::1]:4793")
	pkt := testPacket(wire.SendOnly, 1, 100)
	wire.PutICRC(pkt, src, b6, 0)
	if err := unix.Sendto(s, pkt, 0, &unix.SockaddrInet6{Port: 4792, Addr: [16]byte{15: 1}}); err != nil {
		t.Fatal(err)
	}
	got := readN(t, b, 1)
	if string(got[0].Buf) != string(pkt) || got[0].Addr != src {
		t.Errorf("got %d bytes from %v", len(got[0].Buf), got[0].Addr)
	}
}

// Inline tries that find the socket empty, then bursts: every packet comes
// out once, in order and whole, whatever the previous calls left in their
// receive headers (a lone datagram's empty control buffer before a GRO
// datagram that needs one, a truncated datagram's flag), and a try after an
// empty one hands out one datagram (with GRO: its segments) and the next
// call the rest.
func TestTryReadAfterEmpty(t *testing.T) {
	t.Run("gro", func(t *testing.T) {
		// Runs of equal 1000-byte packets leave as one GSO send and arrive
		// as one GRO datagram; the 64-byte ones alone.
		testTryReadAfterEmpty(t, nil, 0, [][]int{
			{64},
			{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
			{64, 64, 64},
			{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
			{64},
			{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
		})
	})
	t.Run("no-gro", func(t *testing.T) {
		testTryReadAfterEmpty(t, &Options{DisableGRO: true, DisableGSO: true, MaxPacketSize: 1024}, 1, [][]int{
			{1000, 2000, 10, 900, 512}, // the 2000-byte one is truncated (MaxPacketSize 1024): dropped
			{64, 64, 64, 1000, 64, 64, 3},
			{700},
			{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
		})
	})
}

// testTryReadAfterEmpty sends each round's packets (of these payload sizes)
// to an endpoint opened with o after a try that finds nothing; firstN, if
// not 0, is how many packets the first try that finds some must hand out.
func testTryReadAfterEmpty(t *testing.T, o *Options, firstN int, rounds [][]int) {
	a := open(t, addrA, o)
	b := open(t, addrB, o)
	in, ok := b.(*udpConn).InlineReader()
	if !ok {
		t.Fatal("no InlineReader")
	}
	msgs := make([]Message, b.BatchSize())
	try := func() []Message {
		t.Helper()
		n, err := in.TryReadBatch(msgs)
		if err != nil {
			t.Fatal(err)
		}
		return msgs[:n]
	}
	// waitQueued tries until something is queued and returns what that try
	// handed out (a try may race the delivery).
	waitQueued := func() []Message {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if got := try(); len(got) > 0 {
				return got
			}
		}
		t.Fatal("nothing arrived within 5 s")
		return nil
	}
	psn, drops := uint32(0), uint64(0)
	for round, sizes := range rounds {
		if got := try(); len(got) != 0 {
			t.Fatalf("round %d: %d packets before any was sent", round, len(got))
		}
		var sent []Message
		var want [][]byte
		for _, n := range sizes {
			psn++
			m := Message{Buf: testPacket(wire.SendOnly, psn, n), Addr: addrB}
			sent = append(sent, m)
			if o != nil && o.MaxPacketSize > 0 && len(m.Buf) > o.MaxPacketSize {
				drops++
				continue
			}
			want = append(want, m.Buf)
		}
		if _, err := a.WriteBatch(sent); err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for i := 0; len(got) < len(want); i++ {
			q := waitQueued()
			if i == 0 && firstN != 0 && len(q) != firstN {
				t.Errorf("round %d: a try after an empty one handed out %d packets, want %d", round, len(q), firstN)
			}
			for _, m := range q {
				got = append(got, bytes.Clone(m.Buf))
			}
		}
		for i := range want {
			if i >= len(got) || !bytes.Equal(got[i], want[i]) {
				t.Fatalf("round %d: packet %d of %d is not the one sent in that place (%d packets out, stats %+v)", round, i, len(want), len(got), b.Stats())
			}
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d packets out, %d sent", round, len(got), len(want))
		}
	}
	if d := b.Stats().Drops[wire.ReasonPayload]; d != drops {
		t.Errorf("payload drops = %d, want %d", d, drops)
	}
}
