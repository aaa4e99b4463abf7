package cli

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// A test server grants its peer the test's one right (write-bw and
// write-lat REMOTE_WRITE, read-bw and read-lat REMOTE_READ, atomic-lat
// REMOTE_ATOMIC, the SEND tests none), and only over the region it
// advertises: the test's largest message, at least a page, from the
// advertised address. TestPerftestServerRights shows it from a peer that
// runs a tbrdma client's exchange (so that it learns the server's rkey and
// address as any client does) and then sends, from that client's QP,
// requests the test does not make. The server's engine must answer each
// with the NAK IBTA gives it, which the sender's completion carries:
//
//   - an operation the server's QP is not enabled for (its access flags,
//     or no responder resources for a READ or atomic): NAK Invalid
//     Request, WC status REM_INV_REQ_ERR (as rdma_rxe answers it too);
//   - a request the R_Key does not allow (the MR's rights, or an address
//     outside it): NAK Remote Access Error, REM_ACCESS_ERR.
//
// Over the TCP exchange the QP carries the test's right (as perftest sets
// it), so a request of another kind meets the first check. With -R,
// rdma_cm enables REMOTE_WRITE on every QP and READ and atomics wherever
// there are responder resources (the READ and atomic tests), so there the
// MR's rights are what refuses them. Before every refused request the peer
// makes the test's own request at the region's last bytes, which must
// succeed. (The engine's checks themselves are verbs' tests; these show
// what each server registers.) Each refused request ends the connection (the NAK is fatal to
// both QPs), so each gets a server of its own.
func TestPerftestServerRights(t *testing.T) {
	type server struct {
		kind *perftestKind
		args []string
	}
	servers := []server{
		{writeBWTest, []string{"-s", "64"}},
		{readBWTest, []string{"-s", "65536"}}, // a region above a page
		{sendBWTest, []string{"-s", "64"}},
		{writeLatTest, []string{"-s", "64"}},
		{readLatTest, []string{"-s", "64"}},
		{sendLatTest, []string{"-s", "64"}},
		{atomicLatTest, nil},
	}
	if !testing.Short() {
		servers = append(servers, server{readLatTest, []string{"-a"}}) // the region is -a's 8 MiB
	}
	for _, mode := range []string{"tcp", "rdma_cm"} {
		for _, s := range servers {
			if raceEnabled && s.kind == writeLatTest {
				continue // write-lat polls memory the engine writes: a data race by design, as in perftest
			}
			args := append([]string{"-n", "5"}, s.args...)
			if mode == "rdma_cm" {
				args = append(args, "-R")
			}
			for _, r := range rightsRequests(s.kind, mode == "rdma_cm", perftestHalf(t, s.kind, args)) {
				t.Run(fmt.Sprintf("%s/%s%v/%s", mode, s.kind.name, s.args, r.name), func(t *testing.T) {
					sa, port, stop := startRightsServer(t, s.kind, args)
					defer stop()
					checkRights(t, s.kind, args, sa, port, r, stop)
				})
			}
		}
	}
}

// TestServeSessionRights does the same for the sessions "tbrdma serve"
// runs: a read-lat client's peer cannot WRITE, a write-bw's cannot WRITE
// past the region.
func TestServeSessionRights(t *testing.T) {
	for _, c := range []struct {
		kind *perftestKind
		req  int // index into rightsRequests
	}{{readLatTest, 0}, {writeBWTest, 0}} {
		args := []string{"-n", "5", "-s", "64"}
		r := rightsRequests(c.kind, false, perftestHalf(t, c.kind, args))[c.req]
		t.Run(c.kind.name+"/"+r.name, func(t *testing.T) {
			sa := rdmaAddr(t)
			stop, errOf := startServeLog(t, sa)
			waitServeLog(t, errOf, "port 18515 (TCP, pingpong and perftest clients)")
			checkRights(t, c.kind, args, sa, 18515, r, func() {})
			stop()
		})
	}
}

// rightsRequest is a request the peer makes after the control request
// (control: the test's own request at the region's last bytes; none for
// the SEND tests), at off bytes from the advertised address, and the
// completion status it must end with.
type rightsRequest struct {
	name    string
	control verbs.WROpcode
	op      verbs.WROpcode
	off     int64
	want    verbs.WCStatus
}

const noControl = verbs.WROpcode(0xff)

// rightsRequests lists the requests a server of k must refuse, given the
// length of its region (half): each request kind the test does not make at
// the advertised address, and the test's own just past the region (and for
// write-lat just before it: the half the server sends from).
func rightsRequests(k *perftestKind, cm bool, half int) []rightsRequest {
	var granted verbs.WROpcode = noControl
	switch k {
	case writeBWTest, writeLatTest:
		granted = verbs.WRRDMAWrite
	case readBWTest, readLatTest:
		granted = verbs.WRRDMARead
	case atomicLatTest:
		granted = verbs.WRAtomicFetchAndAdd
	}
	names := map[verbs.WROpcode]string{verbs.WRRDMAWrite: "WRITE", verbs.WRRDMARead: "READ", verbs.WRAtomicFetchAndAdd: "FETCH_AND_ADD"}
	var rs []rightsRequest
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd} {
		if op == granted {
			rs = append(rs, rightsRequest{names[op] + " past the region", granted, op, int64(half), verbs.WCRemAccessErr})
			if k == writeLatTest {
				rs = append(rs, rightsRequest{names[op] + " before the region", granted, op, -8, verbs.WCRemAccessErr})
			}
			continue
		}
		want := verbs.WCRemInvReqErr // the QP is not enabled for it
		// With -R the QP allows WRITEs, and READs and atomics where it
		// has responder resources: the MR refuses them.
		if cm && (op == verbs.WRRDMAWrite || granted == verbs.WRRDMARead || granted == verbs.WRAtomicFetchAndAdd) {
			want = verbs.WCRemAccessErr
		}
		rs = append(rs, rightsRequest{names[op], granted, op, 0, want})
	}
	return rs
}

// perftestHalf is the length of the region a server of k with args
// advertises (the half of its buffer).
func perftestHalf(t *testing.T, k *perftestKind, args []string) int {
	f, _, _ := testFactory()
	return max(parsePerftest(t, f, k, args...).Size, os.Getpagesize())
}

// startRightsServer runs a one-test server of k with args on a fresh
// loopback address; stop (once, any number of calls) cancels it and waits
// for it to end.
func startRightsServer(t *testing.T, k *perftestKind, args []string) (netip.Addr, int, func()) {
	t.Helper()
	sa := loopbackAddr()
	f, _, errOut := testFactory()
	so := parsePerftest(t, f, k, append([]string{"--bind", sa.String(), "-p", "0"}, args...)...)
	portc := make(chan int, 1)
	so.Listening = func(a net.Addr) {
		switch a := a.(type) {
		case *net.TCPAddr:
			portc <- a.Port
		case *net.UDPAddr:
			portc <- a.Port
		default:
			t.Errorf("listening on %v (%T)", a, a)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- runPerftest(ctx, so) }()
	var port int
	select {
	case port = <-portc:
	case err := <-ended:
		cancel()
		t.Fatalf("server ended before it listened: %v\n%s", err, errOut)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatalf("server did not listen:\n%s", errOut)
	}
	var once sync.Once
	return sa, port, func() {
		once.Do(func() {
			cancel()
			select {
			case <-ended:
			case <-time.After(20 * time.Second):
				t.Errorf("server did not stop:\n%s", errOut)
			}
		})
	}
}

// checkRights runs a client of k with args to the server at sa:port up to
// the connected QP, then makes r's requests from it. Once they are made,
// it stops the server (stop) while the client closes: with -R each side
// waits for the other's disconnect, which one stopped after the other
// would answer only after its wait (cmDisconnectWait).
func checkRights(t *testing.T, k *perftestKind, args []string, sa netip.Addr, port int, r rightsRequest, stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, _, errOut := testFactory()
	c := &perftest{o: parsePerftest(t, f, k, append([]string{"--bind", loopbackAddr().String(), "-p", itoa(port), sa.String()}, args...)...)}
	var stopped chan struct{}
	defer func() {
		if stopped != nil {
			<-stopped
		}
	}()
	defer c.close()
	comm, done, err := c.openExchange(ctx)
	defer done()
	stopped = make(chan struct{})
	defer func() {
		go func() { stop(); close(stopped) }()
	}()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, errOut)
	}
	if err := c.exchangeParams(ctx, comm); err != nil {
		t.Fatalf("client: %v\n%s", err, errOut)
	}
	rems, err := c.exchangeKeys(comm)
	if err != nil {
		t.Fatalf("client: %v\n%s", err, errOut)
	}
	rem := rems[0]
	// The client of a WRITE or SEND test issues no READ or atomic, and
	// its QP is set up so: let it.
	reissueReads(t, c.qp)
	post := func(op verbs.WROpcode, off int64) verbs.WCStatus {
		t.Helper()
		wr := verbs.SendWR{WRID: 7, Opcode: op, Flags: verbs.SendSignaled, SGList: []verbs.SGE{c.mr.SGE(0, 8)},
			RemoteAddr: rem.VAddr + uint64(off), RKey: verbs.RKey(rem.RKey), CompareAdd: 1}
		if _, err := c.qp.PostSend(wr); err != nil {
			t.Fatalf("post %v: %v", op, err)
		}
		wcs, err := c.w.Wait(ctx)
		if err != nil {
			t.Fatalf("%v at %+d: no completion: %v", op, off, err)
		}
		return wcs[0].Status
	}
	if r.control != noControl {
		if st := post(r.control, int64(perftestHalf(t, k, args)-8)); st != verbs.WCSuccess {
			t.Fatalf("the test's own %v at the region's last bytes: %v, want success", r.control, st)
		}
	}
	if st := post(r.op, r.off); st != r.want {
		t.Errorf("%v at %+d bytes from the advertised address: %v, want %v", r.op, r.off, st, r.want)
	}
}

// reissueReads brings qp up again with the same peer and PSNs, able to
// issue READs and atomics (max_rd_atomic 16), which RTS to RTS cannot
// change.
func reissueReads(t *testing.T, qp *verbs.QP) {
	t.Helper()
	a := qp.Query()
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: a.AccessFlags},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: a.PathMTU, DestQPN: a.DestQPN, RQPSN: a.RQPSN,
			MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, AH: a.AH},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
			SQPSN: a.SQPSN, MaxRdAtomic: 16},
			verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrSQPSN |
				verbs.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("bring the client's QP up again: %v", err)
		}
	}
}
