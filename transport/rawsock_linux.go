//go:build linux

package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// rawSock is a UDP socket that the Go runtime's network poller does not
// know (Options.NoNetpoll). A socket opened through package net is in the
// poller's epoll set, so every datagram that arrives wakes the thread
// sleeping in epoll_wait, whether or not a goroutine waits for it. When a
// program's own thread reads the socket (inline receive: a C program
// spinning on its CQ), that is a wake-up and two context switches per
// packet on the program's core for nothing. rawSock waits in poll(2) only
// while a reader actually waits, and implements syscall.RawConn, so the
// endpoint's callbacks (recvmmsg, sendmmsg, the kernel wait) are the same.
//
// A reader waits for the socket or for evfd, which SetReadDeadline and
// Close signal; waits are sliced (rawSockSlice) so that a second waiter,
// or a writer, never sleeps past a close.
type rawSock struct {
	fd, evfd int
	mu       sync.RWMutex // shared by Read, Write and Control; Close takes it to close the fds
	closed   atomic.Bool
	deadline atomic.Int64 // read deadline in Unix nanoseconds; 0: none
	// onErr, when set (IP_RECVERR), reads the error queue when poll
	// reports POLLERR: an entry left there would make every poll return
	// at once.
	onErr func(fd uintptr)
}

// rawSockSlice is the longest a waiter sleeps before it looks at the
// deadline and the closed flag again without being signalled.
const rawSockSlice = 100 * time.Millisecond

// openRawSock creates, sets up and binds the socket as net.ListenPacket
// would, without registering it with the network poller.
func openRawSock(ap netip.AddrPort, is6 bool, opts *Options, ifindex int, rb, wb int) (*rawSock, error) {
	fam := unix.AF_INET
	if is6 {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP) // non-blocking, as package net's (SetKernelWait changes it)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	s := &rawSock{fd: fd, evfd: -1}
	fail := func(err error) (*rawSock, error) {
		unix.Close(fd)
		if s.evfd >= 0 {
			unix.Close(s.evfd)
		}
		return nil, err
	}
	if is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail(fmt.Errorf("setsockopt IPV6_V6ONLY: %w", err))
		}
	}
	if err := setupSocket(uintptr(fd), is6, opts, ifindex); err != nil {
		return fail(err)
	}
	for _, b := range []struct{ force, plain, n int }{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, rb}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, wb}} {
		if b.n > 0 && unix.SetsockoptInt(fd, unix.SOL_SOCKET, b.force, b.n) != nil {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, b.plain, b.n); err != nil {
				return fail(fmt.Errorf("socket buffers: %w", err))
			}
		}
	}
	var sa unix.Sockaddr
	if is6 {
		sa6 := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		if z := ap.Addr().Zone(); z != "" {
			ifi, err := net.InterfaceByName(z)
			if err != nil {
				return fail(fmt.Errorf("zone %q: %w", z, err))
			}
			sa6.ZoneId = uint32(ifi.Index)
		}
		sa = sa6
	} else {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail(os.NewSyscallError("bind", err))
	}
	if s.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fail(fmt.Errorf("eventfd: %w", err))
	}
	return s, nil
}

// Control runs f with the socket, as syscall.RawConn's Control does.
func (s *rawSock) Control(f func(fd uintptr)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	return nil
}

// Read calls f until it returns true, waiting for the socket to be
// readable in between; it ends with os.ErrDeadlineExceeded once the read
// deadline has passed and with net.ErrClosed after Close.
func (s *rawSock) Read(f func(fd uintptr) bool) error { return s.do(f, unix.POLLIN) }

// Write calls f until it returns true, waiting for the socket to be
// writable in between.
func (s *rawSock) Write(f func(fd uintptr) bool) error { return s.do(f, unix.POLLOUT) }

// do is Read (events POLLIN, which has a deadline) or Write (POLLOUT).
func (s *rawSock) do(f func(fd uintptr) bool, events int16) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for {
		if s.closed.Load() {
			return net.ErrClosed
		}
		timeout := rawSockSlice
		if dl := s.deadline.Load(); dl != 0 && events == unix.POLLIN {
			d := time.Until(time.Unix(0, dl))
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			timeout = min(timeout, d)
		}
		if f(uintptr(s.fd)) {
			return nil
		}
		if err := s.wait(events, timeout); err != nil {
			return err
		}
	}
}

// wait sleeps in poll(2) until the socket has events, evfd is signalled
// or timeout passes (rounded up to a millisecond).
func (s *rawSock) wait(events int16, timeout time.Duration) error {
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: events}, {Fd: int32(s.evfd), Events: unix.POLLIN}}
	ms := int((timeout + time.Millisecond - 1) / time.Millisecond)
	if _, err := unix.Poll(fds, ms); err != nil && !errors.Is(err, unix.EINTR) {
		return os.NewSyscallError("poll", err)
	}
	if fds[0].Revents&unix.POLLERR != 0 && s.onErr != nil {
		s.onErr(uintptr(s.fd))
	}
	if fds[1].Revents&unix.POLLIN != 0 {
		var b [8]byte
		unix.Read(s.evfd, b[:]) // drain; the waiter looks at the deadline and the closed flag next
	}
	return nil
}

func (s *rawSock) signal() {
	one := [8]byte{1}
	unix.Write(s.evfd, one[:])
}

// SetReadDeadline sets the deadline of Read and wakes a waiting reader to
// look at it (a deadline in the past ends its Read at once).
func (s *rawSock) SetReadDeadline(t time.Time) error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	var n int64
	if !t.IsZero() {
		n = t.UnixNano()
		if n == 0 {
			n = 1
		}
	}
	s.deadline.Store(n)
	s.signal()
	return nil
}

// Close ends every Read and Write and closes the socket once they have
// returned. A reader in a blocking recvmmsg (the kernel wait) is woken by
// the shutdown, or returns within its receive timeout.
func (s *rawSock) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.signal()
	unix.Shutdown(s.fd, unix.SHUT_RDWR) // ENOTCONN on an unconnected UDP socket, but it wakes receivers
	s.mu.Lock()
	defer s.mu.Unlock()
	unix.Close(s.evfd)
	return unix.Close(s.fd)
}

// openNoNetpoll opens the endpoint's socket outside the network poller
// (Options.NoNetpoll).
func openNoNetpoll(ap netip.AddrPort, is6 bool, opts *Options, ifindex, rb, wb int) (rawSocket, bool, error) {
	s, err := openRawSock(ap, is6, opts, ifindex, rb, wb)
	if err != nil {
		return nil, true, err
	}
	return s, true, nil
}
