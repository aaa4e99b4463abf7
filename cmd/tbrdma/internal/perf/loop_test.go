package perf

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// testSide is one end of a loop test: a Loop over an RC QP in INIT, with
// a buffer of two halves (the first filled with a pattern) and its errors
// in errOut.
type testSide struct {
	*Loop
	errOut bytes.Buffer
	psn    uint32
	pd     *verbs.PD
}

func newTestSide(t *testing.T, verb Verb, server bool, half int, depth int) *testSide {
	t.Helper()
	dev := verbstest.Device(t)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2*half)
	for i := range half {
		buf[i] = byte(i%251 + 1)
	}
	if server {
		for i := range half {
			buf[i] ^= 0xff // the two sides' patterns differ
		}
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := dev.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(2*depth+1, ch)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: testInlineCap}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	s := &testSide{psn: rand.Uint32() & 0xFFFFFF, pd: pd}
	s.Loop = &Loop{QP: qp, MR: mr, Buf: buf, Half: half, W: &Waiter{CQ: cq, Ch: ch, Spin: DefaultSpin}, Dev: dev,
		Name: "test", Verb: verb, Server: server, Iters: 50, TxDepth: depth, RxDepth: depth, CQMod: 1,
		AtomicType: "FETCH_AND_ADD", Now: time.Now, ErrOut: &s.errOut}
	return s
}

// testInlineCap is the test QPs' MaxInlineData.
const testInlineCap = 64

// dest is what the peer learns of s: its QP, and its buffer's first half,
// or with second its second half (where write-lat's peer writes).
func (s *testSide) dest(second bool) Dest {
	d := Dest{QPN: uint32(s.QP.QPN()), PSN: s.psn, RKey: uint32(s.MR.RKey()), VAddr: s.MR.Addr(), GID: s.Dev.GID()}
	if second {
		d.VAddr += uint64(s.Half)
	}
	return d
}

// connectTo brings s's QP to RTS towards rem.
func (s *testSide) connectTo(t *testing.T, rem Dest) {
	t.Helper()
	if err := s.QP.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: verbs.QPN(rem.QPN),
		RQPSN: verbs.PSN(rem.PSN), MaxDestRdAtomic: 16, MinRNRTimer: 12,
		AH: verbs.AHAttr{DGID: verbs.GID(rem.GID), HopLimit: 0xFF, PortNum: 1}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	if err := s.QP.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		SQPSN: verbs.PSN(s.psn), MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
}

// testPair returns a connected server and client.
func testPair(t *testing.T, verb Verb, half, depth int) (server, client *testSide) {
	server, client = newTestSide(t, verb, true, half, depth), newTestSide(t, verb, false, half, depth)
	server.connectTo(t, client.dest(false))
	client.connectTo(t, server.dest(false))
	return server, client
}

// both runs f for the server and the client at once and fails the test on
// either's error.
func both(t *testing.T, server, client *testSide, f func(s *testSide) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*testSide{server, client} {
		wg.Go(func() { errs[i] = f(s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%v\nserver: %s\nclient: %s", err, &server.errOut, &client.errOut)
	}
}

// tell makes to see, through a completion of its own (a zero-byte SEND),
// that from's WRITEs have landed: the race detector cannot see that the
// WRITE's own completion at from came after the engine wrote to's memory.
func tell(t *testing.T, from, to *testSide) {
	t.Helper()
	if _, err := to.QP.PostRecv(verbs.RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := from.QP.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*testSide{from, to} {
		wcs, err := s.W.Wait(context.Background())
		if err != nil || wcs[0].Status != verbs.WCSuccess {
			t.Fatalf("telling the target: %v %v", err, wcs)
		}
	}
}

// progressLog records a Progress's calls.
type progressLog struct {
	label   string
	total   uint64
	updates []uint64
	cleared int
}

func (p *progressLog) Update(n uint64) { p.updates = append(p.updates, n) }
func (p *progressLog) Clear()          { p.cleared++ }

// TestLoopBW runs BW for WRITE and READ against a peer that only serves
// its memory: the report counts every request, the data arrives where the
// verb puts it, and the progress line counts up to the whole run and is
// cleared.
func TestLoopBW(t *testing.T) {
	const size = 3000
	for _, verb := range []Verb{VerbWrite, VerbRead} {
		server, client := testPair(t, verb, 4096, 16)
		client.CQMod = 4
		var prog progressLog
		client.Progress = func(label string, total uint64) Progress {
			prog.label, prog.total = label, total
			return &prog
		}
		rep, err := client.BW(context.Background(), []Dest{server.dest(false)}, size)
		if err != nil {
			t.Fatalf("%v: %v\n%s", verb, err, &client.errOut)
		}
		if rep.Size != size || rep.Iters != 50 || rep.Average <= 0 {
			t.Errorf("%v: report %+v", verb, rep)
		}
		from, to := client.Buf[:size], server.Buf[:size]
		if verb == VerbRead {
			from, to = server.Buf[:size], client.Buf[:size]
		} else {
			tell(t, client, server)
		}
		if !bytes.Equal(from, to) {
			t.Errorf("%v: the target does not hold the source's bytes", verb)
		}
		if prog.label != "test 3000 bytes" || prog.total != 50*size || len(prog.updates) == 0 ||
			prog.updates[len(prog.updates)-1] != 50*size || prog.cleared == 0 {
			t.Errorf("%v: progress %+v", verb, prog)
		}
	}
}

// TestLoopSendBW runs send-bw: the client's BW of SENDs against the
// server's ReceiveBW, with fewer receives posted at a time than messages.
func TestLoopSendBW(t *testing.T) {
	const size = 1000
	server, client := testPair(t, VerbSend, 4096, 8)
	if err := server.PostRecvs(size); err != nil {
		t.Fatal(err)
	}
	var got BWReport
	both(t, server, client, func(s *testSide) error {
		var err error
		if s == server {
			got, err = s.ReceiveBW(context.Background(), size)
		} else {
			_, err = s.BW(context.Background(), []Dest{{}}, size)
		}
		return err
	})
	if got.Size != size || got.Iters != 50 {
		t.Errorf("receiver's report %+v", got)
	}
	if !bytes.Equal(server.Buf[server.Half:server.Half+size], client.Buf[:size]) {
		t.Error("the last message received is not the one sent")
	}
}

// TestLoopReceiveWrongSize: a SEND of another size than the receiver
// expects ends its loop with a message and ErrReported.
func TestLoopReceiveWrongSize(t *testing.T) {
	server, client := testPair(t, VerbSend, 4096, 8)
	if err := server.PostRecvs(100); err != nil {
		t.Fatal(err)
	}
	client.Iters = 1
	if _, err := client.BW(context.Background(), []Dest{{}}, 60); err != nil {
		t.Fatalf("client: %v\n%s", err, &client.errOut)
	}
	if _, err := server.ReceiveBW(context.Background(), 100); !errors.Is(err, ErrReported) {
		t.Fatalf("ReceiveBW returned %v, want ErrReported", err)
	}
	if got := server.errOut.String(); got != "tbrdma: received a 60-byte message, want 100\n" {
		t.Errorf("message %q", got)
	}
}

// TestLoopLat runs read-lat and atomic-lat's client; the atomics' results
// are checked by Lat and, on the server, by CheckAtomicTarget.
func TestLoopLat(t *testing.T) {
	for _, c := range []struct {
		verb       Verb
		atomicType string
		size       int
		clientSays string
		serverSays string
	}{
		{VerbRead, "", 64, "", ""},
		{VerbAtomic, "FETCH_AND_ADD", 8, "tbrdma: 50 FETCH_AND_ADD results checked: the remote value went from 0 to 50 as expected\n",
			"tbrdma: the peer's 50 FETCH_AND_ADD left 50 in the target, as expected\n"},
		{VerbAtomic, "CMP_AND_SWAP", 8, "tbrdma: 50 CMP_AND_SWAP results checked: the remote value went from 0 to 49 as expected\n",
			"tbrdma: the peer's 50 CMP_AND_SWAP left 49 in the target\n"},
	} {
		server, client := testPair(t, c.verb, 4096, 1)
		if c.verb == VerbAtomic {
			clear(server.Buf[:8]) // the atomics' target starts at 0, as perftest's
		}
		server.AtomicType, client.AtomicType = c.atomicType, c.atomicType
		s, err := client.Lat(context.Background(), server.dest(false), c.size)
		if err != nil {
			t.Fatalf("%v %s: %v\n%s", c.verb, c.atomicType, err, &client.errOut)
		}
		if s.Size != c.size || s.Iters != 50 {
			t.Errorf("%v %s: stats %+v", c.verb, c.atomicType, s)
		}
		if c.verb == VerbRead && !bytes.Equal(client.Buf[:c.size], server.Buf[:c.size]) {
			t.Errorf("READ: the client's buffer does not hold the server's bytes")
		}
		if got := client.errOut.String(); got != c.clientSays {
			t.Errorf("%v %s: client says %q, want %q", c.verb, c.atomicType, got, c.clientSays)
		}
		if c.verb != VerbAtomic {
			continue
		}
		if err := server.CheckAtomicTarget(); err != nil {
			t.Errorf("%s: CheckAtomicTarget: %v", c.atomicType, err)
		}
		if got := server.errOut.String(); got != c.serverSays {
			t.Errorf("%s: server says %q, want %q", c.atomicType, got, c.serverSays)
		}
	}
}

// TestCheckAtomicTargetWrong: a FETCH_AND_ADD count other than Iters is
// reported and fails the test.
func TestCheckAtomicTargetWrong(t *testing.T) {
	var b strings.Builder
	l := &Loop{Buf: make([]byte, 16), Iters: 5, AtomicType: "FETCH_AND_ADD", ErrOut: &b}
	l.Buf[0] = 4
	if err := l.CheckAtomicTarget(); !errors.Is(err, ErrReported) {
		t.Fatalf("returned %v, want ErrReported", err)
	}
	if want := "tbrdma: the peer's 5 FETCH_AND_ADD left 4 in the target, want 5\n"; b.String() != want {
		t.Errorf("message %q, want %q", b.String(), want)
	}
}

// TestLoopSendLat runs send-lat on both sides at once.
func TestLoopSendLat(t *testing.T) {
	const size = 200
	server, client := testPair(t, VerbSend, 4096, 4)
	var stats [2]LatStats
	for _, s := range []*testSide{server, client} {
		if err := s.PostRecvs(size); err != nil {
			t.Fatal(err)
		}
	}
	both(t, server, client, func(s *testSide) error {
		st, err := s.SendLat(context.Background(), size)
		if s == server {
			stats[0] = st
		} else {
			stats[1] = st
		}
		return err
	})
	for i, st := range stats {
		if st.Size != size || st.Iters != 50 {
			t.Errorf("side %d: stats %+v", i, st)
		}
	}
	if !bytes.Equal(server.Buf[server.Half:server.Half+size], client.Buf[:size]) ||
		!bytes.Equal(client.Buf[client.Half:client.Half+size], server.Buf[:size]) {
		t.Error("a side's second half does not hold the peer's message")
	}
}

// TestLoopWriteLat runs write-lat on both sides at once, with more
// iterations than the counter byte holds, in busy-poll and in -e mode.
func TestLoopWriteLat(t *testing.T) {
	if raceEnabled {
		t.Skip("write-lat polls memory the engine writes: a data race by design, as in perftest")
	}
	const size = 32
	for _, events := range []bool{false, true} {
		server, client := testPair(t, VerbWrite, os.Getpagesize(), 1)
		for _, s := range []*testSide{server, client} {
			clear(s.Buf[s.Half:]) // the polled half starts at zero
			s.Iters, s.Events = 300, events
		}
		rems := map[*testSide]Dest{server: client.dest(true), client: server.dest(true)}
		both(t, server, client, func(s *testSide) error {
			st, err := s.WriteLat(context.Background(), rems[s], size)
			if err == nil && (st.Size != size || st.Iters != 300) {
				t.Errorf("events %v: stats %+v", events, st)
			}
			return err
		})
		if got := client.Buf[client.Half+size-1]; got != byte(300%256) {
			t.Errorf("events %v: the client's last counter byte is %d, want %d", events, got, 300%256)
		}
	}
}

// TestLoopFailedCompletion: a WRITE the responder refuses (a wrong rkey)
// ends BW with perftest's lines, tbrdma's, and ErrReported.
func TestLoopFailedCompletion(t *testing.T) {
	server, client := testPair(t, VerbWrite, 4096, 4)
	rem := server.dest(false)
	rem.RKey ^= 0x5a5a00
	_, err := client.BW(context.Background(), []Dest{rem}, 64)
	if !errors.Is(err, ErrReported) {
		t.Fatalf("BW returned %v, want ErrReported", err)
	}
	got := client.errOut.String()
	if !strings.HasPrefix(got, " Completion with error at client\n Failed status ") || !strings.Contains(got, "\ntbrdma: RDMA_WRITE failed: ") {
		t.Errorf("messages %q", got)
	}
}

// TestLoopCancelled: a cancelled context ends a loop that waits for the
// peer with the context's error.
func TestLoopCancelled(t *testing.T) {
	server, _ := testPair(t, VerbSend, 4096, 4)
	if err := server.PostRecvs(64); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := server.ReceiveBW(ctx, 64); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReceiveBW returned %v, want context.Canceled", err)
	}
}

// TestPingpongRun runs ibv_rc_pingpong's loop on both sides at once, with
// fewer receives posted than exchanges.
func TestPingpongRun(t *testing.T) {
	server, client := testPair(t, VerbSend, 4096, 4)
	pp := map[*testSide]*Pingpong{}
	for _, s := range []*testSide{server, client} {
		pp[s] = &Pingpong{QP: s.QP, MR: s.MR, W: s.W, Size: 100, RxDepth: 4, Iters: 40, Now: time.Now, ErrOut: &s.errOut}
		if err := pp[s].PostRecvs(); err != nil {
			t.Fatal(err)
		}
	}
	both(t, server, client, func(s *testSide) error {
		_, err := pp[s].Run(context.Background(), s == client)
		return err
	})
	if !bytes.Equal(server.Buf[:100], client.Buf[:100]) {
		t.Error("the buffers differ after the ping-pong: each side receives into the one it sends from")
	}
}

// TestSendWindow: QPs toward a tbrdma peer share one QP's window (512
// packets at the path MTU, 6 MiB of large segments), at least 16 packets
// each.
func TestSendWindow(t *testing.T) {
	for _, c := range []struct{ qps, seg, want int }{
		{1, 0, 512}, {2, 0, 256}, {4, 0, 128}, {8, 0, 64}, {64, 0, 16}, {1024, 0, 16},
		{1, 61440, 102}, {4, 61440, 25}, {8, 61440, 16}, {1, 8192, 512}, {2, 8192, 256}, {0, 0, 512},
	} {
		if got := SendWindow(c.qps, c.seg); got != c.want {
			t.Errorf("SendWindow(%d, %d) = %d, want %d", c.qps, c.seg, got, c.want)
		}
	}
}

// TestLoopBWSeveralQPs runs BW over two QPs on one CQ (perftest's -q 2):
// Iters on each, one report for both, each QP's data in its own slice of
// the target.
func TestLoopBWSeveralQPs(t *testing.T) {
	const size, half = 3000, 4096
	for _, verb := range []Verb{VerbWrite, VerbSend} {
		servers := []*testSide{newTestSide(t, verb, true, 2*half, 16)}
		clients := []*testSide{newTestSide(t, verb, false, 2*half, 16)}
		// A second QP on each side, on the first one's device, PD, MR
		// and CQ.
		for _, s := range []*testSide{servers[0], clients[0]} {
			qp, err := s.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.W.CQ, RecvCQ: s.W.CQ,
				Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
				verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			s.QPs = []*verbs.QP{s.QP, qp}
			s.Stride = half
		}
		sv, cl := servers[0], clients[0]
		// Each QP i connects to the peer's QP i (psn shared by both).
		for i := range 2 {
			sd, cd := sv.dest(false), cl.dest(false)
			sd.QPN, cd.QPN = uint32(sv.QPs[i].QPN()), uint32(cl.QPs[i].QPN())
			sd.VAddr += uint64(i * half)
			qs, qc := sv.QP, cl.QP
			sv.QP, cl.QP = sv.QPs[i], cl.QPs[i]
			sv.connectTo(t, cd)
			cl.connectTo(t, sd)
			sv.QP, cl.QP = qs, qc
		}
		rems := []Dest{sv.dest(false), sv.dest(false)}
		rems[1].QPN, rems[1].VAddr = uint32(sv.QPs[1].QPN()), rems[1].VAddr+half
		for i := range 2 { // the client's two slices differ
			for j := range size {
				cl.Buf[i*half+j] = byte(i*7 + j%13 + 1)
			}
		}
		var rep, recv BWReport
		if verb == VerbSend {
			sv.Half = 2 * half
			if err := sv.PostRecvs(size); err != nil {
				t.Fatal(err)
			}
			both(t, sv, cl, func(s *testSide) error {
				var err error
				if s == sv {
					recv, err = s.ReceiveBW(context.Background(), size)
				} else {
					rep, err = s.BW(context.Background(), rems, size)
				}
				return err
			})
			if recv.Iters != 2*50 {
				t.Errorf("%v: the receiver counted %d messages, want 2×50", verb, recv.Iters)
			}
		} else {
			var err error
			if rep, err = cl.BW(context.Background(), rems, size); err != nil {
				t.Fatalf("%v: %v\n%s", verb, err, &cl.errOut)
			}
			tell(t, cl, sv)
		}
		if rep.Size != size || rep.Iters != 2*50 || rep.Average <= 0 {
			t.Errorf("%v: report %+v, want 2×50 messages of %d bytes", verb, rep, size)
		}
		for i := range 2 {
			at := i * half // WRITE: QP i's slice of the advertised region
			if verb == VerbSend {
				at = sv.Half + i*half // the receives of QP i
			}
			if !bytes.Equal(sv.Buf[at:at+size], cl.Buf[i*half:i*half+size]) {
				t.Errorf("%v: QP %d's bytes are not in its slice", verb, i)
			}
		}
	}
}
