package verbs_test

// The reliability matrix of docs/reliability.md: RC WRITE, READ, SEND,
// fetch-and-add and compare-and-swap over a seeded faulty in-memory link
// (loss, reordering, duplication, corruption, delay and jitter), each
// scenario run in a testing/synctest bubble so that time is the bubble's
// fake clock and every scenario is bounded. Every byte is compared at the
// receiving end and every execution at the responder is counted.
//
//	go test ./verbs -run 'TestReliability$' -reliability.out=../docs/reliability.md
//
// runs the full matrix and rewrites the tables between the markers of the
// file; without the flag the test runs a small matrix and only asserts.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/internal/docsection"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

var reliabilityOut = flag.String("reliability.out", "", "run the full reliability matrix and rewrite its tables in this Markdown file (docs/reliability.md)")

type relOp int

const (
	relWrite relOp = iota
	relRead
	relSend
	relFetchAdd
	relCmpSwap
)

func (o relOp) String() string {
	return [...]string{"WRITE", "READ", "SEND", "FETCH_ADD", "CMP_SWAP"}[o]
}

// relSpec is one scenario of the matrix.
type relSpec struct {
	op      relOp
	loss    float64 // per packet, each direction
	burst   bool    // the loss comes in bursts (Gilbert–Elliott, mean length 4)
	n       int     // operations
	maxSize int     // WRITE/READ/SEND sizes are drawn from 1..maxSize
	window  int     // operations outstanding at once
	seed    uint64
}

// relFaults is what the link does at a loss rate L, in both directions:
// loss L, duplication L/2, corruption L/4, reordering L (held back for 3
// packets or 200 µs), plus a constant 10 µs of delay. (No jitter: the
// engine sends a burst at one instant of the fake clock, and jitter would
// shuffle every burst, which no cable does; reordering is the Reorder
// fault's job.)
//
// With burst set the loss comes from a Gilbert–Elliott model instead: the
// link turns bad with probability P and good again with probability 1/4
// (bursts of 4 packets on average), losing every packet while bad; P is
// chosen so that the long-run loss is L.
func relFaults(loss float64, burst bool) transporttest.Faults {
	f := transporttest.Faults{Loss: loss, Duplicate: loss / 2, Corrupt: loss / 4, Reorder: loss, ReorderAfter: 3,
		ReorderDelay: 200 * time.Microsecond, Delay: 10 * time.Microsecond}
	if burst {
		const r = 0.25
		f.Loss = 0
		f.Burst = transporttest.GilbertElliott{P: loss * r / (1 - loss), R: r, LossBad: 1}
	}
	return f
}

// lossLabel names a spec's loss for the table and the test names.
func (s relSpec) lossLabel() string {
	if s.burst {
		return fmt.Sprintf("%g %% in bursts", s.loss*100)
	}
	return fmt.Sprintf("%g %%", s.loss*100)
}

// The QP attributes of every scenario.
const (
	relMTU      = verbs.MTU1024
	relTimeout  = 14 // 4.096 µs × 2^14 = 67 ms, as perftest and ibv_rc_pingpong
	relRetryCnt = 7
	relAdd      = 3 // fetch-and-add operand
)

// relResult is one row of the table.
type relResult struct {
	spec          relSpec
	bytesSent     uint64 // payload of the posted operations (8 per atomic)
	ok            int    // operations completed successfully
	bytesAcked    uint64 // payload of those
	bytesVerified uint64 // bytes found correct at the receiving end
	dupExecuted   int    // executions beyond one per operation, at the responder
	hangs         int    // scenario did not finish within its bound
	errors        int    // completions with an error status (the first, then flushes)
	firstErr      verbs.WCStatus
	elapsed       time.Duration
	net           transporttest.NetStats
	req, resp     verbs.Counters
}

// passed says whether the scenario kept RC's promise: every operation
// completed exactly once, or an error was reported (then only
// RETRY_EXC_ERR, the retry count used up, is acceptable); no duplicate
// execution, no hang, every byte of the successful operations correct.
func (r *relResult) passed() bool {
	return r.dupExecuted == 0 && r.hangs == 0 && r.bytesVerified == r.bytesAcked &&
		(r.errors == 0 || r.firstErr == verbs.WCRetryExcErr && r.ok > 0)
}

// relEnd is one side: a verbstest End whose CQ has a completion channel, so
// that waiting blocks (and lets the fake clock run) instead of spinning.
type relEnd struct {
	*verbstest.End
	ch *verbs.CompChannel
}

func newRelEnd(t *testing.T, conn transport.Conn, bufSize, maxWR int) *relEnd {
	ctx, err := verbs.NewContext(&verbs.Options{Conn: conn, ActiveMTU: relMTU})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(4*maxWR, ch)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: maxWR, MaxRecvWR: maxWR, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, bufSize)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return &relEnd{End: &verbstest.End{Ctx: ctx, PD: pd, CQ: cq, QP: qp, MR: mr, Buf: buf}, ch: ch}
}

// wait collects completions until n have arrived or ctx ends.
func (e *relEnd) wait(ctx context.Context, n int) ([]verbs.WC, error) {
	out := make([]verbs.WC, 0, n)
	wc := make([]verbs.WC, 32)
	for len(out) < n {
		k, err := e.CQ.Poll(wc[:min(len(wc), n-len(out))])
		if err != nil {
			return out, err
		}
		if k > 0 {
			out = append(out, wc[:k]...)
			continue
		}
		if err := e.CQ.ReqNotify(false); err != nil {
			return out, err
		}
		if k, _ = e.CQ.Poll(wc[:min(len(wc), n-len(out))]); k > 0 {
			out = append(out, wc[:k]...)
			continue
		}
		cq, err := e.ch.GetEvent(ctx)
		if err != nil {
			return out, err
		}
		cq.AckEvents(1)
	}
	return out, nil
}

// relBound is the fake time a scenario may take before it counts as hung.
const relBound = 10 * time.Minute

// runReliability runs one scenario in its own synctest bubble.
func runReliability(t *testing.T, s relSpec) relResult {
	var res relResult
	synctest.Test(t, func(t *testing.T) { res = reliabilityBubble(t, s) })
	return res
}

func reliabilityBubble(t *testing.T, s relSpec) (res relResult) {
	res.spec = s
	net := transporttest.NewNetwork(s.seed)
	ca := net.Attach(netip.MustParseAddrPort("198.18.9.1:4791"))
	cb := net.Attach(netip.MustParseAddrPort("198.18.9.2:4791"))
	bufSize := s.n*s.maxSize + 4096
	if s.op >= relFetchAdd {
		bufSize = 8*s.n + 4096
	}
	a, b := newRelEnd(t, ca, bufSize, s.n+16), newRelEnd(t, cb, bufSize, s.n+16)
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: relMTU, Timeout: relTimeout, RetryCnt: relRetryCnt, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 16, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	if err := verbstest.Connect(a.End, b.End, o); err != nil {
		t.Fatal(err)
	}
	if err := verbstest.Connect(b.End, a.End, o); err != nil {
		t.Fatal(err)
	}
	net.SetFaults(relFaults(s.loss, s.burst))
	start := time.Now()
	defer func() {
		res.net = net.Stats()
		res.req, res.resp = a.Ctx.Counters(), b.Ctx.Counters()
		if t.Failed() {
			t.Logf("after %v: network %+v\nrequester %+v\nresponder %+v", time.Since(start), res.net, res.req, res.resp)
		}
		a.Ctx.Close()
		b.Ctx.Close()
		net.Close()
	}()

	rng := rand.New(rand.NewPCG(s.seed, 99))
	sizes := make([]int, s.n)
	offs := make([]int, s.n)
	off := 0
	for i := range sizes {
		sizes[i] = 1 + rng.IntN(s.maxSize)
		offs[i] = off
		off += sizes[i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), relBound)
	defer cancel()

	// Prepare the data and the work requests.
	wrs := make([]verbs.SendWR, s.n)
	switch s.op {
	case relWrite, relSend:
		fill(a.Buf[:off], s.seed)
	case relRead:
		fill(b.Buf[:off], s.seed)
	case relFetchAdd, relCmpSwap:
		binary.NativeEndian.PutUint64(b.Buf, 0)
	}
	for i := range wrs {
		w := &wrs[i]
		w.WRID = uint64(i)
		w.Flags = verbs.SendSignaled
		switch s.op {
		case relWrite:
			w.Opcode = verbs.WRRDMAWrite
			w.SGList = []verbs.SGE{a.MR.SGE(offs[i], sizes[i])}
			w.RemoteAddr, w.RKey = b.MR.Addr()+uint64(offs[i]), b.MR.RKey()
		case relRead:
			w.Opcode = verbs.WRRDMARead
			w.SGList = []verbs.SGE{a.MR.SGE(offs[i], sizes[i])}
			w.RemoteAddr, w.RKey = b.MR.Addr()+uint64(offs[i]), b.MR.RKey()
		case relSend:
			w.Opcode = verbs.WRSend
			w.SGList = []verbs.SGE{a.MR.SGE(offs[i], sizes[i])}
			// Receive i lands in slot i of b's buffer.
			if _, err := b.QP.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(i*s.maxSize, s.maxSize)}}); err != nil {
				t.Fatal(err)
			}
		case relFetchAdd:
			w.Opcode = verbs.WRAtomicFetchAndAdd
			w.SGList = []verbs.SGE{a.MR.SGE(8*i, 8)}
			w.RemoteAddr, w.RKey, w.CompareAdd = b.MR.Addr(), b.MR.RKey(), relAdd
		case relCmpSwap:
			// Operation i turns i into i+1: it succeeds only if it runs
			// after operation i-1 and before i+1, exactly once.
			w.Opcode = verbs.WRAtomicCmpAndSwp
			w.SGList = []verbs.SGE{a.MR.SGE(8*i, 8)}
			w.RemoteAddr, w.RKey, w.CompareAdd, w.Swap = b.MR.Addr(), b.MR.RKey(), uint64(i), uint64(i+1)
		}
		if s.op >= relFetchAdd {
			res.bytesSent += 8
		} else {
			res.bytesSent += uint64(sizes[i])
		}
	}

	// Post with at most s.window outstanding; collect every completion.
	start = time.Now()
	wcs := make([]verbs.WC, 0, s.n)
	posted := 0
	for len(wcs) < s.n {
		for posted < s.n && posted-len(wcs) < s.window {
			if _, err := a.QP.PostSend(wrs[posted]); err != nil {
				t.Fatalf("post %d: %v", posted, err)
			}
			posted++
		}
		got, err := a.wait(ctx, 1)
		wcs = append(wcs, got...)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				res.hangs = 1
				t.Errorf("%v at %s loss: %d of %d completions after %v of fake time", s.op, s.lossLabel(), len(wcs), s.n, relBound)
				return res
			}
			t.Fatalf("wait: %v", err)
		}
	}
	res.elapsed = time.Since(start)
	// RC completes in order: the first ok operations succeeded; after an
	// error (RETRY_EXC_ERR, the specification's answer to a retry count
	// used up) the rest are flushed. The responder may or may not have
	// executed the failed operation; it must not have executed any later.
	ok := 0
	for ok < len(wcs) && wcs[ok].Status == verbs.WCSuccess && wcs[ok].WRID == uint64(ok) {
		ok++
	}
	res.ok = ok
	for i, wc := range wcs[ok:] {
		res.errors++
		if i == 0 {
			res.firstErr = wc.Status
			t.Logf("%v at %s loss: completion %d: %v", s.op, s.lossLabel(), ok, wc.Status)
		} else if wc.Status != verbs.WCWRFlushErr {
			t.Errorf("%v: completion %d after the first error: %v, want WR_FLUSH_ERR", s.op, ok+i, wc.Status)
		}
	}
	maybe := 0 // the failed operation, executed or not
	if res.errors > 0 {
		maybe = 1
	}
	for i := range ok {
		if s.op >= relFetchAdd {
			res.bytesAcked += 8
		} else {
			res.bytesAcked += uint64(sizes[i])
		}
	}

	// Verify at the receiving end.
	switch s.op {
	case relWrite:
		for i := range ok {
			if bytes.Equal(b.Buf[offs[i]:offs[i]+sizes[i]], a.Buf[offs[i]:offs[i]+sizes[i]]) {
				res.bytesVerified += uint64(sizes[i])
			}
		}
		end := off
		if ok+maybe < s.n {
			end = offs[ok+maybe]
		}
		if !allZero(b.Buf[end:]) {
			t.Errorf("WRITE: bytes beyond the range of the executed operations changed")
			res.bytesVerified = 0
		}
	case relRead:
		for i := range ok {
			if bytes.Equal(a.Buf[offs[i]:offs[i]+sizes[i]], b.Buf[offs[i]:offs[i]+sizes[i]]) {
				res.bytesVerified += uint64(sizes[i])
			}
		}
	case relSend:
		recvs, err := b.wait(ctx, ok)
		if err != nil {
			res.hangs = 1
			t.Errorf("SEND: %d of %d receive completions: %v", len(recvs), ok, err)
		}
		for i, wc := range recvs {
			// In order: receive i completes i-th and holds message i.
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) || int(wc.ByteLen) != sizes[i] {
				t.Errorf("SEND: receive completion %d: %+v (message size %d)", i, wc, sizes[i])
				continue
			}
			if bytes.Equal(b.Buf[i*s.maxSize:i*s.maxSize+sizes[i]], a.Buf[offs[i]:offs[i]+sizes[i]]) {
				res.bytesVerified += uint64(sizes[i])
			}
		}
	case relFetchAdd:
		// Each returned value is a distinct multiple of relAdd below
		// n×relAdd, and the counter ends at exactly n×relAdd.
		seen := make([]bool, s.n)
		for i := range ok {
			v := binary.NativeEndian.Uint64(a.Buf[8*i:])
			if v%relAdd != 0 || v/relAdd >= uint64(s.n) || seen[v/relAdd] {
				t.Errorf("FETCH_ADD %d returned %d", i, v)
				continue
			}
			seen[v/relAdd] = true
			res.bytesVerified += 8
		}
		got := binary.NativeEndian.Uint64(b.Buf)
		if got != uint64(ok*relAdd) && got != uint64((ok+maybe)*relAdd) {
			t.Errorf("FETCH_ADD: counter is %d after %d fetch-and-adds of %d", got, ok, relAdd)
			if got > uint64((ok+maybe)*relAdd) {
				res.dupExecuted += int((got - uint64((ok+maybe)*relAdd)) / relAdd)
			}
			res.bytesVerified = 0
		}
	case relCmpSwap:
		for i := range ok {
			if v := binary.NativeEndian.Uint64(a.Buf[8*i:]); v == uint64(i) {
				res.bytesVerified += 8
			} else {
				t.Errorf("CMP_SWAP %d returned %d, want %d", i, v, i)
			}
		}
		if got := binary.NativeEndian.Uint64(b.Buf); got != uint64(ok) && got != uint64(ok+maybe) {
			t.Errorf("CMP_SWAP: value is %d after %d operations", got, ok)
			res.bytesVerified = 0
		}
	}

	// Let duplicates still in flight arrive (two ACK timeouts), then count
	// executions: one per operation, and no stray completion on either
	// side.
	time.Sleep(2 * (4096 << relTimeout) * time.Nanosecond)
	var extra [8]verbs.WC
	if k, _ := a.CQ.Poll(extra[:]); k > 0 {
		t.Errorf("%v: %d completions beyond one per operation at the requester", s.op, k)
		res.dupExecuted += k
	}
	if k, _ := b.CQ.Poll(extra[:]); k > maybe || k == 1 && s.op != relSend {
		t.Errorf("%v: %d receive completions beyond one per message", s.op, k)
		res.dupExecuted += k - maybe
	}
	if ex := b.Ctx.Counters().RequestsExecuted; ex < uint64(ok) || ex > uint64(ok+maybe) {
		t.Errorf("%v: the responder executed %d requests for %d successful operations", s.op, ex, ok)
		if ex > uint64(ok+maybe) {
			res.dupExecuted += int(ex - uint64(ok+maybe))
		}
	}
	want := verbs.QPStateRTS
	if res.errors > 0 {
		want = verbs.QPStateErr
	}
	if st := a.QP.State(); st != want {
		t.Errorf("%v: requester QP state %v after the run, want %v", s.op, st, want)
	}
	if st := b.QP.State(); st != verbs.QPStateRTS {
		t.Errorf("%v: responder QP state %v after the run", s.op, st)
	}
	return res
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// relProfiles are the rows of the matrix: loss rates, and one of them in
// bursts.
var relProfiles = []struct {
	loss  float64
	burst bool
}{{0, false}, {0.01, false}, {0.05, false}, {0.20, false}, {0.05, true}}

// TestReliability runs the reliability matrix: a small one by default, the
// full one (and rewrites docs/reliability.md) with -reliability.out.
func TestReliability(t *testing.T) {
	full := *reliabilityOut != ""
	n, maxSize := 24, 6000
	if full {
		n, maxSize = 400, 16384
	}
	var rows []relResult
	for pi, pr := range relProfiles {
		var lost, reordered uint64
		for op := relWrite; op <= relCmpSwap; op++ {
			s := relSpec{op: op, loss: pr.loss, burst: pr.burst, n: n, maxSize: maxSize, window: 16,
				seed: uint64(1000*pr.loss) + 17*uint64(op) + 1 + 7919*uint64(pi)*b2u(pr.burst)}
			if op >= relFetchAdd {
				s.n = 2 * n
			}
			t.Run(fmt.Sprintf("%v/loss=%s", op, strings.ReplaceAll(s.lossLabel(), " ", "")), func(t *testing.T) {
				r := runReliability(t, s)
				fmt.Fprintf(os.Stderr, "  %-9v loss %-16s %d/%d ops ok, %d/%d bytes verified, %d dup, %d hangs, %d errors, %v fake time\n",
					op, s.lossLabel()+":", r.ok, s.n, r.bytesVerified, r.bytesAcked, r.dupExecuted, r.hangs, r.errors, r.elapsed)
				if !r.passed() {
					t.Errorf("%v at %s loss: %+v", op, s.lossLabel(), r)
				}
				// Below 20 % loss a retry count of 7 is never used up.
				if pr.loss < 0.2 && r.errors > 0 {
					t.Errorf("%v at %s loss: %d error completions", op, s.lossLabel(), r.errors)
				}
				lost += r.net.Lost
				reordered += r.net.Reordered
				rows = append(rows, r)
			})
		}
		// The faults happened (counted over the operations of this row).
		if pr.loss > 0 && (lost == 0 || reordered == 0) {
			t.Errorf("at %g%% loss the link lost %d and reordered %d packets: the faults were not exercised", pr.loss*100, lost, reordered)
		}
	}
	if full && !t.Failed() {
		writeReliabilityDoc(t, *reliabilityOut, reliabilityTable(rows), "RELIABILITY TABLE")
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func reliabilityTable(rows []relResult) string {
	var b strings.Builder
	b.WriteString("| operation | loss | ops | ops ok | bytes sent | bytes verified | duplicates executed | hangs | error completions | time to finish (fake) | packets sent | lost | duplicated | corrupted | reordered | retransmitted | timeouts | seq NAKs |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		errs := "0"
		if r.errors > 0 {
			errs = fmt.Sprintf("%d (1 %v, %d flushed)", r.errors, r.firstErr, r.errors-1)
		}
		fmt.Fprintf(&b, "| %v | %s | %d | %d | %d | %d | %d | %d | %s | %v | %d | %d | %d | %d | %d | %d | %d | %d |\n",
			r.spec.op, r.spec.lossLabel(), r.spec.n, r.ok, r.bytesSent, r.bytesVerified, r.dupExecuted, r.hangs, errs,
			r.elapsed.Round(time.Microsecond), r.net.Sent, r.net.Lost, r.net.Duplicated, r.net.Corrupted, r.net.Reordered,
			r.req.Retransmits, r.req.Timeouts, r.resp.NAKsSent[verbs.NAKSeq])
	}
	return b.String()
}

// writeReliabilityDoc replaces what lies between the markers
// "<!-- BEGIN name -->" and "<!-- END name -->" in path.
func writeReliabilityDoc(t *testing.T, path, table, name string) {
	t.Helper()
	if err := docsection.ReplaceNamed(path, name, table); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s (%s)", path, name)
}

// boundCase is one bounded-failure scenario: the peer goes away in the
// middle of a stream of WRITEs (or never posts a receive) and the
// requester must end in an error completion within the time its QP
// attributes imply.
type boundCase struct {
	name     string
	how      string // "cut": the link drops everything; "kill": the peer's context closes; "rnr": no receive posted
	timeout  uint8
	retryCnt uint8
	rnrRetry uint8
	rnrTimer uint8
}

type boundResult struct {
	c          boundCase
	bound      time.Duration // computed
	observed   time.Duration // failure cause → error completion
	status     verbs.WCStatus
	succeeded  int // WRs completed before the failure
	flushed    int // later WRs completed with WR_FLUSH_ERR
	posted     int
	counterHit bool // RetryExcErrs / RNRRetryExcErrs moved
}

// ackTimeout is the IBTA local ACK timeout: 4.096 µs × 2^timeout.
func ackTimeout(timeout uint8) time.Duration { return time.Duration(4096<<timeout) * time.Nanosecond }

// rnrDelay is the RNR timer table of IBTA 9.7.5.2.8 for the codes the tests use.
var rnrDelay = map[uint8]time.Duration{1: 10 * time.Microsecond, 14: 1280 * time.Microsecond, 18: 5120 * time.Microsecond}

func runBoundCase(t *testing.T, c boundCase) boundResult {
	var res boundResult
	synctest.Test(t, func(t *testing.T) { res = boundBubble(t, c) })
	return res
}

func boundBubble(t *testing.T, c boundCase) boundResult {
	res := boundResult{c: c}
	net := transporttest.NewNetwork(42)
	ca := net.Attach(netip.MustParseAddrPort("198.18.9.1:4791"))
	cb := net.Attach(netip.MustParseAddrPort("198.18.9.2:4791"))
	const n, size = 64, 16384
	a, b := newRelEnd(t, ca, n*size, n+16), newRelEnd(t, cb, n*size, n+16)
	o := verbstest.Options{Type: verbs.QPTypeRC, PathMTU: relMTU, Timeout: c.timeout, RetryCnt: c.retryCnt, RNRRetry: c.rnrRetry,
		MinRNRTimer: max(c.rnrTimer, 1), MaxRdAtomic: 16, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}
	for _, e := range [][2]*relEnd{{a, b}, {b, a}} {
		if err := verbstest.Connect(e[0].End, e[1].End, o); err != nil {
			t.Fatal(err)
		}
	}
	// A constant delay: no reordering, which with retry_cnt 0 would be
	// fatal by itself (a PSN sequence NAK uses up a retry, as in rxe).
	net.SetFaults(transporttest.Faults{Delay: 10 * time.Microsecond})
	defer func() {
		a.Ctx.Close()
		b.Ctx.Close()
		net.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	op := verbs.WRRDMAWrite
	if c.how == "rnr" {
		op = verbs.WRSend
	}
	for i := range n {
		if _, err := a.QP.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: op, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(i*size, size)}, RemoteAddr: b.MR.Addr() + uint64(i*size), RKey: b.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	res.posted = n
	var wcs []verbs.WC
	var cause time.Time
	switch c.how {
	case "cut", "kill":
		// Let the first WRITE complete, so the peer vanishes mid-transfer.
		first, err := a.wait(ctx, 1)
		if err != nil || first[0].Status != verbs.WCSuccess {
			t.Fatalf("first WRITE: %v %+v", err, first)
		}
		wcs = first
		cause = time.Now()
		if c.how == "cut" {
			net.SetFilter(func(transporttest.Dir, []byte) transporttest.Verdict { return transporttest.Drop })
		} else {
			b.Ctx.Close()
		}
		res.bound = time.Duration(c.retryCnt+1) * ackTimeout(c.timeout)
	case "rnr":
		cause = time.Now()
		// rnr_retry waits of the RNR timer, and the rnr_retry+1 attempts
		// each take a round trip (10 µs each way) to be refused.
		res.bound = time.Duration(c.rnrRetry)*rnrDelay[c.rnrTimer] + time.Duration(c.rnrRetry+1)*20*time.Microsecond
	}
	var failedAt time.Time
	for len(wcs) < n {
		got, err := a.wait(ctx, 1)
		if err != nil {
			t.Fatalf("%s: %d of %d completions: %v", c.name, len(wcs), n, err)
		}
		if got[0].Status != verbs.WCSuccess && failedAt.IsZero() {
			failedAt = time.Now()
			res.status = got[0].Status
		}
		if got[0].Status == verbs.WCWRFlushErr {
			res.flushed++
		}
		wcs = append(wcs, got...)
	}
	for _, wc := range wcs {
		if wc.Status == verbs.WCSuccess {
			res.succeeded++
		}
	}
	res.observed = failedAt.Sub(cause)
	cnt := a.Ctx.Counters()
	res.counterHit = cnt.RetryExcErrs == 1 && c.how != "rnr" || cnt.RNRRetryExcErrs == 1 && c.how == "rnr"
	t.Logf("requester counters: timeouts %d retransmits %d", cnt.Timeouts, cnt.Retransmits)
	if st := a.QP.State(); st != verbs.QPStateErr {
		t.Errorf("%s: requester state %v, want ERR", c.name, st)
	}
	// synctest.Test fails the test if any goroutine of the bubble (receive
	// loops, QP timers, link delays) is still alive once this returns.
	return res
}

var boundCases = []boundCase{
	{name: "link cut, timeout 14, retry_cnt 7", how: "cut", timeout: 14, retryCnt: 7, rnrRetry: 7},
	{name: "link cut, timeout 10, retry_cnt 3", how: "cut", timeout: 10, retryCnt: 3, rnrRetry: 7},
	{name: "link cut, timeout 18, retry_cnt 7", how: "cut", timeout: 18, retryCnt: 7, rnrRetry: 7},
	{name: "peer killed, timeout 14, retry_cnt 7", how: "kill", timeout: 14, retryCnt: 7, rnrRetry: 7},
	{name: "peer killed, timeout 12, retry_cnt 0", how: "kill", timeout: 12, retryCnt: 0, rnrRetry: 7},
	{name: "no receive posted, rnr_retry 4, RNR timer 14 (1.28 ms)", how: "rnr", timeout: 14, retryCnt: 7, rnrRetry: 4, rnrTimer: 14},
	{name: "no receive posted, rnr_retry 6, RNR timer 18 (5.12 ms)", how: "rnr", timeout: 14, retryCnt: 7, rnrRetry: 6, rnrTimer: 18},
}

// TestReliabilityBoundedFailure: a peer that vanishes mid-transfer (link
// cut, or its context closed) turns into RETRY_EXC_ERR within
// (retry_cnt+1) × 4.096 µs × 2^timeout of the moment it vanished, and a
// receiver that never posts a receive into RNR_RETRY_EXC_ERR after
// rnr_retry RNR waits; every later WR is flushed and nothing is left
// running. Time is synctest's fake clock.
func TestReliabilityBoundedFailure(t *testing.T) {
	var rows []boundResult
	for _, c := range boundCases {
		t.Run(c.name, func(t *testing.T) {
			r := runBoundCase(t, c)
			fmt.Fprintf(os.Stderr, "  %-55s bound %-12v observed %-12v %d ok, %v, %d flushed\n", c.name, r.bound, r.observed, r.succeeded, r.status, r.flushed)
			want := verbs.WCRetryExcErr
			if c.how == "rnr" {
				want = verbs.WCRNRRetryExcErr
			}
			if r.status != want || r.succeeded+1+r.flushed != r.posted || c.how != "rnr" && r.succeeded == 0 {
				t.Errorf("%s: %d succeeded, then %v, then %d of %d flushed; want %v once and the rest flushed", c.name, r.succeeded, r.status, r.flushed, r.posted, want)
			}
			if !r.counterHit {
				t.Errorf("%s: the retry-exceeded counter did not move", c.name)
			}
			// The error comes no later than the bound, and (the timer
			// restarting on each ACK) no earlier than one retry period
			// before it.
			period := ackTimeout(c.timeout)
			if c.how == "rnr" {
				period = rnrDelay[c.rnrTimer]
			}
			if r.observed > r.bound || r.observed < r.bound-period {
				t.Errorf("%s: error after %v, want within (%v, %v]", c.name, r.observed, r.bound-period, r.bound)
			}
			rows = append(rows, r)
		})
	}
	if *reliabilityOut != "" && !t.Failed() {
		var b strings.Builder
		b.WriteString("| scenario | computed bound | observed (fake time) | WRs completed before | error completion | WRs flushed after | counter |\n|---|--:|--:|--:|---|--:|---|\n")
		for _, r := range rows {
			ctr := "retry_exc_errs"
			if r.c.how == "rnr" {
				ctr = "rnr_retry_exc_errs"
			}
			fmt.Fprintf(&b, "| %s | %v | %v | %d | %v | %d | %s +1 |\n", r.c.name, r.bound, r.observed, r.succeeded, r.status, r.flushed, ctr)
		}
		writeReliabilityDoc(t, *reliabilityOut, b.String(), "BOUNDED FAILURE TABLE")
	}
}
