package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// This file runs the tests' loops (perf.Loop) size by size: which loop,
// the handshakes between sizes, the rows, and the end of each test.
// perftest.go's run sets the test up and calls runSend, runWriteLat,
// runLat or runBW, or on the server of the one-sided tests serve.

// runSend runs send-lat or send-bw for every size: post the receives (the
// side that receives), synchronise, run, print; send-bw with -a
// synchronises after each size too (send_bw.c). Both sides print their own
// figures; nothing is exchanged but the closing handshake. With -b both
// sides post receives and send (run_iter_bi), then exchange their reports
// and print the sum (bidirSize), before -a's synchronisation.
func (t *perftest) runSend(ctx context.Context, comm *perf.Comm, rems []perf.Dest) error {
	o := t.o
	out := t.human()
	server := o.Peer == ""
	bw := o.Kind.bw
	if bw {
		fmt.Fprintln(out, o.bwHeader())
	} else {
		fmt.Fprintln(out, t.o.latHeader())
	}
	for _, size := range o.sizes() {
		if !bw || server || o.Bidir {
			if err := t.loop.PostRecvs(size); err != nil {
				return err
			}
		}
		if _, err := comm.HandShake(t.my); err != nil {
			return err
		}
		switch {
		case o.Bidir:
			if err := t.bidirSize(ctx, comm, rems, size, false); err != nil {
				return err
			}
		case bw:
			if err := t.sendBW(ctx, rems, size); err != nil {
				return err
			}
		default:
			s, err := t.loop.SendLat(ctx, size)
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
	if t.interrupted() {
		// send-bw --run_infinitely: each end runs until its own signal,
		// as perftest's; the peer may be running still, or gone.
		return nil
	}
	return comm.Close(t.my)
}

// sendBW is send-bw's loop for one size, on either side, and its row
// (with --run_infinitely the loop prints a row per interval).
func (t *perftest) sendBW(ctx context.Context, rems []perf.Dest, size int) error {
	var rep perf.BWReport
	var err error
	if t.o.Peer == "" {
		rep, err = t.loop.ReceiveBW(t.loopWith(ctx), size)
	} else {
		rep, err = t.loop.BW(t.loopWith(ctx), rems, size)
	}
	if err != nil || t.o.RunInfinitely {
		return err
	}
	return t.printBW(rep)
}

// runLat runs read-lat or atomic-lat's client for every size and prints
// the table.
func (t *perftest) runLat(ctx context.Context, comm *perf.Comm, rem perf.Dest) error {
	out := t.human()
	fmt.Fprintln(out, t.o.latHeader())
	for _, size := range t.o.sizes() {
		stats, err := t.loop.Lat(ctx, rem, size)
		if err != nil {
			return err
		}
		if err := t.printLat(stats); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, perf.Line)
	return comm.Close(t.my)
}

// runBW runs write-bw or read-bw's client for every size and prints the
// table; it sends the last report, which the server prints.
func (t *perftest) runBW(ctx context.Context, comm *perf.Comm, rems []perf.Dest) error {
	out := t.human()
	fmt.Fprintln(out, t.o.bwHeader())
	var rep perf.BWReport
	for _, size := range t.o.sizes() {
		var err error
		if rep, err = t.loop.BW(t.loopWith(ctx), rems, size); err != nil {
			return err
		}
		if t.o.RunInfinitely {
			break // the loop printed a row per interval; rep is the whole run's
		}
		if err := t.printBW(rep); err != nil {
			return err
		}
	}
	if _, err := comm.HandShake(t.my); err != nil {
		return err
	}
	if t.o.ReportGbits {
		rep = rep.Gbits() // perftest sends the report in the unit it prints
	}
	if _, err := comm.ExchangeBWReport(rep); err != nil {
		return err
	}
	fmt.Fprintln(out, perf.Line)
	return comm.Close(t.my)
}

// runBidir runs write-bw or read-bw with -b, on both sides, for every
// size as perftest does: synchronise, run, (with -a) synchronise again,
// exchange the reports and print the sum; then the closing handshake.
// There is no final report exchange as without -b.
func (t *perftest) runBidir(ctx context.Context, comm *perf.Comm, rems []perf.Dest) error {
	out := t.human()
	fmt.Fprintln(out, t.o.bwHeader())
	for _, size := range t.o.sizes() {
		if _, err := comm.HandShake(t.my); err != nil {
			return err
		}
		if err := t.bidirSize(ctx, comm, rems, size, t.o.All); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, perf.Line)
	return comm.Close(t.my)
}

// bidirSize is one size of a -b test once both sides are synchronised:
// the loop, with sync a handshake after it (perftest's, with -a, between
// the loop and the reports), the report exchange, and the row.
func (t *perftest) bidirSize(ctx context.Context, comm *perf.Comm, rems []perf.Dest, size int, sync bool) error {
	my, err := t.loop.BW(ctx, rems, size)
	if err != nil {
		return err
	}
	if sync {
		if _, err := comm.HandShake(t.my); err != nil {
			return err
		}
	}
	mine := my
	if t.o.ReportGbits {
		mine = my.Gbits() // perftest sends the report in the unit it prints
	}
	peer, err := comm.ExchangeBWReport(mine)
	if err != nil {
		return err
	}
	if peer.Size != my.Size || peer.Iters == 0 {
		return fmt.Errorf("report exchange: the peer reported %d iterations of %d bytes where this side ran %d of %d: it does not run -b (bidirectional); start both ends with -b, or neither", peer.Iters, peer.Size, my.Iters, my.Size)
	}
	return t.printBW(my.Plus(t.peerReport(peer)))
}

// serve is the server's part after the QPs are connected: it has nothing to
// do on the data path but wait for the client's closing handshake (and, for
// bandwidth tests, print the client's report).
func (t *perftest) serve(ctx context.Context, comm *perf.Comm) error {
	out := t.human()
	if t.o.Kind.bw {
		fmt.Fprintln(out, t.o.bwHeader())
		if _, err := comm.HandShake(t.my); err != nil {
			return err
		}
		rep, err := comm.ExchangeBWReport(perf.BWReport{})
		if err != nil {
			return err
		}
		if err := t.printBW(t.peerReport(rep)); err != nil {
			return err
		}
		fmt.Fprintln(out, perf.Line)
		return comm.Close(t.my)
	}
	if err := comm.Close(t.my); err != nil {
		return err
	}
	if t.o.Kind.verb == perf.VerbAtomic {
		return t.loop.CheckAtomicTarget()
	}
	return nil
}

// runWriteLat runs write-lat for every size and prints the table. perftest
// 4.5 exchanges nothing after the run: no report, no closing handshake.
func (t *perftest) runWriteLat(ctx context.Context, rem perf.Dest) error {
	out := t.human()
	fmt.Fprintln(out, t.o.latHeader())
	for _, size := range t.o.sizes() {
		s, err := t.loop.WriteLat(ctx, rem, size)
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

// peerDoneTimeout bounds how long write-lat waits for the peer to close
// the TCP connection after the run.
const peerDoneTimeout = 10 * time.Second

// awaitPeerDone is write-lat's end of test: it keeps the QP answering
// until the peer is done with it. The server sees the client's last WRITE
// land before the client has the ACK for it; closing the device then
// would leave a lost ACK (or a retransmitted WRITE) unanswered and fail
// the client's last WRITE. The client closes the TCP connection only once
// that WRITE has completed, which is what perftest does too (its client's
// FIN follows the last ACK in testdata/rxe/write_lat.pcap), so the server
// reads the connection until EOF before it closes the device.
//
// With -n the client has nothing to wait for: the server's last WRITE
// completed before the client's last one was posted. With -D it has: each
// end stops on its own clock, so the client may stop while the server's
// answer to its last WRITE is on its way, and perftest's server, which
// waits for that WRITE's completion without looking at its clock, would
// spin until the retries run out (interop's write-lat-D-tbclient, on a
// slow guest). So a timed client reads until the server's EOF too.
// Both ends shut their side of the connection down first (perftest
// ignores that), so two tbrdma ends each see the other's EOF at once.
//
// With -R there is no TCP connection: the server waits for the client's
// rdma_cm disconnect, which runs when the client closes after the same
// completion. A timed client cannot wait for the server's disconnect (two
// tbrdma ends would each wait for the other's): it waits, bounded by a few
// of the run's round trips, for the answer to its last WRITE if that was
// due when its run ended (perf.Loop.AwaitAnswer).
func (t *perftest) awaitPeerDone(ctx context.Context) error {
	client := t.o.Peer != ""
	if client && t.o.Duration == 0 {
		return nil
	}
	if t.oob == nil {
		switch {
		case client:
			t.loop.AwaitAnswer(ctx)
		case t.cm != nil:
			t.cm.awaitDisconnect(ctx, peerDoneTimeout)
		}
		return nil
	}
	closeWrite(t.oob) // an error leaves the wait to the deadline
	t.oob.SetReadDeadline(time.Now().Add(peerDoneTimeout))
	var b [64]byte
	for {
		if _, err := t.oob.Read(b[:]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				peer, what := "client", "its last WRITE"
				if client {
					peer, what = "server", "the run's end"
				}
				fmt.Fprintf(t.o.IO.ErrOut, "tbrdma: the %s did not close the connection within %v of %s; closing anyway\n", peer, peerDoneTimeout, what)
			}
			return nil // EOF: the peer is done
		}
	}
}

// writeCloser is a connection that shuts its sending side down alone
// (*net.TCPConn: a FIN, the receiving side stays open).
type writeCloser interface{ CloseWrite() error }

// closeWrite shuts c's sending side down, if c can.
func closeWrite(c net.Conn) error {
	if w, ok := c.(writeCloser); ok {
		return w.CloseWrite()
	}
	return nil
}

// side is "server" or "client", for perftest's error messages.
func (o *perftestOptions) side() string {
	if o.Peer == "" {
		return "server"
	}
	return "client"
}
