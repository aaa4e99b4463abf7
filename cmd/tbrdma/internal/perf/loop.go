package perf

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// Loop is one side's data path in a perftest test: a connected RC QP, the
// registered buffer it sends from and receives into, the CQ waiter, and
// the test's parameters. The command sets all of it up (device, QP, the
// exchange) and then calls, once per message size, the loop of its test:
//
//   - BW: write-bw, read-bw and send-bw's client (run_iter_bw), and with
//     -b both sides (send-bw: run_iter_bi, after PostRecvs);
//   - Lat: read-lat and atomic-lat's client (run_iter_lat);
//   - SendLat: send-lat, both sides (run_iter_lat_send);
//   - WriteLat: write-lat, both sides (run_iter_lat_write);
//   - PostRecvs, then ReceiveBW: send-bw's server (run_iter_bw_server);
//     PostRecvs also comes before each size of SendLat.
//
// CheckAtomicTarget is atomic-lat's server side, once the client is done.
// The loops return the figures; printing them is the caller's. A failed
// completion is reported on ErrOut as perftest reports it, and the loop
// returns ErrReported. A Loop is used by one goroutine.
type Loop struct {
	QP *verbs.QP
	MR *verbs.MR
	// Buf is MR's memory. This side sends from its first half (and READs
	// and atomic results land there); receives, and the peer's write-lat
	// WRITEs, land in the second half, from Half on.
	Buf  []byte
	Half int
	// QPs, when set, are all the test's QPs (perftest's -q), QP the first
	// of them: BW runs Iters messages on each, PostRecvs and ReceiveBW
	// post and count Iters receives on each. QP i has its own slices of
	// the buffer: it sends from i*Stride and receives at Half+i*Stride.
	QPs    []*verbs.QP
	Stride int
	W      *Waiter
	// Dev is the QP's device: WriteLat tells it while it spins on memory
	// (Spinning), and a failed WRITE prints its counters.
	Dev *verbs.Context

	Name       string // the command, for messages and the progress line ("write-bw")
	Verb       Verb
	Server     bool
	Iters      int
	TxDepth    int    // requests BW keeps in flight
	RxDepth    int    // receives posted at a time (SEND tests)
	CQMod      int    // BW: one signaled request every CQMod
	AtomicType string // "FETCH_AND_ADD" or "CMP_AND_SWAP"
	// Inline is perftest's -I: WRITEs and SENDs of at most Inline bytes
	// are posted inline (the QP's MaxInlineData must allow it); 0: none.
	Inline int
	// PostList is perftest's -l: BW posts PostList requests in one
	// PostSend call (0 or 1: one at a time).
	PostList int
	// PerUs is the latency loops' unit per microsecond (LatencyIn): 0 or 1
	// for microseconds, the CPU's MHz for perftest's -C (cycles).
	PerUs float64
	// Bidir is -b: on send-bw, BW completes the peer's messages too (its
	// receives posted by PostRecvs).
	Bidir bool
	// Timed, when set, runs BW and ReceiveBW for a time instead of Iters
	// messages (perftest's -D and --run_infinitely; duration.go).
	Timed *Timed
	// Events is -e: WriteLat's wait on memory spins only briefly before it
	// sleeps between tests.
	Events bool
	Now    func() time.Time
	ErrOut io.Writer
	// Progress, when set, starts BW's progress line for a run of total
	// bytes (the command draws it on a terminal only); nil draws none.
	Progress func(label string, total uint64) Progress

	// UD, set for -c UD (SEND tests), addresses each QP's SENDs: UD[i]
	// is QP i's peer. Its receives have room for the GRH in front of the
	// message (UDGRHSize bytes), as perftest posts them.
	UD []UDPeer
	// AliveCheck, when set (-c UC and UD), bounds ReceiveBW's wait for
	// the next message, as perftest's check_alive does: a message lost on
	// an unreliable QP is never resent, so the server gives up once none
	// has come for a whole period (after one to two periods).
	AliveCheck time.Duration

	rs   recvState  // SEND tests: the receive queue
	sent int        // SEND tests: send completions seen
	due  *answerDue // timed write-lat: the peer's answer still due at the end
}

// UDPeer is where a UD QP's SENDs go: the peer QP's address handle and
// number; the Q_Key is perftest's (UDQKey).
type UDPeer struct {
	AH  *verbs.AH
	QPN verbs.QPN
}

// perftest's UD constants (perftest_parameters.h): the Q_Key every UD QP
// has and sends to, and the room in front of each UD receive for the
// 40-byte GRH the device writes there (a receive's length counts it).
const (
	UDQKey    verbs.QKey = 0x11111111
	UDGRHSize            = 40
)

// grh is the room in front of each receive: UDGRHSize on UD, else 0.
func (l *Loop) grh() int {
	if len(l.UD) > 0 {
		return UDGRHSize
	}
	return 0
}

// addressUD addresses wr, a SEND on QP i, to its UD peer (nothing on RC
// and UC).
func (l *Loop) addressUD(wr *verbs.SendWR, i int) {
	if i < len(l.UD) {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = l.UD[i].AH, l.UD[i].QPN, UDQKey
	}
}

// Progress is a live progress line: Update reports the bytes done so far,
// Clear erases the line (before a result row or an error is printed).
type Progress interface {
	Update(done uint64)
	Clear()
}

type noProgress struct{}

func (noProgress) Update(uint64) {}
func (noProgress) Clear()        {}

func (l *Loop) progress(label string, total uint64) Progress {
	if l.Progress == nil {
		return noProgress{}
	}
	return l.Progress(label, total)
}

// inline returns SendInline for a message of size bytes that Inline
// allows, as perftest sets IBV_SEND_INLINE (size <= -I).
func (l *Loop) inline(size int) verbs.SendFlags {
	if size <= l.Inline {
		return verbs.SendInline
	}
	return 0
}

// latency computes a latency loop's figures in the loop's unit.
func (l *Loop) latency(size int, posted []time.Time, rttFactor int) LatStats {
	u := l.PerUs
	if u <= 0 {
		u = 1
	}
	s, _ := LatencyIn(size, posted, rttFactor, u)
	return s
}

// qps returns the test's QPs: QPs, or QP alone.
func (l *Loop) qps() []*verbs.QP {
	if len(l.QPs) == 0 {
		return []*verbs.QP{l.QP}
	}
	return l.QPs
}

// wrID makes a work request ID of the QP's index (the high 32 bits,
// perftest's wr_id is the QP index too) and a count on that QP.
func wrID(qp, n int) uint64 { return uint64(qp)<<32 | uint64(uint32(n)) }

// wrQP and wrCount split a wrID.
func wrQP(id uint64) int    { return int(id >> 32) }
func wrCount(id uint64) int { return int(uint32(id)) }

// side is "server" or "client", for perftest's error messages.
func (l *Loop) side() string {
	if l.Server {
		return "server"
	}
	return "client"
}

// failed reports a failed completion as perftest does (where, the status,
// the counts, in the words of its "Completion with error" lines), with
// tbrdma's line naming the verb and, when the peer is the cause, what
// became of it. It returns ErrReported.
func (l *Loop) failed(where string, wc *verbs.WC, what any, counts string) error {
	fmt.Fprintf(l.ErrOut, " Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n %s\n",
		where, wc.Status, wc.WRID, wc.VendorErr, counts)
	fmt.Fprintf(l.ErrOut, "tbrdma: %v failed: %v%s\n", what, wc.Status, peerGone(l.QP, wc.Status))
	return ErrReported
}

// printCounters prints the engine's non-zero counters after a failed
// completion: what was retransmitted, NAKed or dropped says why.
func (l *Loop) printCounters() {
	c := l.Dev.Counters()
	var b strings.Builder
	for _, f := range c.Fields() {
		if f.Value != 0 {
			fmt.Fprintf(&b, " %s=%d", f.Name, f.Value)
		}
	}
	fmt.Fprintf(l.ErrOut, "tbrdma: engine counters:%s\n", b.String())
}
