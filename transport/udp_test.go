package transport

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Tests bind distinct loopback addresses (Linux routes all of 127/8 to lo)
// so that two endpoints can both own port 4791.
var (
	addrA = netip.MustParseAddrPort("127.0.0.2:4791")
	addrB = netip.MustParseAddrPort("127.0.0.3:4791")
)

// testPacket builds a RoCEv2 packet of opcode op with a payload of n bytes
// (patterned by psn) and a zero ICRC trailer.
func testPacket(op wire.Opcode, psn uint32, n int) []byte {
	h := wire.Headers{
		BTH:       wire.BTHFields{Opcode: op, PKey: wire.PKeyDefault, DestQP: 0x11, AckReq: true, PSN: wire.PSN(psn)},
		DETH:      wire.DETHFields{QKey: wire.QKeyGSI, SrcQP: 1},
		RETH:      wire.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: uint32(n)},
		AtomicETH: wire.AtomicETHFields{VA: 0x2000, RKey: 0x5678, SwapAdd: 1},
		AETH:      wire.AETHFields{Syndrome: 0x1f, MSN: psn},
		ImmDt:     wire.ImmDtFields{Imm: 0xdeadbeef},
	}
	if !op.Has(wire.HasPayload) {
		n = 0
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(int(psn)*7 + i)
	}
	return wire.AppendPacket(make([]byte, 0, op.HdrLen()+n+8), &h, payload)
}

// open opens an endpoint and closes it at the end of the test.
func open(t testing.TB, ap netip.AddrPort, o *Options) Conn {
	t.Helper()
	c, err := Open(ap, o)
	if err != nil {
		t.Fatalf("Open(%v): %v", ap, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readN reads n packets from c, copying them out, or fails after a
// timeout (by closing c).
func readN(t testing.TB, c Conn, n int) []Message {
	t.Helper()
	timer := time.AfterFunc(10*time.Second, func() { c.Close() })
	defer timer.Stop()
	var out []Message
	msgs := make([]Message, c.BatchSize())
	for len(out) < n {
		k, err := c.ReadBatch(msgs)
		if err != nil {
			t.Fatalf("ReadBatch after %d of %d packets: %v (stats %+v)", len(out), n, err, c.Stats())
		}
		for _, m := range msgs[:k] {
			m.Buf = bytes.Clone(m.Buf)
			out = append(out, m)
		}
	}
	return out
}

// gsoIDs returns the IPv4 identification each message of a WriteBatch gets
// under the grouping rules of the Linux send path: a run of messages to one
// destination of one length (the last may be shorter), at most 64 of them
// and 65507 bytes, within a chunk of IdealBatchSize messages, is one GSO
// send whose segment k has ID k.
func gsoIDs(msgs []Message, gso bool) []uint16 {
	ids := make([]uint16, len(msgs))
	if !gso || runtime.GOOS != "linux" {
		return ids
	}
	for i := 0; i < len(msgs); {
		size, total := len(msgs[i].Buf), len(msgs[i].Buf)
		j := i + 1
		for j < len(msgs) && j%IdealBatchSize != 0 && j-i < 64 && msgs[j].Addr == msgs[i].Addr &&
			len(msgs[j].Buf) <= size && total+len(msgs[j].Buf) <= maxUDPPayload {
			total += len(msgs[j].Buf)
			ids[j] = uint16(j - i)
			j++
			if len(msgs[j-1].Buf) < size {
				break
			}
		}
		i = j
	}
	return ids
}

// mixedBatch is a batch of varied packets from a to b: runs of full
// 4096-byte RDMA WRITE and SEND packets (which GSO coalesces), a shorter
// last packet, and ACKs, READ requests, atomics and UD sends in between.
func mixedBatch(dst netip.AddrPort) []Message {
	var msgs []Message
	add := func(op wire.Opcode, n int) {
		msgs = append(msgs, Message{Buf: testPacket(op, uint32(len(msgs)), n), Addr: dst})
	}
	add(wire.WriteFirst, 4096)
	for range 20 {
		add(wire.WriteMiddle, 4096)
	}
	add(wire.WriteLast, 1000)
	add(wire.Acknowledge, 0)
	add(wire.ReadRequest, 0)
	add(wire.FetchAdd, 0)
	add(wire.UDSendOnly, 256)
	add(wire.SendFirst, 4096)
	add(wire.SendMiddle, 4096)
	add(wire.SendLastImm, 4093) // pad 3
	for i := range 70 {
		add(wire.SendOnly, 64+i%3) // mixed pads: breaks runs
	}
	for range 10 {
		add(wire.SendOnly, 100)
	}
	return msgs
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		addr netip.AddrPort
		opts *Options
		want string
	}{
		{netip.AddrPort{}, nil, "pass the address of a network interface"},
		{netip.MustParseAddrPort("0.0.0.0:4791"), nil, "not a unicast interface address"},
		{netip.MustParseAddrPort("[::]:0"), nil, "not a unicast interface address"},
		{netip.MustParseAddrPort("224.0.0.1:0"), nil, "not a unicast interface address"},
		{netip.MustParseAddrPort("127.0.0.2:5000"), &Options{Port: 6000}, "conflicts with Options.Port"},
		{netip.MustParseAddrPort("127.0.0.2:0"), &Options{Interface: "no-such-interface0"}, "no-such-interface0"},
	} {
		c, err := Open(tc.addr, tc.opts)
		if err == nil {
			c.Close()
			t.Errorf("Open(%v, %+v) succeeded", tc.addr, tc.opts)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%v): %v; want it to mention %q", tc.addr, err, tc.want)
		}
	}
}

func TestOpenPort(t *testing.T) {
	c := open(t, netip.MustParseAddrPort("[::ffff:127.0.0.2]:0"), nil)
	if got := c.LocalAddr(); got != addrA {
		t.Errorf("LocalAddr = %v, want %v", got, addrA)
	}
	c.Close()
	c = open(t, netip.MustParseAddrPort("127.0.0.2:0"), &Options{Port: 4792})
	if got := c.LocalAddr().Port(); got != 4792 {
		t.Errorf("port = %d, want 4792", got)
	}
	c.Close()
	if lo := loopbackName(); lo != "" && runtime.GOOS == "linux" {
		c = open(t, addrA, &Options{Interface: lo})
		b := open(t, addrB, nil)
		msgs := []Message{{Buf: testPacket(wire.SendOnly, 1, 10), Addr: addrB}}
		if _, err := c.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		readN(t, b, 1)
	}
}

// loopbackName returns the name of the loopback interface, or "".
func loopbackName() string {
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return i.Name
		}
	}
	return ""
}

func TestPortInUse(t *testing.T) {
	open(t, addrA, nil)
	// Whichever kind of socket tries second, the error is the same.
	if c, err := Open(addrA, &Options{NoNetpoll: true}); !errors.Is(err, ErrPortInUse) {
		if err == nil {
			c.Close()
		}
		t.Errorf("second Open with NoNetpoll: %v, want ErrPortInUse", err)
	}
	c, err := Open(addrA, nil)
	if err == nil {
		c.Close()
		t.Fatal("second Open of the same address succeeded")
	}
	if !errors.Is(err, ErrPortInUse) {
		t.Errorf("errors.Is(%v, ErrPortInUse) = false", err)
	}
	var pe *PortInUseError
	if !errors.As(err, &pe) || pe.Addr != addrA {
		t.Errorf("error %v is not a *PortInUseError for %v", err, addrA)
	}
	msg := err.Error()
	for _, want := range []string{"127.0.0.2:4791", "already in use", "another process", "rdma_rxe", "tbrdma", "stop it", "another address or port"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	t.Log(msg)
}

func TestExchange(t *testing.T) {
	for _, tc := range []struct {
		name                                    string
		noGSO, noGRO, skip, portable, noNetpoll bool
	}{
		{name: "offloads"},
		{name: "gso only", noGRO: true},
		{name: "gro only", noGSO: true},
		{name: "no offloads", noGSO: true, noGRO: true},
		{name: "no icrc check", skip: true},
		{name: "portable", noGSO: true, noGRO: true, portable: true},
		{name: "no netpoll", noNetpoll: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := open(t, addrA, &Options{DisableGSO: tc.noGSO, DisableGRO: tc.noGRO, forcePortable: tc.portable, NoNetpoll: tc.noNetpoll})
			b := open(t, addrB, &Options{DisableGSO: tc.noGSO, DisableGRO: tc.noGRO, SkipICRCCheck: tc.skip, forcePortable: tc.portable, NoNetpoll: tc.noNetpoll})
			offA, _ := OffloadsOf(a)
			offB, _ := OffloadsOf(b)
			t.Logf("sender %+v, receiver %+v", offA, offB)
			if runtime.GOOS == "linux" && (offA.GSO == tc.noGSO || offB.GRO == tc.noGRO) {
				t.Skipf("kernel lacks an offload: GSO %v, GRO %v", offA.GSOError, offB.GROError)
			}

			msgs := mixedBatch(addrB)
			n, err := a.WriteBatch(msgs)
			if n != len(msgs) || err != nil {
				t.Fatalf("WriteBatch = %d, %v; want %d", n, err, len(msgs))
			}
			ids := gsoIDs(msgs, !tc.noGSO)
			got := readN(t, b, len(msgs))
			var p wire.Packet
			for i, m := range got {
				if !bytes.Equal(m.Buf, msgs[i].Buf) {
					t.Fatalf("packet %d: got %d bytes, want %d (%v)", i, len(m.Buf), len(msgs[i].Buf), msgs[i].Buf[0])
				}
				if m.Addr != addrA || m.Local != addrB.Addr() {
					t.Errorf("packet %d: from %v to %v, want %v to %v", i, m.Addr, m.Local, addrA, addrB.Addr())
				}
				if err := p.Parse(m.Buf); err != nil {
					t.Errorf("packet %d: %v", i, err)
				}
				if id, ok := wire.VerifyICRC(m.Buf, addrA, addrB); !ok || id != ids[i] {
					t.Errorf("packet %d: ICRC verifies %v with IP ID %d, want ID %d", i, ok, id, ids[i])
				}
				if !tc.skip && m.IPID != ids[i] {
					t.Errorf("packet %d: IPID %d, want %d", i, m.IPID, ids[i])
				}
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.PacketsOut != uint64(len(msgs)) || sb.PacketsIn != uint64(len(msgs)) || sa.BytesOut != sb.BytesIn {
				t.Errorf("stats: sender %+v, receiver %+v", sa, sb)
			}
			if sb.Drops != [wire.NumReasons]uint64{} {
				t.Errorf("drops: %v", sb.Drops)
			}
			t.Logf("%d packets in %d write calls and %d read calls", len(msgs), sa.WriteCalls, sb.ReadCalls)
		})
	}
}

// TestBadPackets sends from a plain UDP socket: a corrupted packet and a
// short one are dropped and counted; a packet whose ICRC was computed for
// IPv4 identification 1234 is accepted with IPID 1234 (the receiver cannot
// see the real ID, 0, and trusts the CRC).
func TestBadPackets(t *testing.T) {
	t.Run("batch", func(t *testing.T) { testBadPackets(t, &Options{}) })
	t.Run("portable", func(t *testing.T) { testBadPackets(t, &Options{forcePortable: true}) })
}

func testBadPackets(t *testing.T, o *Options) {
	b := open(t, addrB, o)
	raw, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.4:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	src := raw.LocalAddr().(*net.UDPAddr).AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())

	good := testPacket(wire.WriteOnly, 1, 4096)
	wire.PutICRC(good, src, addrB, 0)
	corrupt := bytes.Clone(good)
	corrupt[100] ^= 0x10
	badTrailer := bytes.Clone(good)
	badTrailer[len(badTrailer)-1] ^= 0x80
	withID := testPacket(wire.SendOnly, 2, 10)
	wire.PutICRC(withID, src, addrB, 1234)
	for _, p := range [][]byte{corrupt, {1, 2, 3, 4, 5, 6, 7, 8}, badTrailer, good, withID} {
		if _, err := raw.WriteToUDPAddrPort(p, addrB); err != nil {
			t.Fatal(err)
		}
	}
	got := readN(t, b, 2)
	if !bytes.Equal(got[0].Buf, good) || got[0].IPID != 0 || got[0].Addr != src {
		t.Errorf("first packet: %d bytes from %v, IPID %d; want the good one", len(got[0].Buf), got[0].Addr, got[0].IPID)
	}
	if !bytes.Equal(got[1].Buf, withID) || got[1].IPID != 1234 {
		t.Errorf("second packet: IPID %d, want 1234", got[1].IPID)
	}
	s := b.Stats()
	if s.Drops[wire.ReasonICRC] != 2 || s.Drops[wire.ReasonShort] != 1 || s.PacketsIn != 2 {
		t.Errorf("stats %+v; want 2 ICRC drops, 1 short, 2 in", s)
	}
}

func TestMaxPacketSize(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(fmt.Sprintf("portable=%v", portable), func(t *testing.T) {
			testMaxPacketSize(t, &Options{DisableGRO: true, MaxPacketSize: 1024, forcePortable: portable})
		})
	}
}

func testMaxPacketSize(t *testing.T, o *Options) {
	a := open(t, addrA, nil)
	b := open(t, addrB, o)
	msgs := []Message{
		{Buf: testPacket(wire.SendOnly, 1, 2000), Addr: addrB},
		{Buf: testPacket(wire.SendOnly, 2, 1000), Addr: addrB},
	}
	if _, err := a.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	got := readN(t, b, 1)
	if !bytes.Equal(got[0].Buf, msgs[1].Buf) {
		t.Errorf("got a %d-byte packet, want the 1000-byte one", len(got[0].Buf))
	}
	if d := b.Stats().Drops[wire.ReasonPayload]; d != 1 {
		t.Errorf("payload drops = %d, want 1", d)
	}
}

func TestWriteErrors(t *testing.T) {
	a := open(t, addrA, nil)
	good := Message{Buf: testPacket(wire.SendOnly, 1, 10), Addr: addrB}
	for _, tc := range []struct {
		name string
		m    Message
	}{
		{"short", Message{Buf: make([]byte, 10), Addr: addrB}},
		{"no address", Message{Buf: testPacket(wire.SendOnly, 1, 10)}},
		{"ipv6 destination", Message{Buf: testPacket(wire.SendOnly, 1, 10), Addr: netip.MustParseAddrPort("[::1]:4791")}},
		{"too long", Message{Buf: make([]byte, 70000), Addr: addrB}},
	} {
		n, err := a.WriteBatch([]Message{good, tc.m, good})
		if n != 1 || err == nil {
			t.Errorf("%s: WriteBatch = %d, %v; want 1 and an error", tc.name, n, err)
		}
	}
}

func TestIPv6(t *testing.T) {
	a6 := netip.MustParseAddrPort("[::1]:4791")
	b6 := netip.MustParseAddrPort("[::1]:4792")
	a, err := Open(a6, nil)
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer a.Close()
	b := open(t, b6, nil)
	msgs := []Message{{Buf: testPacket(wire.SendOnly, 1, 100), Addr: b6}}
	if _, err := a.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	got := readN(t, b, 1)
	if !bytes.Equal(got[0].Buf, msgs[0].Buf) || got[0].Addr != a6 {
		t.Errorf("got %d bytes from %v", len(got[0].Buf), got[0].Addr)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	for _, nn := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoNetpoll=%v", nn), func(t *testing.T) { testCloseUnblocksRead(t, &Options{NoNetpoll: nn}) })
	}
}

func testCloseUnblocksRead(t *testing.T, o *Options) {
	c, err := Open(addrA, o)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := c.ReadBatch(make([]Message, 4))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch after Close: %v, want net.ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.WriteBatch([]Message{{Buf: testPacket(wire.SendOnly, 1, 1), Addr: addrB}}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteBatch after Close: %v, want net.ErrClosed", err)
	}
}

// TestNoAllocs checks the steady state: a batch written and read back
// allocates nothing.
func TestNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"offloads", Options{}},
		{"no offloads", Options{DisableGSO: true, DisableGRO: true}},
		{"portable", Options{forcePortable: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := open(t, addrA, &tc.o)
			b := open(t, addrB, &tc.o)
			const n = 32
			out := make([]Message, n)
			for i := range out {
				sz := 4096
				if i%8 == 7 {
					sz = 64
				}
				out[i] = Message{Buf: testPacket(wire.WriteMiddle, uint32(i), sz), Addr: addrB}
			}
			in := make([]Message, b.BatchSize())
			allocs := testing.AllocsPerRun(200, func() {
				if _, err := a.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < n; {
					k, err := b.ReadBatch(in)
					if err != nil {
						t.Fatal(err)
					}
					got += k
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per batch of %d, want 0", allocs, n)
			}
		})
	}
}

// TestLargeBatch writes more messages than one system call takes and reads
// them back through a small slice, so GRO datagrams are handed out over
// several ReadBatch calls.
func TestLargeBatch(t *testing.T) {
	a := open(t, addrA, nil)
	b := open(t, addrB, nil)
	msgs := make([]Message, 300)
	for i := range msgs {
		msgs[i] = Message{Buf: testPacket(wire.SendMiddle, uint32(i), 256), Addr: addrB}
	}
	if n, err := a.WriteBatch(msgs); n != len(msgs) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	off, _ := OffloadsOf(a)
	ids := gsoIDs(msgs, off.GSO)
	in := make([]Message, 5)
	for i := 0; i < len(msgs); {
		k, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:k] {
			if !bytes.Equal(m.Buf, msgs[i].Buf) || m.IPID != ids[i] {
				t.Fatalf("packet %d: %d bytes, IPID %d; want %d bytes, IPID %d", i, len(m.Buf), m.IPID, len(msgs[i].Buf), ids[i])
			}
			i++
		}
	}
	t.Logf("stats: sender %+v receiver %+v", a.Stats(), b.Stats())
}

// TestConcurrent reads and writes both endpoints at once, in both
// directions (run it with -race).
func TestConcurrent(t *testing.T) {
	a := open(t, addrA, nil)
	b := open(t, addrB, nil)
	const n = 1000
	errc := make(chan error, 4)
	send := func(from Conn, to netip.AddrPort) {
		msgs := make([]Message, 10)
		for i := 0; i < n; i += len(msgs) {
			for j := range msgs {
				msgs[j] = Message{Buf: testPacket(wire.SendOnly, uint32(i+j), 512), Addr: to}
			}
			if _, err := from.WriteBatch(msgs); err != nil {
				errc <- err
				return
			}
			time.Sleep(100 * time.Microsecond) // stay within the receive buffer
		}
		errc <- nil
	}
	recv := func(c Conn) {
		msgs := make([]Message, c.BatchSize())
		for got := 0; got < n; {
			k, err := c.ReadBatch(msgs)
			if err != nil {
				errc <- err
				return
			}
			got += k
		}
		errc <- nil
	}
	timer := time.AfterFunc(20*time.Second, func() { a.Close(); b.Close() })
	defer timer.Stop()
	go recv(a)
	go recv(b)
	go send(a, addrB)
	go send(b, addrA)
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if sa, sb := a.Stats(), b.Stats(); sa.PacketsIn != n || sb.PacketsIn != n {
		t.Errorf("stats %+v %+v", sa, sb)
	}
}
