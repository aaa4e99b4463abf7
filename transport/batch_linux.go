package transport

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// The Linux data path: recvmmsg and sendmmsg on the socket's file
// descriptor through syscall.RawConn (so the runtime's poller still does the
// waiting), UDP GSO on send and UDP GRO on receive where the kernel offers
// them. All the arrays handed to the kernel are allocated by Open; a batch
// allocates nothing.

const defaultBatchSize = IdealBatchSize

// iovsPerMsg is the most iovecs one message takes: headers, payload (from
// registered memory, Message.Payload) and pad with trailer.
const iovsPerMsg = 3

const (
	// maxGSOSegments is UDP_MAX_SEGMENTS of the kernels that have UDP GSO
	// (newer kernels allow more; 64 works everywhere).
	maxGSOSegments = 64
	// groSlotSize holds the largest datagram GRO builds (64 KiB).
	groSlotSize = 1 << 16
	// groSlots is the number of such datagrams one recvmmsg takes.
	groSlots = 64
	// groCtrlSpace is the control buffer of one received datagram: room
	// for the UDP_GRO message (an int) and then some.
	groCtrlSpace = 64
)

// mmsghdr is struct mmsghdr; Go's layout rules add the trailing padding C
// has on 64-bit systems.
type mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
}

var (
	cmsgHdrLen   = unix.CmsgLen(0)
	gsoCmsgSpace = unix.CmsgSpace(2)
)

// sysConn is the Linux part of udpConn.
type sysConn struct {
	gso   atomic.Bool // UDP GSO in use; cleared if a GSO send fails with EIO
	gro   bool
	zone  string // the local address's IPv6 zone, given to link-local sources
	scope uint32 // its interface index, for link-local destinations
	rd    recvState
	wr    sendState
	// busyNs, when not 0, makes a ReadBatch that finds the socket empty
	// poll it again (yielding the processor in between) for up to that
	// many nanoseconds after the last datagram arrived before it parks
	// in the runtime's poller (SetBusyPoll).
	busyNs atomic.Int64
	// busyHold counts callers that are spinning on the data right now
	// (HoldBusyPoll): while it is not 0 a busy-polling reader never
	// parks, whatever the window says.
	busyHold atomic.Int32
	// kwaitNs, when not 0, makes a ReadBatch that finds the socket empty
	// wait for it in recvmmsg on its own thread, without the runtime's
	// poller, for up to that many nanoseconds after the last datagram
	// (SetKernelWait, kernelWait). The socket is in blocking mode exactly
	// while it is not 0.
	kwaitNs atomic.Int64
	// tryFn is tryReadBatch's receive as a func value, made once.
	tryFn func(fd uintptr)
	// recvErr: the socket has IP_RECVERR (Options.OnUnreachable), and
	// errors from ICMP messages are read from its error queue
	// (icmp_linux.go).
	recvErr bool
	// kicked is set while a read deadline in the past keeps ReadBatch out
	// (InlineReader.SetReadDeadline): a reader busy-polling or in a kernel
	// wait then stops doing so and returns to the poller, which reports the
	// deadline, rather than keep the socket for its window.
	kicked atomic.Bool
}

// recvState belongs to the one goroutine in ReadBatch.
type recvState struct {
	hdrs    []mmsghdr
	iovs    []unix.Iovec
	names   []unix.RawSockaddrInet6
	ctrl    []byte // ctrlLen bytes per slot when GRO is on
	ctrlLen int
	bufs    [][]byte
	want    int           // datagrams to ask recvmmsg for
	got     int           // datagrams it returned
	err     error         // its error
	next    int           // first datagram not yet handed out
	off     int           // offset of the next GRO segment in datagram next
	icrc    wire.ICRCPath // the ICRC's share for the last source accept checked
	fn      func(fd uintptr) bool
	t       tally
	last    int64 // monotonic ns of the last recvmmsg that returned data (busy polling)
	// dirty bounds the headers recvmmsg may have written since they were
	// last made ready (it writes those of the datagrams it returns): only
	// they are made ready again, not all 64 before every busy poll.
	dirty int
	// idle: the last call found the socket empty. The next one asks for
	// one datagram (pollWant).
	idle bool
}

// sendState belongs to the one goroutine in WriteBatch.
type sendState struct {
	hdrs       []mmsghdr
	iovs       []unix.Iovec
	names      []unix.RawSockaddrInet6
	ctrl       []byte // gsoCmsgSpace bytes per header
	segs       []int  // messages per header
	usedIovs   int    // iovecs filled by prepare since the last clear
	start, end int    // headers to send
	sent       int    // headers sendmmsg sent
	err        error  // its error
	fn         func(fd uintptr) bool
}

func (c *udpConn) initSys(o *Options) error {
	s := &c.sys
	if z := c.laddr.Addr().Zone(); z != "" {
		ifi, err := net.InterfaceByName(z)
		if err != nil {
			return fmt.Errorf("zone %q: %w", z, err)
		}
		s.zone, s.scope = z, uint32(ifi.Index)
	}

	var gsoErr, groErr error
	if o.DisableGSO {
		gsoErr = errDisabledByOption
	}
	if o.DisableGRO {
		groErr = errDisabledByOption
	}
	err := c.rc.Control(func(fd uintptr) {
		if gsoErr == nil {
			if _, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT); err != nil {
				gsoErr = os.NewSyscallError("getsockopt UDP_SEGMENT", err)
			}
		}
		if groErr == nil {
			if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
				groErr = os.NewSyscallError("setsockopt UDP_GRO", err)
			}
		}
	})
	if err != nil {
		return err
	}
	if o.OnUnreachable != nil {
		c.initRecvErr()
	}
	s.gso.Store(gsoErr == nil)
	s.gro = groErr == nil
	c.offloads = Offloads{GSO: gsoErr == nil, GRO: groErr == nil}
	if gsoErr != nil {
		c.offloads.GSOError = &OffloadError{Offload: "UDP GSO", Err: gsoErr}
	}
	if groErr != nil {
		c.offloads.GROError = &OffloadError{Offload: "UDP GRO", Err: groErr}
	}

	// Receive slots: one per datagram of a recvmmsg call.
	r := &s.rd
	slot, n := c.maxPkt, IdealBatchSize
	if s.gro {
		slot, n, r.ctrlLen = groSlotSize, groSlots, groCtrlSpace
		r.ctrl = make([]byte, n*r.ctrlLen)
	}
	arena := make([]byte, n*slot)
	r.hdrs = make([]mmsghdr, n)
	r.iovs = make([]unix.Iovec, n)
	r.names = make([]unix.RawSockaddrInet6, n)
	r.bufs = make([][]byte, n)
	for i := range n {
		r.bufs[i] = arena[i*slot : (i+1)*slot : (i+1)*slot]
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(slot)
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		if r.ctrlLen != 0 {
			h.Control = &r.ctrl[i*r.ctrlLen]
		}
	}
	r.dirty = n // none is ready yet
	r.fn = c.recvmmsg
	s.tryFn = func(fd uintptr) { c.recvmmsgOnce(fd) }

	// Send headers: at most one per message.
	w := &s.wr
	n = IdealBatchSize
	w.hdrs = make([]mmsghdr, n)
	w.iovs = make([]unix.Iovec, iovsPerMsg*n) // a message with a Payload takes three
	w.names = make([]unix.RawSockaddrInet6, n)
	w.ctrl = make([]byte, n*gsoCmsgSpace)
	w.segs = make([]int, n)
	for i := range n {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&w.ctrl[i*gsoCmsgSpace]))
		cm.Level = unix.IPPROTO_UDP
		cm.Type = unix.UDP_SEGMENT
		cm.SetLen(unix.CmsgLen(2))
		w.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&w.names[i]))
	}
	w.fn = c.sendmmsg
	return nil
}

// recvmmsg is the RawConn.Read callback: false means "wait until readable".
// With busy polling on, an empty socket is polled again, with a
// runtime.Gosched between tries so that the goroutines waiting for the
// data (and, with one P, everything else) keep running, until the busy
// window after the last datagram has passed. With a kernel wait on
// (SetKernelWait) and its window open, it sleeps in recvmmsg itself
// instead (kernelWait).
func (c *udpConn) recvmmsg(fd uintptr) bool {
	r := &c.sys.rd
	spins := 0
	for {
		var n uintptr
		var e unix.Errno
		waited := c.kernelWaitOpen()
		if waited {
			n, e = c.kernelWait(fd)
		} else if spins > 0 {
			// A busy poll's retry: never blocks, so skip the runtime's
			// system-call bookkeeping (the P is busy anyway); it asks for
			// pollWant datagrams.
			n, _, e = unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), pollWant, unix.MSG_DONTWAIT, 0, 0)
		} else {
			n, _, e = unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), unix.MSG_DONTWAIT, 0, 0)
		}
		switch e {
		case 0:
			r.got, r.err = int(n), nil
			if spins > 0 || c.sys.busyNs.Load() != 0 || c.sys.kwaitNs.Load() != 0 {
				r.last = monoNow()
			}
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if waited { // a slice passed without a datagram
				c.ctr.kwaitSlices.Add(1)
				continue
			}
			if busy := c.sys.busyNs.Load(); busy > 0 && !c.closed.Load() && !c.sys.kicked.Load() {
				if spins&15 != 0 || c.sys.busyHold.Load() > 0 || monoNow()-r.last < busy {
					spins++
					runtime.Gosched()
					continue
				}
			}
			return false
		default:
			if c.asyncErr(fd, e) {
				continue
			}
			r.got, r.err = 0, e
			return true
		}
	}
}

// kernelWaitOpen reports whether a reader that finds the socket empty
// should sleep in recvmmsg (kernelWait) rather than in the runtime's
// poller: a kernel wait is on and its last datagram is recent enough.
func (c *udpConn) kernelWaitOpen() bool {
	kw := c.sys.kwaitNs.Load()
	return kw > 0 && !c.closed.Load() && !c.sys.kicked.Load() && monoNow()-c.sys.rd.last < kw
}

// kernelWait receives in a recvmmsg that sleeps until the first datagram
// (MSG_WAITFORONE on the socket SetKernelWait made blocking) or for at
// most kernelWaitSlice (SO_RCVTIMEO; then EAGAIN). It is a RawSyscall: the
// runtime does not hand this goroutine's P to another thread, and its
// sysmon thread, which sleeps while every P is idle, is not woken by the
// next system call. With one P nothing else runs meanwhile, so it yields
// first and sleeps for one slice at a time; a signal (the runtime's
// preemption, a GC) ends the sleep with EINTR.
//
// It yields twice: runtime.Gosched queues this goroutine on the global run
// queue, and one schedule in 61 takes from that queue before the P's own,
// which would hand the processor straight back while a goroutine this one
// just woke (a completion channel's waiter) waits in the P's queue for the
// whole slice. No two schedules in a row are both the 61st.
func (c *udpConn) kernelWait(fd uintptr) (uintptr, unix.Errno) {
	r := &c.sys.rd
	runtime.Gosched()
	runtime.Gosched()
	c.ctr.kwaits.Add(1)
	n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), unix.MSG_WAITFORONE, 0, 0)
	return n, e
}

// sendmmsg is the RawConn.Write callback: false means "wait until
// writable".
func (c *udpConn) sendmmsg(fd uintptr) bool {
	w := &c.sys.wr
	for {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.start])), uintptr(w.end-w.start), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			w.sent, w.err = int(n), nil
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			if c.asyncErr(fd, e) {
				continue
			}
			w.sent, w.err = 0, e
			return true
		}
	}
}

func (c *udpConn) readBatch(msgs []Message) (int, error) {
	return c.readBatchWith(msgs, false)
}

// kick keeps a reader in readBatch from busy-polling or waiting in the
// kernel (on) while a read deadline in the past is meant to get it out.
func (c *udpConn) kick(on bool) { c.sys.kicked.Store(on) }

// tryReadBatch is readBatch that does not wait: one recvmmsg with
// MSG_DONTWAIT, and 0 when nothing was queued.
func (c *udpConn) tryReadBatch(msgs []Message) (int, error) {
	r := &c.sys.rd
	if r.next < r.got {
		n := c.drain(msgs)
		c.ctr.addIn(&r.t)
		return n, nil
	}
	return c.readBatchWith(msgs, true)
}

// recvmmsgOnce is tryReadBatch's receive: one attempt, "nothing" is a
// result rather than a reason to wait. It never blocks (MSG_DONTWAIT), so,
// as a busy poll's retries, it skips the runtime's system-call bookkeeping:
// a spinning inline reader makes one such call per empty poll, and the
// bookkeeping made each 0.4 µs dearer on the benchmark's VM.
func (c *udpConn) recvmmsgOnce(fd uintptr) {
	r := &c.sys.rd
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.got, r.err = int(n), nil
			r.last = monoNow()
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			r.got, r.err = 0, nil
		default:
			if c.asyncErr(fd, e) {
				continue
			}
			r.got, r.err = 0, e
		}
		return
	}
}

// pollWant is how many datagrams a recvmmsg asks for right after one that
// found the socket empty (a busy poll's retry, a try after an empty try).
// Polled traffic is mostly one request or response at a time, and a
// recvmmsg that has one datagram goes on to try for the next: a second
// pass through the socket layer that fails. Asking for one saves it; the
// rest of a burst comes with the next call, which asks for the full batch
// again. read-lat busy poll, both ends, A/B within one run: 4.0-4.5 % more
// round trips together with recvState.dirty, 0.4-0.7 % of it dirty's.
const pollWant = 1

func (c *udpConn) readBatchWith(msgs []Message, try bool) (int, error) {
	r := &c.sys.rd
	for {
		if r.next >= r.got {
			for i := range r.dirty {
				h := &r.hdrs[i]
				h.Hdr.Namelen = unix.SizeofSockaddrInet6
				h.Hdr.SetControllen(r.ctrlLen)
				h.Hdr.Flags = 0
				h.Len = 0
			}
			r.want = min(len(msgs), len(r.hdrs))
			if r.idle {
				r.want = pollWant
			}
			r.got, r.next, r.off = 0, 0, 0
			if try {
				// Control, not Read: no readiness wait and no read
				// deadline (the one that keeps the receive loop out
				// while a caller reads inline).
				if err := c.rc.Control(c.sys.tryFn); err != nil {
					return 0, err
				}
			} else if err := c.rc.Read(c.sys.rd.fn); err != nil {
				return 0, err
			}
			c.ctr.readCalls.Add(1)
			r.dirty, r.idle = r.got, r.got == 0 && r.err == nil
			if r.err != nil {
				r.dirty = r.want
				return 0, fmt.Errorf("transport: %w", os.NewSyscallError("recvmmsg", r.err))
			}
			if r.got == 0 { // tryReadBatch: nothing queued
				return 0, nil
			}
		}
		n := c.drain(msgs)
		c.ctr.addIn(&r.t)
		if n > 0 {
			return n, nil
		}
	}
}

// drain hands out received datagrams, split into their GRO segments, until
// msgs is full or nothing is left; what is left stays for the next call.
func (c *udpConn) drain(msgs []Message) int {
	r := &c.sys.rd
	n := 0
	for r.next < r.got && n < len(msgs) {
		h := &r.hdrs[r.next]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			r.t.drops[wire.ReasonPayload]++ // larger than MaxPacketSize
			r.next, r.off = r.next+1, 0
			continue
		}
		size := int(h.Len)
		buf := r.bufs[r.next][:size:size]
		src := c.fromSockaddr(&r.names[r.next])
		seg := 0
		if r.ctrlLen != 0 {
			seg = groSegment(r.ctrl[r.next*r.ctrlLen:][:min(int(h.Hdr.Controllen), r.ctrlLen)])
		}
		if seg <= 0 || seg >= size {
			if c.accept(&r.t, &r.icrc, buf, src, &msgs[n], 0) {
				n++
			}
			r.next++
			continue
		}
		for r.off < size && n < len(msgs) {
			end := min(r.off+seg, size)
			// The segment's index is its likely IPv4 ID (VerifyExpect).
			if c.accept(&r.t, &r.icrc, buf[r.off:end:end], src, &msgs[n], uint16(r.off/seg)) {
				n++
			}
			r.off = end
		}
		if r.off >= size {
			r.next, r.off = r.next+1, 0
		}
	}
	return n
}

// groSegment returns the segment size of a UDP_GRO control message in
// ctrl, or 0.
func groSegment(ctrl []byte) int {
	for len(ctrl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		l := int(h.Len)
		if l < cmsgHdrLen || l > len(ctrl) {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && l >= cmsgHdrLen+4 {
			return int(*(*int32)(unsafe.Pointer(&ctrl[cmsgHdrLen])))
		}
		adv := unix.CmsgSpace(l - cmsgHdrLen)
		if adv > len(ctrl) {
			return 0
		}
		ctrl = ctrl[adv:]
	}
	return 0
}

// fromSockaddr decodes a source address written by recvmmsg.
func (c *udpConn) fromSockaddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	a := netip.AddrFrom16(sa.Addr)
	if a.Is4In6() {
		a = a.Unmap()
	} else if c.sys.zone != "" && a.IsLinkLocalUnicast() {
		a = a.WithZone(c.sys.zone)
	}
	return netip.AddrPortFrom(a, uint16(p[0])<<8|uint16(p[1]))
}

// putSockaddr writes dst (of the socket's family) into sa and returns the
// sockaddr length.
func (c *udpConn) putSockaddr(sa *unix.RawSockaddrInet6, dst netip.AddrPort) uint32 {
	port := dst.Port()
	if !c.is6 {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		sa4.Addr = dst.Addr().As4()
		sa4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	sa.Flowinfo = 0
	sa.Addr = dst.Addr().As16()
	sa.Scope_id = 0
	if dst.Addr().IsLinkLocalUnicast() {
		sa.Scope_id = c.sys.scope
	}
	return unix.SizeofSockaddrInet6
}

func (c *udpConn) writeBatch(msgs []Message) (int, error) {
	w := &c.sys.wr
	done := 0
	noGSO := false // this call falls back after a GSO send failed
	defer func() {
		var bytes uint64
		for i := range msgs[:done] {
			bytes += uint64(msgLen(&msgs[i]))
		}
		c.ctr.packetsOut.Add(uint64(done))
		c.ctr.bytesOut.Add(bytes)
		clear(w.iovs[:w.usedIovs]) // do not keep the caller's buffers alive
		w.usedIovs = 0
	}()
	for done < len(msgs) {
		nh, nm, perr := c.prepare(msgs[done:], !noGSO && c.sys.gso.Load())
		sent := 0
		for i := 0; i < nh; {
			w.start, w.end = i, nh
			if err := c.rc.Write(w.fn); err != nil {
				done += sent
				return done, err
			}
			c.ctr.writeCalls.Add(1)
			if w.err != nil {
				if w.segs[i] > 1 && (w.err == unix.EIO || w.err == unix.EINVAL) {
					// EIO: the route's device cannot offload the
					// checksum, so GSO never works here. EINVAL: a
					// segment exceeds the path MTU; sending the packets
					// one by one reports that as EMSGSIZE.
					if w.err == unix.EIO {
						c.disableGSO(w.err)
					}
					noGSO = true
					break
				}
				done += sent
				return done, &RefusedError{Packets: max(w.segs[i], 1), Err: os.NewSyscallError("sendmmsg", w.err)}
			}
			for _, k := range w.segs[i : i+w.sent] {
				sent += k
			}
			i += w.sent
		}
		done += sent
		if perr != nil && sent == nm {
			return done, perr
		}
	}
	return done, nil
}

// prepare fills the ICRCs and send headers for a prefix of msgs: with gso,
// runs of messages to one destination of one length (the last may be
// shorter) share a header with a UDP_SEGMENT control message, and segment
// k's ICRC is computed with IPv4 identification k, which the kernel gives
// it. It returns the headers and messages prepared, and the error of the
// first message it cannot send (after them).
func (c *udpConn) prepare(msgs []Message, gso bool) (nh, nm int, err error) {
	w := &c.sys.wr
	ni := 0 // iovecs used
	// At most IdealBatchSize messages per call, whatever their iovecs.
	for nm < len(msgs) && nm < IdealBatchSize && nh < len(w.hdrs) && ni+iovsPerMsg <= len(w.iovs) {
		first := &msgs[nm]
		dst, err := c.checkOut(first)
		if err != nil {
			return nh, nm, err
		}
		size := msgLen(first)
		j, total := nm+1, size
		if gso {
			for j < len(msgs) && j < IdealBatchSize && j-nm < maxGSOSegments && ni+iovsPerMsg*(j-nm+1) <= len(w.iovs) {
				m := &msgs[j]
				l := msgLen(m)
				if m.Addr != first.Addr || l > size || l < wire.BTHSize+wire.ICRCSize || total+l > maxUDPPayload ||
					m.Payload != nil && len(m.Buf)-tailLen(m) < wire.BTHSize {
					break
				}
				total += l
				j++
				if l < size {
					break
				}
			}
		}
		i0 := ni
		for k := nm; k < j; k++ {
			m := &msgs[k]
			c.putICRC(m, dst, uint16(k-nm))
			if len(m.Payload) == 0 { // Buf is the whole packet
				w.iovs[ni].Base = &m.Buf[0]
				w.iovs[ni].SetLen(len(m.Buf))
				ni++
				continue
			}
			t := len(m.Buf) - tailLen(m)
			w.iovs[ni].Base = &m.Buf[0]
			w.iovs[ni].SetLen(t)
			w.iovs[ni+1].Base = &m.Payload[0]
			w.iovs[ni+1].SetLen(len(m.Payload))
			w.iovs[ni+2].Base = &m.Buf[t]
			w.iovs[ni+2].SetLen(len(m.Buf) - t)
			ni += 3
		}
		h := &w.hdrs[nh].Hdr
		h.Namelen = c.putSockaddr(&w.names[nh], dst)
		h.Iov = &w.iovs[i0]
		h.SetIovlen(ni - i0)
		h.Flags = 0
		if j-nm > 1 {
			off := nh * gsoCmsgSpace
			*(*uint16)(unsafe.Pointer(&w.ctrl[off+cmsgHdrLen])) = uint16(size)
			h.Control = &w.ctrl[off]
			h.SetControllen(gsoCmsgSpace)
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		w.segs[nh] = j - nm
		nh, nm = nh+1, j
	}
	w.usedIovs = max(w.usedIovs, ni)
	return nh, nm, nil
}

// disableGSO turns GSO off for good after a GSO send failed with err.
func (c *udpConn) disableGSO(err error) {
	if !c.sys.gso.Swap(false) {
		return
	}
	e := &OffloadError{Offload: "UDP GSO", Err: fmt.Errorf("%w: %w", ErrNotSupported, os.NewSyscallError("sendmmsg with UDP_SEGMENT", err))}
	c.setOffloads(func(o *Offloads) { o.GSO, o.GSOError = false, e })
	if c.log != nil {
		c.log.Warn("UDP GSO send failed; sending one datagram per packet from now on", "addr", c.laddr, "err", err)
	}
}

func (s *sysConn) groOn() bool { return s.gro }

// SetBusyPoll turns busy polling of the socket on (d > 0) or off: a
// ReadBatch that finds no datagram polls again instead of sleeping, for up
// to d after the last datagram arrived. It costs a processor while it
// spins; it saves the wake-up of a sleeping receiver (epoll, a thread, the
// scheduler), which is most of a round trip's time on a fast link.
func (c *udpConn) SetBusyPoll(d time.Duration) {
	c.sys.busyNs.Store(int64(max(d, 0)))
}

// HoldBusyPoll adds delta (+1 or -1) to the number of goroutines spinning
// on what this endpoint receives (a CQ poller): while any is, a busy-polling
// ReadBatch does not park. A spinning goroutine that only yields keeps the
// runtime from ever polling the network, so a parked reader would wait for
// the scheduler's 10 ms backstop.
func (c *udpConn) HoldBusyPoll(delta int) { c.sys.busyHold.Add(int32(delta)) }

// monoStart anchors monoNow.
var monoStart = time.Now()

// monoNow is a monotonic clock in nanoseconds.
func monoNow() int64 { return int64(time.Since(monoStart)) }

// kernelWaitSlice is the longest one kernelWait sleeps before it yields
// the processor again.
const kernelWaitSlice = 500 * time.Microsecond

// SetKernelWait turns the kernel wait on (d > 0) or off: for up to d after
// the last datagram arrived, a ReadBatch that finds the socket empty sleeps
// in recvmmsg on its own thread rather than in the runtime's poller (see
// kernelWait). The socket is blocking while it is on (every other call
// passes MSG_DONTWAIT) and its receive timeout is kernelWaitSlice. The
// portable path ignores it.
func (c *udpConn) SetKernelWait(d time.Duration) error {
	if c.portable != nil {
		return nil
	}
	on := d > 0
	var serr error
	err := c.rc.Control(func(fd uintptr) {
		if on {
			tv := unix.NsecToTimeval(int64(kernelWaitSlice))
			if serr = unix.SetsockoptTimeval(int(fd), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); serr != nil {
				serr = os.NewSyscallError("setsockopt SO_RCVTIMEO", serr)
				return
			}
		}
		if serr = unix.SetNonblock(int(fd), !on); serr != nil {
			serr = os.NewSyscallError("fcntl O_NONBLOCK", serr)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("transport: kernel wait: %w", err)
	}
	c.sys.kwaitNs.Store(int64(max(d, 0)))
	return nil
}
