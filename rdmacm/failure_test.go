package rdmacm_test

// Bounded failure at the connection manager: a connected pair streams
// RDMA WRITEs both ways, the link is cut, and each side must see its QP
// fail with RETRY_EXC_ERR at the time its QP attributes imply, then —
// having called Disconnect, as an application does on an error
// completion — DISCONNECTED when its DREQ retries run out and
// TIMEWAIT_EXIT after the timewait, at the times the CM attributes imply.
// All in a testing/synctest bubble: fake time, exact figures, and the
// bubble fails the test if a goroutine is left when everything is closed.
//
//	go test ./rdmacm -count=1 -run '^TestCMBoundedFailure$' -reliability.out=$PWD/docs/reliability.md
//
// rewrites the table between "<!-- BEGIN CM BOUNDED FAILURE TABLE -->" and
// its END marker (docs/reliability.sh runs it with the other generators).

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/internal/docsection"
	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
)

var reliabilityOut = flag.String("reliability.out", "", "rewrite the CM bounded-failure table in this Markdown file (docs/reliability.md)")

// The CM's attributes, as the kernel's rdma_cm sets them on RoCE (and as
// this package documents them): CM response timeout 20, packet lifetime
// 18, 15 retries, rxe's CA ACK delay 15. conv(t) is the kernel's
// 2^(t-8) ms.
const (
	cmRetries = 15
	// The active side's DREQ (as its REQ) is resent every
	// 2 × conv(PLT 18) + conv(20) = 6.144 s; its timewait is conv(PLT + 1)
	// = 2.048 s.
	activeDREQInterval = 2*1024*time.Millisecond + 4096*time.Millisecond
	activeTimewait     = 2048 * time.Millisecond
	// The passive side's is conv(the REQ's local CM response timeout 20)
	// = 4.096 s; its timewait conv(the REQ's local ACK timeout 19) = 2.048 s.
	passiveDREQInterval = 4096 * time.Millisecond
	passiveTimewait     = 2048 * time.Millisecond
	// The QP's local ACK timeout: from CA ACK delay 15 and PLT 18, 19
	// (4.096 µs × 2^19 = 2.147 s), as ib_cm computes it.
	cmQPTimeout = 19
)

// cmFailSide is what one side of the connection observed, in fake time
// from the cut.
type cmFailSide struct {
	name                     string
	qpTimeout, retryCnt      uint8
	qpBound, qpErr           time.Duration
	status                   verbs.WCStatus
	completed, flushed       int
	interval, timewait       time.Duration
	discBound, disconnected  time.Duration // DREQ give-up, from the Disconnect call (= the error)
	twBound, timewaitExit    time.Duration // from DISCONNECTED
	dreqSent, dreqSentBefore int
}

// TestCMBoundedFailure cuts the link under a connected pair and times
// RETRY_EXC_ERR, DISCONNECTED and TIMEWAIT_EXIT on both sides.
func TestCMBoundedFailure(t *testing.T) {
	var sides []cmFailSide
	goroutines := runtime.NumGoroutine()
	synctest.Test(t, func(t *testing.T) { sides = cmFailBubble(t) })
	if t.Failed() {
		return
	}
	// synctest.Test has checked that no goroutine of the bubble is left;
	// outside it, nothing was started either (goroutines of earlier tests
	// may still be ending: give them a moment).
	for i := 0; runtime.NumGoroutine() > goroutines; i++ {
		if i == 100 {
			t.Errorf("%d goroutines after the test, %d before", runtime.NumGoroutine(), goroutines)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range sides {
		t.Logf("%s: %v after %v (bound %v); DISCONNECTED %v after Disconnect (%v); TIMEWAIT_EXIT %v later (%v); %d DREQs",
			s.name, s.status, s.qpErr, s.qpBound, s.disconnected, s.discBound, s.timewaitExit, s.twBound, s.dreqSent)
	}
	if *reliabilityOut != "" {
		writeCMFailureTable(t, *reliabilityOut, sides)
	}
}

func cmFailBubble(t *testing.T) []cmFailSide {
	net := transporttest.NewNetwork(9)
	ca, err := verbs.NewContext(&verbs.Options{Conn: net.Attach(netip.MustParseAddrPort("198.18.10.1:4791"))})
	must(t, err)
	cb, err := verbs.NewContext(&verbs.Options{Conn: net.Attach(netip.MustParseAddrPort("198.18.10.2:4791"))})
	must(t, err)
	// A constant 10 µs each way, so that WRITEs are in flight when the
	// link is cut.
	net.SetFaults(transporttest.Faults{Delay: 10 * time.Microsecond})

	sch, _ := rdmacm.CreateEventChannel(nil)
	cch, _ := rdmacm.CreateEventChannel(nil)
	lid, err := sch.CreateID(cb, rdmacm.PSTCP)
	must(t, err)
	must(t, lid.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7471)))
	must(t, lid.Listen(1))
	cid, err := cch.CreateID(ca, rdmacm.PSTCP)
	must(t, err)
	must(t, cid.ResolveAddr("198.18.10.2:7471", time.Second))
	cmWait(t, cch, rdmacm.EventAddrResolved, time.Second)
	must(t, cid.ResolveRoute(time.Second))
	cmWait(t, cch, rdmacm.EventRouteResolved, time.Second)
	const n, size = 64, 16384
	client := newStreamEnd(t, cid, n*size)
	must(t, cid.Connect(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	req := cmWait(t, sch, rdmacm.EventConnectRequest, time.Minute)
	sid := req.ID
	server := newStreamEnd(t, sid, n*size)
	must(t, sid.Accept(&rdmacm.ConnParam{RNRRetryCount: 7}))
	cmWait(t, cch, rdmacm.EventEstablished, time.Minute)
	cmWait(t, sch, rdmacm.EventEstablished, time.Minute)

	// Count the DREQs on the wire (dropped, as everything after the cut).
	var dreqs [2]atomic.Int32 // from the client, from the server
	var cut atomic.Bool
	net.SetFilter(func(d transporttest.Dir, pkt []byte) transporttest.Verdict {
		if !cut.Load() {
			return transporttest.Pass
		}
		if madAttr(pkt) == cmwire.AttrDREQ {
			if d.From.Addr() == netip.MustParseAddr("198.18.10.1") {
				dreqs[0].Add(1)
			} else {
				dreqs[1].Add(1)
			}
		}
		return transporttest.Drop
	})

	// Both stream WRITEs to each other; the link is cut once the first
	// has completed on the client.
	client.post(t, server, n, size)
	server.post(t, client, n, size)
	first, err := client.next()
	if err != nil || first.Status != verbs.WCSuccess {
		t.Fatalf("first WRITE: %v %v", first.Status, err)
	}
	cut.Store(true)
	cutAt := time.Now()

	sides := make([]cmFailSide, 2)
	ends := []struct {
		name      string
		e         *streamEnd
		id        *rdmacm.ID
		ch        *rdmacm.EventChannel
		interval  time.Duration
		timewait  time.Duration
		completed int
	}{
		{"active (client)", client, cid, cch, activeDREQInterval, activeTimewait, 1},
		{"passive (server)", server, sid, sch, passiveDREQInterval, passiveTimewait, 0},
	}
	// Each side in a goroutine of its own: both fail at about the same
	// fake instant, and each is timed from its own events.
	errs := make(chan error, 2)
	for i, e := range ends {
		go func() {
			errs <- cmFailSideRun(&sides[i], e.name, e.e, e.id, e.ch, e.interval, e.timewait, e.completed, n, cutAt, &dreqs[i])
		}()
	}
	for range ends {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	for _, s := range sides {
		if s.status != verbs.WCRetryExcErr {
			t.Errorf("%s: error completion %v, want %v", s.name, s.status, verbs.WCRetryExcErr)
		}
		if s.qpTimeout != cmQPTimeout || s.retryCnt != 7 {
			t.Errorf("%s: QP timeout %d, retry_cnt %d; the CM should have set %d and 7", s.name, s.qpTimeout, s.retryCnt, cmQPTimeout)
		}
		// The retransmit timer restarts at every ACK: the error comes one
		// full budget after the last progress, which was at or before the
		// cut and less than one period before it.
		period := s.qpBound / time.Duration(s.retryCnt+1)
		if s.qpErr > s.qpBound || s.qpErr <= s.qpBound-period {
			t.Errorf("%s: RETRY_EXC_ERR %v after the cut, want in (%v, %v]", s.name, s.qpErr, s.qpBound-period, s.qpBound)
		}
		if s.completed+s.flushed+1 != n {
			t.Errorf("%s: %d completed + %d flushed + 1 error, want %d WRs", s.name, s.completed, s.flushed, n)
		}
		if s.disconnected != s.discBound {
			t.Errorf("%s: DISCONNECTED %v after Disconnect, want 16 DREQs × %v = %v", s.name, s.disconnected, s.interval, s.discBound)
		}
		if s.timewaitExit != s.twBound {
			t.Errorf("%s: TIMEWAIT_EXIT %v after DISCONNECTED, want %v", s.name, s.timewaitExit, s.twBound)
		}
		if s.dreqSent != cmRetries+1 {
			t.Errorf("%s: %d DREQs sent, want %d", s.name, s.dreqSent, cmRetries+1)
		}
	}

	// Release everything; the bubble checks that no goroutine is left.
	for _, id := range []*rdmacm.ID{cid, sid, lid} {
		id.DestroyQP()
		id.Destroy()
	}
	client.free()
	server.free()
	sch.Destroy()
	cch.Destroy()
	ca.Close()
	cb.Close()
	net.Close()
	return sides
}

// cmFailSideRun follows one side after the cut: its n WRs complete
// (completed of them already seen), the first error is timed from cutAt;
// then it disconnects and times DISCONNECTED and TIMEWAIT_EXIT.
func cmFailSideRun(s *cmFailSide, name string, e *streamEnd, id *rdmacm.ID, ch *rdmacm.EventChannel,
	interval, timewait time.Duration, completed, n int, cutAt time.Time, dreqs *atomic.Int32) error {
	a := id.QP().Query()
	s.name, s.qpTimeout, s.retryCnt = name, a.Timeout, a.RetryCnt
	s.qpBound = time.Duration(a.RetryCnt+1) * (time.Duration(4096<<a.Timeout) * time.Nanosecond)
	s.completed = completed
	// Successes, then one error, then WR_FLUSH_ERR for the rest.
	for errs := 0; s.completed+s.flushed+errs < n; {
		wc, err := e.next()
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		switch {
		case wc.Status == verbs.WCSuccess && errs == 0:
			s.completed++
		case errs == 0:
			s.status, s.qpErr = wc.Status, time.Since(cutAt)
			errs = 1
		case wc.Status == verbs.WCWRFlushErr:
			s.flushed++
		default:
			return fmt.Errorf("%s: completion %v after %v", name, wc.Status, s.status)
		}
	}
	// The application's answer to an error completion: disconnect.
	errAt := time.Now()
	before := dreqs.Load()
	if err := id.Disconnect(); err != nil {
		return fmt.Errorf("%s: Disconnect after %v: %v", name, s.status, err)
	}
	s.interval, s.timewait = interval, timewait
	s.discBound = time.Duration(cmRetries+1) * interval
	s.twBound = timewait
	if err := cmNext(ch, rdmacm.EventDisconnected, 10*time.Minute); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	s.disconnected = time.Since(errAt)
	discAt := time.Now()
	if err := cmNext(ch, rdmacm.EventTimewaitExit, 10*time.Minute); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	s.timewaitExit = time.Since(discAt)
	s.dreqSent = int(dreqs.Load() - before)
	return nil
}

// cmNext waits for the next event of ch, at most timeout (fake time),
// and checks its type.
func cmNext(ch *rdmacm.EventChannel, want rdmacm.EventType, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		return fmt.Errorf("waiting %v for %v: %v", timeout, want, err)
	}
	if ev.Type != want {
		return fmt.Errorf("got event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
	}
	return nil
}

// cmWait waits for the next event of ch, at most timeout (fake time), and
// checks its type.
func cmWait(t testing.TB, ch *rdmacm.EventChannel, want rdmacm.EventType, timeout time.Duration) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting %v for %v: %v", timeout, want, err)
	}
	if ev.Type != want {
		t.Fatalf("got event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
	}
	return ev
}

// streamEnd is one side's verbs resources for a stream of WRITEs.
type streamEnd struct {
	ch  *verbs.CompChannel
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	id  *rdmacm.ID
	buf []byte
}

func newStreamEnd(t testing.TB, id *rdmacm.ID, size int) *streamEnd {
	t.Helper()
	vctx := id.VerbsContext()
	pd, err := vctx.AllocPD()
	must(t, err)
	ch, err := vctx.CreateCompChannel()
	must(t, err)
	cq, err := vctx.CreateCQ(256, ch)
	must(t, err)
	_, err = id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	buf := make([]byte, size)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	return &streamEnd{ch: ch, pd: pd, cq: cq, mr: mr, id: id, buf: buf}
}

// post posts n signalled WRITEs of size bytes into peer's buffer.
func (e *streamEnd) post(t testing.TB, peer *streamEnd, n, size int) {
	t.Helper()
	for i := range n {
		_, err := e.id.QP().PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{e.mr.SGE(i*size, size)}, RemoteAddr: peer.mr.Addr() + uint64(i*size), RKey: peer.mr.RKey()})
		must(t, err)
	}
}

// next returns the next completion, sleeping on the completion channel
// (so that it returns at the fake instant the completion arrives), 10
// minutes at most: a hang.
func (e *streamEnd) next() (verbs.WC, error) {
	var wc [1]verbs.WC
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for {
		n, err := e.cq.Poll(wc[:])
		if err != nil || n == 1 {
			return wc[0], err
		}
		if err := e.cq.ReqNotify(false); err != nil {
			return verbs.WC{}, err
		}
		if n, err = e.cq.Poll(wc[:]); err != nil || n == 1 {
			return wc[0], err
		}
		cq, err := e.ch.GetEvent(ctx)
		if err != nil {
			return verbs.WC{}, fmt.Errorf("no completion within 10 minutes (fake time), a hang: %w", err)
		}
		cq.AckEvents(1)
	}
}

func (e *streamEnd) free() {
	e.mr.Deregister()
	e.cq.Close()
	e.ch.Close()
	e.pd.Close()
}

func writeCMFailureTable(t *testing.T, path string, sides []cmFailSide) {
	t.Helper()
	var b strings.Builder
	b.WriteString("| side | QP timeout, retry_cnt | RETRY_EXC_ERR: bound | observed | WRs completed / flushed | DREQ interval × sends | DISCONNECTED after Disconnect: bound | observed | timewait | TIMEWAIT_EXIT after DISCONNECTED |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range sides {
		fmt.Fprintf(&b, "| %s | %d (%v), %d | %v | %v | %d / %d | %v × %d | %v | %v | %v | %v |\n",
			s.name, s.qpTimeout, (time.Duration(4096<<s.qpTimeout) * time.Nanosecond).Round(time.Microsecond), s.retryCnt,
			s.qpBound, s.qpErr, s.completed, s.flushed, s.interval, s.dreqSent, s.discBound, s.disconnected, s.twBound, s.timewaitExit)
	}
	const name = "CM BOUNDED FAILURE TABLE"
	if err := docsection.ReplaceNamed(path, name, b.String()); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s (%s)", path, name)
}
