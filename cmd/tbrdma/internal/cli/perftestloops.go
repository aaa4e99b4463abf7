package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/verbs"
)

// This file holds the loops of the tests where both sides work on the data
// path: send-lat and send-bw (SEND/RECV), write-lat (a ping-pong of RDMA
// WRITEs). perftest.go sets them up and calls runSend or runWriteLat.

// recvState is a SEND test's receive queue for one message size: iters
// receives in all, at most rx-depth posted at a time (ctx_set_recv_wqes and
// the re-posting of run_iter_lat_send / run_iter_bw_server).
type recvState struct {
	size          int
	posted, done  int
	total         int
	first, latest time.Time // first and latest receive completion seen
}

// postRecvs starts a size's receives: min(rx-depth, iters) of them.
func (t *perftest) postRecvs(size int) error {
	t.rs = recvState{size: size, total: t.o.Iters}
	for range min(t.o.RxDepth, t.o.Iters) {
		if err := t.postRecv(); err != nil {
			return err
		}
	}
	return nil
}

func (t *perftest) postRecv() error {
	// Every receive lands in the second half of the buffer; the first half
	// is what this side sends.
	wr := verbs.RecvWR{WRID: uint64(t.rs.posted), SGList: []verbs.SGE{t.mr.SGE(t.half, t.rs.size)}}
	if _, err := t.qp.PostRecv(wr); err != nil {
		return fmt.Errorf("couldn't post receive: %d of %d: %w", t.rs.posted+1, t.rs.total, err)
	}
	t.rs.posted++
	return nil
}

// pollSend waits for completions until done reports true, counting send
// completions in t.sent and receives in t.rs (re-posting receives while
// fewer than iters were posted). A failed completion ends the test.
func (t *perftest) pollSend(ctx context.Context, done func() bool) error {
	o := t.o
	for !done() {
		wcs, err := t.w.Wait(ctx)
		if err != nil {
			return err
		}
		now := o.Now()
		for i := range wcs {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				fmt.Fprintf(o.IO.ErrOut, " Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n scnt=%d, rcnt=%d\n",
					o.side(), wc.Status, wc.WRID, wc.VendorErr, t.sent, t.rs.done)
				fmt.Fprintf(o.IO.ErrOut, "tbrdma: %v failed: %v%s\n", wc.Opcode, wc.Status, peerGone(t.qp, wc.Status))
				return errSilent
			}
			if wc.Opcode != verbs.WCRecv {
				t.sent++
				continue
			}
			if int(wc.ByteLen) != t.rs.size {
				fmt.Fprintf(o.IO.ErrOut, "tbrdma: received a %d-byte message, want %d\n", wc.ByteLen, t.rs.size)
				return errSilent
			}
			if t.rs.done == 0 {
				t.rs.first = now
			}
			t.rs.done++
			t.rs.latest = now
			if t.rs.posted < t.rs.total {
				if err := t.postRecv(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runSend runs send-lat or send-bw for every size: post the receives (the
// side that receives), synchronise, run, print; send-bw with -a
// synchronises after each size too (send_bw.c). Both sides print their own
// figures; nothing is exchanged but the closing handshake.
func (t *perftest) runSend(ctx context.Context, comm *perf.Comm, rem perf.Dest) error {
	o := t.o
	out := t.human()
	server := o.Peer == ""
	bw := o.Kind.bw
	if bw {
		fmt.Fprintln(out, perf.BWHeader)
	} else {
		fmt.Fprintln(out, perf.LatHeader)
	}
	for _, size := range o.sizes() {
		if !bw || server {
			if err := t.postRecvs(size); err != nil {
				return err
			}
		}
		if _, err := comm.HandShake(t.my); err != nil {
			return err
		}
		switch {
		case bw && server:
			if err := t.pollSend(ctx, func() bool { return t.rs.done == o.Iters }); err != nil {
				return err
			}
			if err := t.printBW(perf.ReceiveBandwidth(size, o.Iters, t.rs.first, t.rs.latest)); err != nil {
				return err
			}
		case bw:
			rep, err := t.runBW(ctx, rem, size)
			if err != nil {
				return err
			}
			if err := t.printBW(rep); err != nil {
				return err
			}
		default:
			s, err := t.runSendLat(ctx, size)
			if err != nil {
				return err
			}
			if err := t.printLat(s); err != nil {
				return err
			}
		}
		if bw && o.All {
			if _, err := comm.HandShake(t.my); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(out, perf.Line)
	return comm.Close(t.my)
}

// runSendLat is perftest's run_iter_lat_send: the client sends first; then
// each side waits for the peer's message before sending its next one. The
// post times make the statistics (half the round trip).
func (t *perftest) runSendLat(ctx context.Context, size int) (perf.LatStats, error) {
	o := t.o
	n := o.Iters
	client := o.Peer != ""
	posted := make([]time.Time, n)
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{t.mr.SGE(0, size)}}
	t.sent = 0
	ctx, seen, stop := watchSilence(ctx, peerSilence)
	defer stop()
	for scnt, rcnt := 0, 0; scnt < n || rcnt < n; {
		if rcnt < n && !(scnt == 0 && client) {
			rcnt++
			if err := t.pollSend(ctx, func() bool { return t.rs.done >= rcnt }); err != nil {
				return perf.LatStats{}, silentPeer(ctx, o.IO.ErrOut, o.Kind.name, t.qp, err)
			}
			seen.Add(1)
		}
		if scnt < n {
			// One SEND in flight (tx depth 1): the previous one's ACK has
			// nearly always arrived before the peer's answer.
			if err := t.pollSend(ctx, func() bool { return t.sent == scnt }); err != nil {
				return perf.LatStats{}, silentPeer(ctx, o.IO.ErrOut, o.Kind.name, t.qp, err)
			}
			seen.Add(1)
			posted[scnt] = o.Now()
			if _, err := t.qp.PostSend(wr); err != nil {
				return perf.LatStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			scnt++
		}
	}
	if err := t.pollSend(ctx, func() bool { return t.sent == n }); err != nil {
		return perf.LatStats{}, err
	}
	s, _ := perf.Latency(size, posted, 2)
	return s, nil
}

// runWriteLat runs write-lat for every size and prints the table. perftest
// 4.5 exchanges nothing after the run: no report, no closing handshake.
func (t *perftest) runWriteLat(ctx context.Context, rem perf.Dest) error {
	out := t.human()
	fmt.Fprintln(out, perf.LatHeader)
	for _, size := range t.o.sizes() {
		s, err := t.writeLat(ctx, rem, size)
		if err != nil {
			return err
		}
		if err := t.printLat(s); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, perf.Line)
	return t.awaitPeerDone(ctx)
}

// peerDoneTimeout bounds how long write-lat's server waits for the client
// to close the TCP connection after the last WRITE.
const peerDoneTimeout = 10 * time.Second

// awaitPeerDone is write-lat's end of test. The server sees the client's
// last WRITE land before the client has the ACK for it; closing the device
// then would leave a lost ACK (or a retransmitted WRITE) unanswered and
// fail the client's last WRITE. The client closes the TCP connection only
// once that WRITE has completed, which is what perftest does too (its
// client's FIN follows the last ACK in testdata/rxe/write_lat.pcap), so
// the server reads the connection until EOF before it closes the device.
// The client has nothing to wait for: the server's last WRITE completed
// before the client's last one was posted. With -R there is no TCP
// connection: the server waits for the client's rdma_cm disconnect, which
// runs when the client closes after the same completion.
func (t *perftest) awaitPeerDone(ctx context.Context) error {
	if t.o.Peer != "" {
		return nil
	}
	if t.oob == nil {
		if t.cm != nil {
			t.cm.awaitDisconnect(ctx, peerDoneTimeout)
		}
		return nil
	}
	t.oob.SetReadDeadline(time.Now().Add(peerDoneTimeout))
	var b [64]byte
	for {
		if _, err := t.oob.Read(b[:]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				fmt.Fprintf(t.o.IO.ErrOut, "tbrdma: the client did not close the connection within %v of its last WRITE; closing anyway\n", peerDoneTimeout)
			}
			return nil // EOF: the client is done
		}
	}
}

// writeLat is perftest's run_iter_lat_write: each side WRITEs size bytes
// into the peer's second half, the last byte holding its iteration count
// (mod 256), and spins on the last byte of its own second half for the
// peer's count before writing again. The server writes first.
func (t *perftest) writeLat(ctx context.Context, rem perf.Dest, size int) (perf.LatStats, error) {
	o := t.o
	n := o.Iters
	server := o.Peer == ""
	posted := make([]time.Time, n)
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{t.mr.SGE(0, size)},
		RemoteAddr: rem.VAddr, RKey: verbs.RKey(rem.RKey)}
	poll := t.half + size - 1
	ctx, seen, stop := watchSilence(ctx, peerSilence)
	defer stop()
	for scnt, rcnt := 0, 0; scnt < n || rcnt < n; {
		if rcnt < n && !(scnt == 0 && server) {
			rcnt++
			if err := t.waitByte(ctx, poll, byte(rcnt)); err != nil {
				return perf.LatStats{}, silentPeer(ctx, o.IO.ErrOut, o.Kind.name, t.qp, err)
			}
			seen.Add(1)
		}
		if scnt < n {
			posted[scnt] = o.Now()
			scnt++
			t.buf[size-1] = byte(scnt) // the previous WRITE has completed
			if _, err := t.qp.PostSend(wr); err != nil {
				return perf.LatStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			wcs, err := t.w.Wait(ctx)
			if err != nil {
				return perf.LatStats{}, err
			}
			if wc := &wcs[0]; wc.Status != verbs.WCSuccess {
				fmt.Fprintf(o.IO.ErrOut, " Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n scnt=%d, rcnt=%d\n",
					o.side(), wc.Status, wc.WRID, wc.VendorErr, scnt, rcnt)
				fmt.Fprintf(o.IO.ErrOut, "tbrdma: RDMA_WRITE failed: %v%s\n", wc.Status, peerGone(t.qp, wc.Status))
				t.printCounters()
				return perf.LatStats{}, errSilent
			}
		}
	}
	s, _ := perf.Latency(size, posted, 2)
	return s, nil
}

// waitByte spins until t.buf[i] == v, as perftest polls its buffer. The
// byte is written by the engine's receive goroutine (the peer's RDMA
// WRITE): there is no completion to wait on. The function call in the loop
// makes every test a fresh load.
//
// It yields between tests (runtime.Gosched), which lets the receive
// goroutine run only while that goroutine busy-polls its socket too
// (setup turns that on without -e): a goroutine asleep in the runtime's
// network poller is woken by the scheduler only when nothing else is
// runnable, never while another goroutine keeps yielding. So the spin is
// bounded (perf.BusySpin tests), and so is every spin with -e (a few):
// after it, the loop sleeps between tests and the poller runs.
func (t *perftest) waitByte(ctx context.Context, i int, v byte) error {
	limit := perf.BusySpin
	if t.o.Events {
		limit = 8
	}
	if t.buf[i] == v {
		return nil
	}
	held := !t.o.Events
	if held {
		hooks.Of(t.dev).Spinning(true)
	}
	defer func() {
		if held {
			hooks.Of(t.dev).Spinning(false)
		}
	}()
	for spins := 1; t.buf[i] != v; spins++ {
		if spins&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if spins < limit {
			runtime.Gosched()
			continue
		}
		if held { // the peer is slow: sleep between tests, and let the receive loop sleep
			hooks.Of(t.dev).Spinning(false)
			held = false
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// printCounters prints the engine's non-zero counters after a failed
// completion: what was retransmitted, NAKed or dropped says why.
func (t *perftest) printCounters() {
	c := t.dev.Counters()
	var b strings.Builder
	for _, f := range c.Fields() {
		if f.Value != 0 {
			fmt.Fprintf(&b, " %s=%d", f.Name, f.Value)
		}
	}
	fmt.Fprintf(t.o.IO.ErrOut, "tbrdma: engine counters:%s\n", b.String())
}

// side is "server" or "client", for perftest's error messages.
func (o *perftestOptions) side() string {
	if o.Peer == "" {
		return "server"
	}
	return "client"
}
