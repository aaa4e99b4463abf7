package transport

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// addrNobody is a loopback address on which nothing listens: the kernel
// answers every datagram sent there with ICMP port unreachable.
var addrNobody = netip.MustParseAddrPort("127.0.0.4:4791")

// TestUnreachable sends to a port nobody holds while a reader waits, then
// checks that the endpoint reported the ICMP message, that the pending
// error reached neither ReadBatch nor WriteBatch, and that the next
// datagrams are read and sent as ever, for each receive path.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noGRO     bool
		noNetpoll bool
	}{
		{name: "poller"},
		{name: "no gro", noGRO: true},
		{name: "no netpoll", noNetpoll: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan UnreachableError, 16)
			a := open(t, addrA, &Options{DisableGRO: tc.noGRO, NoNetpoll: tc.noNetpoll,
				OnUnreachable: func(e *UnreachableError) { got <- *e }})
			b := open(t, addrB, nil)
			read := make(chan error, 1)
			go func() {
				msgs := make([]Message, a.BatchSize())
				n, err := a.ReadBatch(msgs)
				if err == nil && (n != 1 || msgs[0].Addr != addrB) {
					err = errors.New("ReadBatch: not the one packet from B")
				}
				read <- err
			}()
			send(t, a, addrNobody)
			var e UnreachableError
			select {
			case e = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("no ICMP error reported within 10s")
			}
			if e.Dest != addrNobody || e.From != addrNobody.Addr() || !e.PortUnreachable() || !errors.Is(&e, syscall.ECONNREFUSED) {
				t.Fatalf("reported %+v (%v), want port unreachable from %v", e, &e, addrNobody)
			}
			want := "127.0.0.4 answered ICMP port unreachable for UDP 4791: no RoCE device listens there"
			if e.Error() != want {
				t.Errorf("message %q, want %q", e.Error(), want)
			}
			send(t, b, addrA) // the reader must still be waiting for it
			if err := <-read; err != nil {
				t.Fatal(err)
			}
			// With nobody reading, an ICMP error stays pending on the
			// socket until a send meets it: that send must neither fail
			// nor lose its datagram, and reports the error instead of
			// the reader.
			for i := 0; len(got) == 0; i++ {
				if i == 100 {
					t.Fatal("100 sends after ICMP errors, none reported one")
				}
				send(t, a, addrNobody)
				send(t, a, addrB)
				readN(t, b, 1)
			}
		})
	}
}

// send writes one packet to dst and fails the test if it is not sent.
func send(t *testing.T, c Conn, dst netip.AddrPort) {
	t.Helper()
	m := []Message{{Buf: testPacket(wire.UDSendOnly, 1, 64), Addr: dst}}
	if n, err := c.WriteBatch(m); n != 1 || err != nil {
		t.Fatalf("WriteBatch to %v = %d, %v", dst, n, err)
	}
}

// recvErrCmsg builds the control message the kernel writes for an
// error-queue entry: a sock_extended_err and, if off is valid, the
// offender's sockaddr.
func recvErrCmsg(v6 bool, errno syscall.Errno, origin, typ, code uint8, off netip.Addr) []byte {
	d := make([]byte, sizeofSockExtendedErr, sizeofSockExtendedErr+unix.SizeofSockaddrInet6)
	binary.NativeEndian.PutUint32(d, uint32(errno))
	d[4], d[5], d[6] = origin, typ, code
	switch {
	case off.Is4():
		sa := make([]byte, unix.SizeofSockaddrInet4)
		binary.NativeEndian.PutUint16(sa, unix.AF_INET)
		a := off.As4()
		copy(sa[4:], a[:])
		d = append(d, sa...)
	case off.Is6():
		sa := make([]byte, unix.SizeofSockaddrInet6)
		binary.NativeEndian.PutUint16(sa, unix.AF_INET6)
		a := off.As16()
		copy(sa[8:], a[:])
		d = append(d, sa...)
	}
	level, typ2 := unix.IPPROTO_IP, unix.IP_RECVERR
	if v6 {
		level, typ2 = unix.IPPROTO_IPV6, unix.IPV6_RECVERR
	}
	b := make([]byte, unix.CmsgSpace(len(d)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = int32(level), int32(typ2)
	h.SetLen(unix.CmsgLen(len(d)))
	copy(b[unix.CmsgLen(0):], d)
	return b
}

func TestParseErrQueue(t *testing.T) {
	dest := netip.MustParseAddrPort("198.18.44.2:4791")
	dest6 := netip.MustParseAddrPort("[fd00::2]:4791")
	router := netip.MustParseAddr("198.18.44.1")
	other := make([]byte, unix.CmsgSpace(4)) // a message of another level and type first
	h := (*unix.Cmsghdr)(unsafe.Pointer(&other[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SO_TIMESTAMP
	h.SetLen(unix.CmsgLen(4))
	for _, tc := range []struct {
		name  string
		ctrl  []byte
		dest  netip.AddrPort
		ok    bool
		errno syscall.Errno
		msg   string
	}{
		{"port unreachable", recvErrCmsg(false, syscall.ECONNREFUSED, unix.SO_EE_ORIGIN_ICMP, 3, 3, dest.Addr()), dest, true, syscall.ECONNREFUSED,
			"198.18.44.2 answered ICMP port unreachable for UDP 4791: no RoCE device listens there"},
		{"host unreachable from a router", recvErrCmsg(false, syscall.EHOSTUNREACH, unix.SO_EE_ORIGIN_ICMP, 3, 1, router), dest, true, syscall.EHOSTUNREACH,
			"ICMP host unreachable for 198.18.44.2 UDP 4791 (from 198.18.44.1): the peer is down or does not answer ARP/neighbour discovery on its link, or a router has no way to it"},
		{"after another message", append(other, recvErrCmsg(false, syscall.ENETUNREACH, unix.SO_EE_ORIGIN_ICMP, 3, 0, router)...), dest, true, syscall.ENETUNREACH,
			"ICMP network unreachable for 198.18.44.2 UDP 4791 (from 198.18.44.1): a router has no route to the peer's network"},
		{"v6 port unreachable", recvErrCmsg(true, syscall.ECONNREFUSED, unix.SO_EE_ORIGIN_ICMP6, 1, 4, dest6.Addr()), dest6, true, syscall.ECONNREFUSED,
			"fd00::2 answered ICMP port unreachable for UDP 4791: no RoCE device listens there"},
		{"v6 prohibited, no offender", recvErrCmsg(true, syscall.EACCES, unix.SO_EE_ORIGIN_ICMP6, 1, 1, netip.Addr{}), dest6, true, syscall.EACCES,
			"ICMP communication prohibited for fd00::2 UDP 4791 (from the peer): a firewall refuses the traffic"},
		{"fragmentation needed", recvErrCmsg(false, syscall.EMSGSIZE, unix.SO_EE_ORIGIN_ICMP, 3, 4, router), dest, false, 0, ""},
		{"time exceeded", recvErrCmsg(false, syscall.EHOSTUNREACH, unix.SO_EE_ORIGIN_ICMP, 11, 0, router), dest, false, 0, ""},
		{"v6 packet too big", recvErrCmsg(true, syscall.EMSGSIZE, unix.SO_EE_ORIGIN_ICMP6, 2, 0, dest6.Addr()), dest6, false, 0, ""},
		{"local error", recvErrCmsg(false, syscall.EMSGSIZE, unix.SO_EE_ORIGIN_LOCAL, 0, 0, netip.Addr{}), dest, false, 0, ""},
		{"short", recvErrCmsg(false, syscall.ECONNREFUSED, unix.SO_EE_ORIGIN_ICMP, 3, 3, dest.Addr())[:unix.CmsgLen(0)+8], dest, false, 0, ""},
		{"empty", nil, dest, false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ee, ok := parseErrQueue(tc.ctrl, tc.dest)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tc.ok, ee)
			}
			if !ok {
				return
			}
			if ee.err.Errno != tc.errno || ee.err.Dest != tc.dest || !errors.Is(&ee.err, tc.errno) {
				t.Errorf("got %+v, want errno %v to %v", ee.err, tc.errno, tc.dest)
			}
			if got := ee.err.Error(); got != tc.msg {
				t.Errorf("message\n got %q\nwant %q", got, tc.msg)
			}
		})
	}
}

// FuzzParseErrQueue: whatever the control bytes hold, the parser returns
// without panicking, and what it accepts is an ICMP destination
// unreachable with the destination it was given.
func FuzzParseErrQueue(f *testing.F) {
	dest := netip.MustParseAddrPort("198.18.44.2:4791")
	f.Add(recvErrCmsg(false, syscall.ECONNREFUSED, unix.SO_EE_ORIGIN_ICMP, 3, 3, dest.Addr()))
	f.Add(recvErrCmsg(true, syscall.ECONNREFUSED, unix.SO_EE_ORIGIN_ICMP6, 1, 4, netip.MustParseAddr("fd00::2")))
	f.Add(recvErrCmsg(false, syscall.EMSGSIZE, unix.SO_EE_ORIGIN_LOCAL, 0, 0, netip.Addr{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, ctrl []byte) {
		ee, ok := parseErrQueue(ctrl, dest)
		if !ok {
			return
		}
		if ee.err.Dest != dest || ee.err.V6 != (ee.origin == unix.SO_EE_ORIGIN_ICMP6) {
			t.Fatalf("accepted %+v", ee)
		}
		if d := ee.err.Type; ee.err.V6 && d != icmp6DestUnreach || !ee.err.V6 && (d != icmpDestUnreach || ee.err.Code == icmpFragNeeded) {
			t.Fatalf("accepted a message that is not destination unreachable: %+v", ee)
		}
		if ee.err.Error() == "" {
			t.Fatal("empty message")
		}
	})
}
