package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// ErrReported ends a test after the loop has already explained the
// failure on its error writer, in the words of the stock tool it mirrors
// (a failed completion, a wrong atomic result, a silent peer). The command
// exits with a failure and prints nothing more.
var ErrReported = errors.New("silent failure")

// PeerLabel is role followed by the address of qp's peer as users give
// it ("peer 198.18.0.2", "receiver 198.18.0.2"), or role alone when the
// QP has no peer (not connected yet).
func PeerLabel(role string, qp *verbs.QP) string {
	if qp == nil {
		return role
	}
	a := qp.Query().AH.DGID
	if a.IsZero() {
		return role
	}
	return role + " " + a.Addr().String()
}

// peerGone explains a failed completion whose cause is the peer of qp,
// naming it: ": peer 198.18.0.2 stopped answering (…)" for RETRY_EXC_ERR,
// and the like for RNR_RETRY_EXC_ERR; for the errors a peer that runs
// another test or a smaller -s causes (REM_ACCESS_ERR, REM_INV_REQ_ERR,
// REM_OP_ERR) what to check; "" for other statuses.
func peerGone(qp *verbs.QP, st verbs.WCStatus) string {
	switch st {
	case verbs.WCRetryExcErr:
		budget := ""
		if qp != nil {
			a := qp.Query()
			period := 4096 * time.Nanosecond << (a.Timeout & 31)
			budget = fmt.Sprintf(" for %d tries %v apart", int(a.RetryCnt)+1, period.Round(time.Millisecond))
		}
		return fmt.Sprintf(": %s stopped answering (no acknowledgement%s): it was stopped or killed, or the link went down; check that it runs and that the link is up, then start again",
			PeerLabel("peer", qp), budget)
	case verbs.WCRemAccessErr:
		return fmt.Sprintf(": %s refused the access: its buffer is smaller than this message (a smaller -s, or no -a where we run -a), or it runs another test that does not grant this access; start both ends with the same command and flags (a tbrdma server started so checks them and says what differs; \"tbrdma serve\" adapts to the client)",
			PeerLabel("peer", qp))
	case verbs.WCRemInvReqErr, verbs.WCRemOpErr:
		return fmt.Sprintf(": %s could not take the request (a different test or message size there?); start both ends with the same command and flags, or use \"tbrdma serve\" on the server",
			PeerLabel("peer", qp))
	case verbs.WCRNRRetryExcErr:
		return fmt.Sprintf(": %s stopped posting receives (it is stuck or too slow to keep up): check it, then start again", PeerLabel("peer", qp))
	}
	return ""
}

// peerSilence is how long the ping-pong loops (pingpong, send-lat,
// write-lat) wait for the peer's next message once everything they sent
// was acknowledged. A live peer answers at once; a peer that died
// between acknowledging our message and sending its own leaves nothing in
// flight for the QP's retries to time out, and ibv_rc_pingpong or
// perftest would wait forever. tbrdma gives up after 5 to 10 s of
// silence (watchSilence).
const peerSilence = 5 * time.Second

// silentPeer is what a loop under watchSilence returns when a wait failed
// with err: when the silence watch ended it, it says so (naming qp's peer)
// and returns ErrReported; otherwise err.
func silentPeer(ctx context.Context, w io.Writer, cmd string, qp *verbs.QP, err error) error {
	if context.Cause(ctx) != errPeerSilent {
		return err
	}
	fmt.Fprintf(w, "tbrdma: %s: %s stopped answering: nothing from it for %v while all we sent was acknowledged: it was stopped or killed, or the link went down; check that it runs and that the link is up, then start again\n",
		cmd, PeerLabel("peer", qp), peerSilence)
	return ErrReported
}

// errPeerSilent is the cause of the context watchSilence cancels.
var errPeerSilent = errors.New("the peer has been silent")

// watchSilence returns a context that is cancelled with errPeerSilent once
// the counter it returns has not moved for a whole period (so after
// between one and two periods of silence), and otherwise when ctx is. The
// caller counts its completions on the counter and calls stop when done.
func watchSilence(ctx context.Context, period time.Duration) (_ context.Context, _ *atomic.Uint64, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	var n atomic.Uint64
	go func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		last := n.Load()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			if cur := n.Load(); cur != last {
				last = cur
				continue
			}
			cancel(errPeerSilent)
			return
		}
	}()
	return wctx, &n, func() { cancel(nil) }
}
