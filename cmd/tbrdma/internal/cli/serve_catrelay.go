package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/stream"
	"github.com/tbrdma/tbrdma/verbs"
)

// serve's side of the cat relay (catrelay.go): it listens for the cat
// receivers of this machine's user on a unix socket, and for each one on
// the cat's rdma_cm port of the served devices, and relays the stream.

// catRelayServer serves the relay socket.
type catRelayServer struct {
	devs  []*verbs.Context
	log   io.Writer
	mu    sync.Mutex
	ports map[int]int // cat port → the PID of the cat registered on it
}

// startCatRelay listens on the relay socket at path ("": the default, in
// the live-counter directory) and returns what stops it. A failure is
// not serve's: it says so and relays nothing.
func startCatRelay(ctx context.Context, path string, devs []*verbs.Context, log io.Writer) (stop func()) {
	if path == "" {
		path = catRelayPath(liveDir(), os.Getpid())
	}
	if !claimCatRelay(path) {
		return func() {} // another serve of this process (tests) has it
	}
	ln, err := listenCatRelay(path)
	if err != nil {
		unclaimCatRelay(path)
		fmt.Fprintf(log, "tbrdma serve: warning: no relay for tbrdma cat receivers on this machine: %v\n", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &catRelayServer{devs: devs, log: log, ports: map[int]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Go(func() { s.handle(ctx, c) })
		}
	})
	return func() {
		cancel()
		ln.Close()
		wg.Wait()
		unclaimCatRelay(path)
	}
}

// catRelays are the relay sockets of this process's serves: one serve per
// process has the default one.
var catRelays = struct {
	sync.Mutex
	paths map[string]bool
}{paths: map[string]bool{}}

func claimCatRelay(path string) bool {
	catRelays.Lock()
	defer catRelays.Unlock()
	if catRelays.paths[path] {
		return false
	}
	catRelays.paths[path] = true
	return true
}

func unclaimCatRelay(path string) {
	catRelays.Lock()
	delete(catRelays.paths, path)
	catRelays.Unlock()
}

// listenCatRelay makes the socket, mode 0600 in a directory of mode 0700
// (ensureLiveDir), replacing a stale one.
func listenCatRelay(path string) (*net.UnixListener, error) {
	if err := ensureLiveDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// handle serves one cat: registration, then the relay of one stream.
func (s *catRelayServer) handle(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() }) // serve stops: the cat is told
	defer stop()
	r := bufio.NewReaderSize(c, catRelayMaxLine)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, listeners, err := s.register(c, r)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	rep := catRelayReply{}
	if err != nil {
		rep.Error = err.Error()
	}
	for _, l := range listeners {
		rep.Bound = append(rep.Bound, l.Addr().(stream.Addr).AddrPort.String())
	}
	b, _ := json.Marshal(rep)
	c.SetReadDeadline(time.Time{})
	if _, werr := c.Write(append(b, '\n')); werr != nil || err != nil {
		return
	}
	defer s.release(h.Port)
	var where []string
	for _, l := range listeners {
		where = append(where, l.Addr().(stream.Addr).AddrPort.Addr().String())
	}
	fmt.Fprintf(s.log, "tbrdma serve: cat (pid %d) waits for a stream on %s port %d (relayed)\n", h.PID, strings.Join(where, ", "), h.Port)
	why := s.relay(ctx, c, listeners, h)
	fmt.Fprintf(s.log, "tbrdma serve: cat (pid %d) on port %d: %s\n", h.PID, h.Port, why)
}

// register reads and checks a registration and listens as it asks.
func (s *catRelayServer) register(c *net.UnixConn, r *bufio.Reader) (catRelayHello, []*stream.Listener, error) {
	var h catRelayHello
	if err := checkRelayPeer(c); err != nil {
		return h, nil, err
	}
	if err := readCatLine(r, &h); err != nil {
		return h, nil, err
	}
	if h.Proto != catRelayProto {
		return h, nil, fmt.Errorf("this serve speaks %s, the cat %q: run the same tbrdma version", catRelayProto, h.Proto)
	}
	if h.Port < 1 || h.Port > 65535 || !(h.Timeout > 0) || h.Timeout > 1e6 || math.IsNaN(h.Timeout) {
		return h, nil, fmt.Errorf("relay protocol error: port %d, timeout %v", h.Port, h.Timeout)
	}
	var devs []*verbs.Context
	var served []string
	for _, d := range s.devs {
		a := d.LocalAddr().Addr()
		served = append(served, a.String())
		if slices.ContainsFunc(h.Addrs, func(x string) bool {
			p, err := netip.ParseAddr(x)
			return err == nil && containsAddr([]netip.Addr{p}, a)
		}) {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		return h, nil, fmt.Errorf("it does not serve %s (it serves %s): give cat --bind one of those", strings.Join(h.Addrs, ", "), strings.Join(served, ", "))
	}
	s.mu.Lock()
	other, taken := s.ports[h.Port]
	if !taken {
		s.ports[h.Port] = h.PID
	}
	s.mu.Unlock()
	if taken {
		return h, nil, fmt.Errorf("another tbrdma cat (pid %d) already waits for a stream on port %d through it: wait for it to finish, or give -p another port (on both ends)", other, h.Port)
	}
	var ls []*stream.Listener
	timeout := time.Duration(h.Timeout * float64(time.Second))
	for _, d := range devs {
		a := netip.AddrPortFrom(d.LocalAddr().Addr(), uint16(h.Port))
		lc := stream.ListenConfig{Device: d, Slots: catSlots, SlotSize: catSlotSize, Backlog: 4, Timeout: timeout}
		l, err := lc.Listen(context.Background(), a.String())
		if err != nil {
			s.release(h.Port)
			for _, l := range ls {
				l.Close()
			}
			return h, nil, fmt.Errorf("listen on %v port %d: %w", a.Addr(), a.Port(), catCause(err))
		}
		ls = append(ls, l)
	}
	return h, ls, nil
}

func (s *catRelayServer) release(port int) {
	s.mu.Lock()
	delete(s.ports, port)
	s.mu.Unlock()
}

// catRelayVerdict is what the cat wrote back: its verdict, or why none.
type catRelayVerdict struct {
	b   []byte
	err error
}

// relay accepts one sender for the cat on c and relays its stream; it
// returns how that ended, for serve's log.
func (s *catRelayServer) relay(ctx context.Context, c *net.UnixConn, ls []*stream.Listener, h catRelayHello) string {
	conns := make(chan *stream.Conn)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(quit)
		for _, l := range ls {
			l.Close()
		}
		wg.Wait()
	}()
	for _, l := range ls {
		wg.Go(func() { catAcceptLoop(l, conns, quit) })
	}
	verdict := make(chan catRelayVerdict, 1)
	go func() { // the cat writes nothing before its verdict: EOF is its end
		b := make([]byte, catTrailerSize)
		_, err := io.ReadFull(c, b)
		verdict <- catRelayVerdict{b, err}
	}()
	timeout := time.Duration(h.Timeout * float64(time.Second))
	var nc *stream.Conn
	for nc == nil {
		select {
		case <-ctx.Done():
			return "serve stops: the cat was told"
		case <-verdict:
			return "the cat went away before a sender came"
		case x := <-conns:
			peer := x.RemoteAddr().(stream.Addr).AddrPort.Addr()
			if err := catCheckHello(x, timeout); err != nil {
				writeCatFrame(c, catFrameRejected, fmt.Appendf(nil, "%v: %v", peer, err))
				wg.Go(func() { x.Abort() })
				continue
			}
			nc = x
		}
	}
	wg.Go(func() { catAnswerBusy(conns, quit, &wg) })
	peer := nc.RemoteAddr().(stream.Addr).AddrPort.Addr()
	c.SetWriteBuffer(catRelayBuffer)
	writeCatFrame(c, catFrameAccepted, []byte(peer.String()))
	return fmt.Sprintf("the stream from %v: %s", peer, relayStream(ctx, c, nc, verdict))
}

// relayStream copies nc's stream to the cat, and its verdict back.
func relayStream(ctx context.Context, c *net.UnixConn, nc *stream.Conn, verdict chan catRelayVerdict) string {
	fw := &catFrameWriter{w: c}
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		_, err := nc.WriteTo(fw)
		switch {
		case fw.err != nil: // the cat is gone: its verdict's reader says so
		case err == nil:
			writeCatFrame(c, catFrameFin, nil)
		case errors.Is(err, stream.ErrPeerClosed):
			writeCatFrame(c, catFramePeerLeft, nil)
		default:
			writeCatFrame(c, catFrameFailed, []byte(catCause(err).Error()))
		}
	}()
	defer func() { <-pumped }()
	select {
	case <-ctx.Done():
		nc.Abort()
		return fmt.Sprintf("dropped after %d bytes: serve stops", fw.n)
	case v := <-verdict:
		if v.err != nil {
			nc.Abort()
			return fmt.Sprintf("dropped after %d bytes: the cat went away without a verdict", fw.n)
		}
		nc.Write(v.b)
		nc.CloseWrite()
		nc.Close()
		t, err := parseCatTrailer(v.b)
		if err != nil {
			return fmt.Sprintf("%d bytes, an unreadable verdict", fw.n)
		}
		return fmt.Sprintf("%d bytes written out, verdict %s", t.bytes, catStatusName(t.status))
	}
}

// catStatusName names a verdict's status for serve's log.
func catStatusName(s byte) string {
	switch s {
	case catOK:
		return "ok"
	case catMismatch:
		return "integrity check failed"
	case catOutputFailed:
		return "output failed"
	case catBusy:
		return "busy"
	case catIncomplete:
		return "incomplete"
	case catOutputClosed:
		return "output closed"
	}
	return fmt.Sprint(s)
}

// catFrameWriter writes what it is given as data frames.
type catFrameWriter struct {
	w   io.Writer
	n   uint64
	err error
}

func (f *catFrameWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 && f.err == nil {
		n := min(len(p), catRelayMaxFrame)
		if f.err = writeCatFrame(f.w, catFrameData, p[:n]); f.err == nil {
			f.n += uint64(n)
			p = p[n:]
		}
	}
	if f.err != nil {
		return total - len(p), f.err
	}
	return total, nil
}

// catAcceptLoop hands l's connections to conns until quit.
func catAcceptLoop(l *stream.Listener, conns chan<- *stream.Conn, quit <-chan struct{}) {
	for {
		c, err := l.AcceptConn()
		if err != nil {
			return
		}
		select {
		case conns <- c:
		case <-quit:
			c.Abort()
			return
		}
	}
}

// catAnswerBusy tells the senders that come while one is served that the
// receiver is busy, as cat itself does.
func catAnswerBusy(conns <-chan *stream.Conn, quit <-chan struct{}, wg *sync.WaitGroup) {
	for {
		select {
		case nc := <-conns:
			wg.Go(func() {
				nc.Write(catTrailer{status: catBusy}.marshal())
				nc.CloseWrite()
				nc.Close()
			})
		case <-quit:
			return
		}
	}
}
