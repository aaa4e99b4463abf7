// Package verbstest builds connected queue pairs for tests: two contexts
// joined by real UDP sockets on loopback or by any pair of transport.Conns
// (such as package transporttest's in-memory link), with QPs already in RTS.
package verbstest

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/verbs"
)

// Options shape a Pair. The zero value gives RC QPs with a 4096-byte path
// MTU, 64 KiB buffers and a 67 ms ACK timeout (14), over UDP on loopback.
type Options struct {
	Type    verbs.QPType
	PathMTU verbs.MTU
	BufSize int
	// Conns, when set, carry the two ends' packets instead of UDP sockets.
	Conns [2]transport.Conn
	// Timeout, RetryCnt, RNRRetry, MinRNRTimer are the RC attributes
	// (defaults 14, 7, 7, 1).
	Timeout, RetryCnt, RNRRetry, MinRNRTimer uint8
	SetRetry                                 bool // use RetryCnt/RNRRetry even when 0
	MaxRdAtomic                              uint8
	MaxSendWR, MaxRecvWR                     int
	Access                                   verbs.AccessFlags
	// SegmentSize, when not 0, enables the large-segment extension on both
	// contexts (Context.SetMaxSegmentSize) and gives RC and UC QPs that
	// segment size in Connect.
	SegmentSize int
}

// End is one side of a Pair.
type End struct {
	Ctx *verbs.Context
	PD  *verbs.PD
	CQ  *verbs.CQ // send and receive completions
	QP  *verbs.QP
	MR  *verbs.MR
	Buf []byte
}

// Pair is two connected Ends.
type Pair struct{ A, B *End }

// nextAddr starts at a point drawn from the process ID, so that the test
// binaries of several packages, which go test runs at once, use different
// addresses.
var nextAddr = func() *atomic.Uint32 {
	var n atomic.Uint32
	n.Store(uint32(os.Getpid()) * 257)
	return &n
}()

// LoopbackAddr returns a fresh loopback address (127.77.N.M .. 127.92.N.M)
// so that tests running at once never fight over UDP port 4791.
func LoopbackAddr() netip.Addr {
	n := nextAddr.Add(1) % (16 << 16)
	if byte(n) == 0 || byte(n) == 255 {
		n = nextAddr.Add(2) % (16 << 16)
	}
	return netip.AddrFrom4([4]byte{127, 77 + byte(n>>16), byte(n >> 8), byte(n)})
}

// Device opens a verbs context on a fresh loopback address
// (LoopbackAddr), skipping one whose UDP port 4791 is taken. It is closed
// when the test ends.
func Device(tb testing.TB) *verbs.Context {
	tb.Helper()
	var err error
	for range 20 {
		var c *verbs.Context
		if c, err = verbs.NewContext(&verbs.Options{Addr: LoopbackAddr()}); err == nil {
			tb.Cleanup(func() { c.Close() })
			return c
		}
	}
	tb.Fatal(err)
	return nil
}

// NewPair creates two contexts and a connected QP on each. Everything is
// closed when the test ends.
func NewPair(tb testing.TB, o Options) *Pair {
	tb.Helper()
	if o.Type == 0 {
		o.Type = verbs.QPTypeRC
	}
	if o.PathMTU == 0 {
		o.PathMTU = verbs.MTU4096
	}
	if o.BufSize == 0 {
		o.BufSize = 64 << 10
	}
	if o.Timeout == 0 {
		o.Timeout = 14 // 67 ms, as perftest and ibv_rc_pingpong use
	}
	if !o.SetRetry {
		if o.RetryCnt == 0 {
			o.RetryCnt = 7
		}
		if o.RNRRetry == 0 {
			o.RNRRetry = 7
		}
	}
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 1
	}
	if o.MaxRdAtomic == 0 {
		o.MaxRdAtomic = 16
	}
	if o.MaxSendWR == 0 {
		o.MaxSendWR = 256
	}
	if o.MaxRecvWR == 0 {
		o.MaxRecvWR = 256
	}
	if o.Access == 0 {
		o.Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	var ends [2]*End
	for i := range ends {
		opts := &verbs.Options{Conn: o.Conns[i], ActiveMTU: o.PathMTU, MaxSegmentSize: o.SegmentSize}
		if opts.Conn == nil {
			opts.Addr = LoopbackAddr()
		}
		ctx, err := verbs.NewContext(opts)
		if err != nil {
			tb.Fatalf("open context: %v", err)
		}
		tb.Cleanup(func() { ctx.Close() })
		pd, _ := ctx.AllocPD()
		cq, err := ctx.CreateCQ(4*o.MaxSendWR+4*o.MaxRecvWR, nil)
		if err != nil {
			tb.Fatal(err)
		}
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: o.Type, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: o.MaxSendWR, MaxRecvWR: o.MaxRecvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
		if err != nil {
			tb.Fatal(err)
		}
		buf := make([]byte, o.BufSize)
		mr, err := pd.RegMR(buf, o.Access|verbs.AccessLocalWrite)
		if err != nil {
			tb.Fatal(err)
		}
		ends[i] = &End{Ctx: ctx, PD: pd, CQ: cq, QP: qp, MR: mr, Buf: buf}
	}
	a, b := ends[0], ends[1]
	if err := Connect(a, b, o); err != nil {
		tb.Fatal(err)
	}
	if err := Connect(b, a, o); err != nil {
		tb.Fatal(err)
	}
	return &Pair{A: a, B: b}
}

// Connect moves e's QP through INIT and RTR to RTS, aimed at peer's QP.
// The PSNs are fixed per direction: e sends from 0x100 + e's QPN.
func Connect(e, peer *End, o Options) error {
	qp := e.QP
	port := uint16(0)
	if lp := peer.Ctx.LocalAddr().Port(); lp != 4791 {
		port = lp
	}
	ah := verbs.AHAttr{DGID: peer.Ctx.GID(), PortNum: 1, HopLimit: 64, UDPPort: port}
	switch o.Type {
	case verbs.QPTypeUD:
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: 0x11111111},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
			return err
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
			return err
		}
		return qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0}, verbs.QPAttrState|verbs.QPAttrSQPSN)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: o.Access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("INIT: %w", err)
	}
	rtr := &verbs.QPAttr{State: verbs.QPStateRTR, AH: ah, PathMTU: o.PathMTU, DestQPN: peer.QP.QPN(),
		RQPSN: verbs.PSN(0x100 + uint32(peer.QP.QPN())), MaxDestRdAtomic: o.MaxRdAtomic, MinRNRTimer: o.MinRNRTimer}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if o.SegmentSize != 0 {
		rtr.SegmentSize = o.SegmentSize
		mask |= verbs.QPAttrSegmentSize
	}
	if o.Type == verbs.QPTypeRC {
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if err := qp.Modify(rtr, mask); err != nil {
		return fmt.Errorf("RTR: %w", err)
	}
	rts := &verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: verbs.PSN(0x100 + uint32(qp.QPN())), Timeout: o.Timeout,
		RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRdAtomic}
	mask = verbs.QPAttrState | verbs.QPAttrSQPSN
	if o.Type == verbs.QPTypeRC {
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := qp.Modify(rts, mask); err != nil {
		return fmt.Errorf("RTS: %w", err)
	}
	return nil
}

// Wait polls e's CQ until n completions have arrived and returns them. It
// fails the test when a poll returns an error, or when 60 seconds pass
// without the completions (a hang guard, not a timing assertion).
func (e *End) Wait(tb testing.TB, n int) []verbs.WC {
	tb.Helper()
	out := make([]verbs.WC, 0, n)
	wc := make([]verbs.WC, 16)
	deadline := time.Now().Add(60 * time.Second)
	for spins := 0; len(out) < n; spins++ {
		k, err := e.CQ.Poll(wc[:min(len(wc), n-len(out))])
		if err != nil {
			tb.Fatalf("poll CQ: %v", err)
		}
		if k > 0 {
			out = append(out, wc[:k]...)
			continue
		}
		if time.Now().After(deadline) {
			tb.Fatalf("waited 60 s: %d of %d completions", len(out), n)
		}
		if spins%64 == 63 {
			time.Sleep(50 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
	return out
}
