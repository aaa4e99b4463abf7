package perf

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// Work request IDs of ibv_rc_pingpong.
const (
	pingpongRecvWRID = 1
	pingpongSendWRID = 2
)

// Pingpong is the data path of ibv_rc_pingpong (RC) and ibv_ud_pingpong
// (UD): SENDs of Size bytes from Off in MR, and RxDepth receives kept
// posted at the same place. The command makes the QP and the MR, calls
// PostRecvs before the peer may send, connects the QP, and calls Run.
type Pingpong struct {
	QP *verbs.QP
	MR *verbs.MR
	W  *Waiter
	// Off is where messages start in MR: 0, or for UD the room for the
	// GRH the device writes in front of each received message.
	Off     int
	Size    int
	RxDepth int
	Iters   int
	// AH, RemoteQPN and QKey address a UD QP's sends; AH is nil for RC.
	AH        *verbs.AH
	RemoteQPN verbs.QPN
	QKey      verbs.QKey
	Now       func() time.Time
	ErrOut    io.Writer

	routs int // receives posted and not completed
}

// PostRecvs posts RxDepth receives, as the stock tools do before they
// exchange addresses.
func (p *Pingpong) PostRecvs() error {
	if p.routs = p.postRecv(p.RxDepth); p.routs < p.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", p.routs)
	}
	return nil
}

func (p *Pingpong) postRecv(n int) int {
	for i := range n {
		// A UD receive takes the GRH area in front of the message.
		if _, err := p.QP.PostRecv(verbs.RecvWR{WRID: pingpongRecvWRID, SGList: []verbs.SGE{p.MR.SGE(0, p.Off+p.Size)}}); err != nil {
			return i
		}
	}
	return n
}

func (p *Pingpong) postSend() error {
	wr := verbs.SendWR{WRID: pingpongSendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{p.MR.SGE(p.Off, p.Size)}}
	if p.AH != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = p.AH, p.RemoteQPN, p.QKey
	}
	_, err := p.QP.PostSend(wr)
	if err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// Run is ibv_rc_pingpong's main loop, Iters exchanges: each side sends
// its next message only when its previous SEND has completed and a
// message has arrived; the client sends first. It returns the time from
// the client's first SEND (the server's start) to the last completion.
func (p *Pingpong) Run(ctx context.Context, client bool) (time.Duration, error) {
	pending := pingpongRecvWRID
	if client {
		if err := p.postSend(); err != nil {
			return 0, err
		}
		pending |= pingpongSendWRID
	}
	start := p.Now()
	rcnt, scnt := 0, 0
	ctx, seen, stop := watchSilence(ctx, peerSilence)
	defer stop()
	for rcnt < p.Iters || scnt < p.Iters {
		wcs, err := p.W.Wait(ctx)
		if err != nil {
			return 0, silentPeer(ctx, p.ErrOut, "pingpong", p.QP, err)
		}
		seen.Add(1)
		for i := range wcs {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				fmt.Fprintf(p.ErrOut, "Failed status %s (%d) for wr_id %d\n", wc.Status, wc.Status, wc.WRID)
				if hint := peerGone(p.QP, wc.Status); hint != "" {
					fmt.Fprintf(p.ErrOut, "tbrdma: pingpong: %v%s\n", wc.Status, hint)
				}
				return 0, ErrReported
			}
			switch wc.WRID {
			case pingpongSendWRID:
				scnt++
			case pingpongRecvWRID:
				if p.routs--; p.routs <= 1 {
					p.routs += p.postRecv(p.RxDepth - p.routs)
					if p.routs < p.RxDepth {
						fmt.Fprintf(p.ErrOut, "Couldn't post receive (%d)\n", p.routs)
						return 0, ErrReported
					}
				}
				rcnt++
			default:
				fmt.Fprintf(p.ErrOut, "Completion for unknown wr_id %d\n", wc.WRID)
				return 0, ErrReported
			}
			pending &^= int(wc.WRID)
			if scnt < p.Iters && pending == 0 {
				if err := p.postSend(); err != nil {
					return 0, err
				}
				pending = pingpongRecvWRID | pingpongSendWRID
			}
		}
	}
	return p.Now().Sub(start), nil
}
