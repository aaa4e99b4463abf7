package cli

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tbrdma/tbrdma/stream"
)

// The cat relay: "tbrdma cat" without a peer on a host where "tbrdma serve"
// holds UDP 4791 (one device per address per machine) cannot open a device
// of its own. It asks that serve instead, over a unix socket of serve's,
//
//	<the live-counter directory>/serve-<pid>.sock   (mode 0600, directory 0700)
//
// to listen for it, and serve relays the accepted stream to it
// (docs/architecture.md says why a relay). The relay protocol,
// "tbrdma-catrelay/1", local to one machine and one user:
//
//  1. cat writes a registration, one JSON line (catRelayHello); serve
//     checks the caller's user (SO_PEERCRED on Linux), listens on the port
//     on the asked addresses and answers with one JSON line
//     (catRelayReply): the addresses bound, or why not.
//  2. serve then sends frames: a type byte, a big-endian u32 length, the
//     payload (at most catRelayMaxFrame bytes). 'R': a connection was
//     rejected (payload: "ADDRESS: why"); 'A': a sender was accepted
//     (payload: its address); 'D': stream data; then one of 'F' (the
//     stream's checked end), 'P' (the sender left without it: no trailer)
//     or 'E' (the stream failed; payload: why).
//  3. After 'A', cat writes its verdict (catTrailerSize bytes, as on the
//     stream) when it has one; serve sends it to the sender and closes
//     the stream. A cat that closes the socket without a verdict (killed,
//     interrupted) has serve drop the sender without a FIN; a serve that
//     closes it (stopped, killed) ends cat with an error.
//
// Later senders get catBusy from serve, as from cat itself.
const (
	catRelayProto    = "tbrdma-catrelay/1"
	catRelayMaxFrame = catSlotSize
	catRelayMaxLine  = 4096
	// catRelayBuffer is the relay socket's buffer for the stream each
	// way it flows (the kernel's default, some 200 KiB, costs a switch
	// between serve and cat every few frames).
	catRelayBuffer = 4 << 20
)

// Relay frame types.
const (
	catFrameRejected byte = 'R'
	catFrameAccepted byte = 'A'
	catFrameData     byte = 'D'
	catFrameFin      byte = 'F'
	catFramePeerLeft byte = 'P'
	catFrameFailed   byte = 'E'
)

// catRelayHello is cat's registration.
type catRelayHello struct {
	Proto   string   `json:"proto"`
	PID     int      `json:"pid"`
	Port    int      `json:"port"`
	Addrs   []string `json:"addrs"`
	Timeout float64  `json:"timeout"` // seconds: -W
}

// catRelayReply is serve's answer: Error, or the addresses it listens on.
type catRelayReply struct {
	Error string   `json:"error,omitempty"`
	Bound []string `json:"bound,omitempty"`
}

// catServeRef names a serve that holds UDP 4791 on Addrs, and its socket;
// Skipped are the receiver's other addresses.
type catServeRef struct {
	PID     int
	Path    string
	Addrs   []netip.Addr
	Skipped []netip.Addr
}

// catRelayPath is the relay socket of the serve with the PID.
func catRelayPath(dir string, pid int) string {
	return filepath.Join(dir, "serve-"+strconv.Itoa(pid)+".sock")
}

// serveRelay finds the serve a receiver must go through: one that holds
// UDP 4791 on the addresses it would listen on.
func (o *catOptions) serveRelay() (catServeRef, bool) {
	if o.findServe == nil {
		return catServeRef{}, false
	}
	list := []netip.Addr{o.bind}
	if !o.bind.IsValid() {
		var err error
		if list, err = o.Addrs(); err != nil || len(list) == 0 {
			return catServeRef{}, false // the direct path says what is wrong
		}
	}
	ref, ok := o.findServe(list)
	for _, a := range list {
		if ok && !containsAddr(ref.Addrs, a) {
			ref.Skipped = append(ref.Skipped, a)
		}
	}
	return ref, ok
}

// findServeRelay looks in the live-counter files (livecounters.go: those of
// this network namespace) for a serve process with a relay socket that has
// one of addrs open; it removes the sockets of serves that are gone.
func findServeRelay(addrs []netip.Addr) (catServeRef, bool) {
	dir := liveDir()
	removeDeadRelays(dir)
	files, err := readLive(dir, time.Now())
	if err != nil {
		return catServeRef{}, false
	}
	for _, f := range files {
		if f.PID == os.Getpid() {
			continue
		}
		ref := catServeRef{PID: f.PID, Path: catRelayPath(dir, f.PID)}
		for _, c := range f.Contexts {
			a, err := netip.ParseAddr(c.Addr)
			if err == nil && containsAddr(addrs, a) && !containsAddr(ref.Addrs, a) {
				ref.Addrs = append(ref.Addrs, a)
			}
		}
		if fi, err := os.Lstat(ref.Path); len(ref.Addrs) > 0 && err == nil && fi.Mode().Type() == fs.ModeSocket {
			return ref, true
		}
	}
	return catServeRef{}, false
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if b.Unmap().WithZone("") == a.Unmap().WithZone("") {
			return true
		}
	}
	return false
}

// removeDeadRelays removes the relay sockets of processes that are gone
// (a serve killed before it could).
func removeDeadRelays(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), "serve-")
		s, ok2 := strings.CutSuffix(s, ".sock")
		pid, err := strconv.Atoi(s)
		if ok && ok2 && err == nil && pid > 0 && e.Type() == fs.ModeSocket && !processAlive(pid) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// writeCatFrame writes one relay frame.
func writeCatFrame(w io.Writer, typ byte, payload []byte) error {
	var h [5]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	b := net.Buffers{h[:], payload}
	_, err := b.WriteTo(w)
	return err
}

// readCatFrame reads one frame's header; the payload's length comes back,
// checked against the bound.
func readCatFrame(r io.Reader) (byte, int, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	switch {
	case n > catRelayMaxFrame:
		return 0, 0, fmt.Errorf("relay protocol error: a frame of %d bytes (at most %d)", n, catRelayMaxFrame)
	case h[0] != catFrameData && n > catRelayMaxLine:
		return 0, 0, fmt.Errorf("relay protocol error: a %q frame of %d bytes", h[0], n)
	}
	return h[0], int(n), nil
}

// readCatLine reads one JSON line of at most catRelayMaxLine bytes into v.
func readCatLine(r *bufio.Reader, v any) error {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return errors.New("relay protocol error: a line too long")
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("relay protocol error: %v", err)
	}
	return nil
}

// --- cat's side ---------------------------------------------------------------

// catRelayed is a sender's stream as serve relays it: catStream.
type catRelayed struct {
	c    *net.UnixConn
	r    *bufio.Reader
	gone func(error) error // the error for a relay that broke
	buf  []byte
}

func (s *catRelayed) Write(p []byte) (int, error) { return s.c.Write(p) }
func (s *catRelayed) CloseWrite() error           { return s.c.CloseWrite() }

// WriteTo writes the relayed data to w until the stream's end.
func (s *catRelayed) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		typ, n, err := readCatFrame(s.r)
		if err != nil {
			return total, s.gone(err)
		}
		p := s.buf[:n]
		if _, err := io.ReadFull(s.r, p); err != nil {
			return total, s.gone(err)
		}
		switch typ {
		case catFrameData:
			m, err := w.Write(p)
			total += int64(m)
			if err != nil {
				return total, err
			}
		case catFrameFin:
			return total, nil
		case catFramePeerLeft:
			return total, stream.ErrPeerClosed
		case catFrameFailed:
			return total, errors.New(string(p))
		default:
			return total, s.gone(fmt.Errorf("relay protocol error: a %q frame in the stream", typ))
		}
	}
}

// runCatRelayed is the receiver through the serve of ref.
func runCatRelayed(ctx context.Context, o *catOptions, ref catServeRef) error {
	errOut, tty := o.IO.ErrOut, o.IO.IsStderrTTY()
	serve := fmt.Sprintf("tbrdma serve (pid %d)", ref.PID)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: ref.Path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("cat: %s holds UDP port 4791 on %v, and its relay for cat (%s) does not answer: %v: stop serve, or give --bind another address", serve, ref.Addrs[0], ref.Path, err)
	}
	defer c.Close()
	for _, a := range ref.Skipped {
		fmt.Fprintf(errOut, "tbrdma cat: skipping %v: receiving through %s, which does not hold it (give --bind %v to receive there alone)\n", a, serve, a)
	}
	c.SetReadBuffer(catRelayBuffer)
	stop := context.AfterFunc(ctx, func() { c.Close() }) // serve then drops the sender
	defer stop()
	gone := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s, which relays for this cat, went away (%v): run tbrdma cat again", serve, catCause(err))
	}
	r := bufio.NewReaderSize(c, 64<<10)
	bound, err := catRegister(o, c, r, ref)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cat: %s: %w", serve, err)
	}
	if o.ready != nil {
		o.ready(bound)
	}
	if tty {
		fmt.Fprintf(errOut, "tbrdma cat: waiting for a stream on %s port %d (through %s)\n", joinAddrs(bound), o.Port, serve)
	}
	peer, err := catAwaitSender(errOut, r)
	if err != nil {
		return fmt.Errorf("cat: %w", gone(err))
	}
	if tty {
		fmt.Fprintf(errOut, "tbrdma cat: receiving from %v\n", peer)
	}
	pipe := make(chan os.Signal, 1) // as runCatReceive
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	err = catReceive(o, &catRelayed{c: c, r: r, gone: gone, buf: make([]byte, catRelayMaxFrame)}, peer)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// catRegister asks serve to listen for us and returns where it does.
func catRegister(o *catOptions, c *net.UnixConn, r *bufio.Reader, ref catServeRef) ([]netip.AddrPort, error) {
	h := catRelayHello{Proto: catRelayProto, PID: os.Getpid(), Port: o.Port, Timeout: o.timeout.Seconds()}
	for _, a := range ref.Addrs {
		h.Addrs = append(h.Addrs, a.String())
	}
	b, _ := json.Marshal(h)
	c.SetDeadline(time.Now().Add(o.timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("registering with its relay for cat: %v", catCause(err))
	}
	var rep catRelayReply
	if err := readCatLine(r, &rep); err != nil {
		return nil, fmt.Errorf("registering with its relay for cat: %v (an older tbrdma serve? run the same version)", catCause(err))
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	var bound []netip.AddrPort
	for _, s := range rep.Bound {
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("relay protocol error: bound address %q", s)
		}
		bound = append(bound, a)
	}
	if len(bound) == 0 {
		return nil, errors.New("relay protocol error: serve listens nowhere")
	}
	return bound, nil
}

// catAwaitSender reads serve's frames until it accepts a sender, printing
// the rejected connections as cat does.
func catAwaitSender(errOut io.Writer, r *bufio.Reader) (netip.Addr, error) {
	buf := make([]byte, catRelayMaxLine)
	for {
		typ, n, err := readCatFrame(r)
		if err == nil && n > len(buf) {
			err = fmt.Errorf("relay protocol error: a %q frame of %d bytes before the stream", typ, n)
		}
		if err != nil {
			return netip.Addr{}, err
		}
		p := buf[:n]
		if _, err := io.ReadFull(r, p); err != nil {
			return netip.Addr{}, err
		}
		switch typ {
		case catFrameRejected:
			fmt.Fprintf(errOut, "tbrdma cat: rejected a connection from %s\n", p)
		case catFrameAccepted:
			a, err := netip.ParseAddr(string(p))
			if err != nil {
				return netip.Addr{}, fmt.Errorf("relay protocol error: sender address %q", p)
			}
			return a, nil
		default:
			return netip.Addr{}, fmt.Errorf("relay protocol error: a %q frame before the stream", typ)
		}
	}
}
