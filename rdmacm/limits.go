package rdmacm

import (
	"fmt"
	"net/netip"

	"github.com/tbrdma/tbrdma/rdmacm/internal/fsm"
)

// Limits bound the state a listener keeps for connections that are not
// established yet ("half-open": from the REQ until the RTU, whether the
// application has answered the request or not). A REQ beyond a limit is
// answered with REJ 3 (no resources) and private data
// "tbrdma: too many pending connection requests", without state, and
// counted (verbs counter cm_rejects_limit). Half-open connections end when
// the RTU comes, when the application rejects or destroys them, or when
// the REP's retries run out: at most 16 × conv(min(the REQ's local CM
// response timeout, 21)) = 131 s after Accept (cm_half_open_expired).
type Limits struct {
	// MaxHalfOpenPerPeer bounds the half-open connections from one peer
	// address; ≤ 0: DefaultMaxHalfOpenPerPeer.
	MaxHalfOpenPerPeer int
	// MaxHalfOpen bounds them on the listener in total; ≤ 0:
	// DefaultMaxHalfOpen.
	MaxHalfOpen int
}

// Default limits: a peer opening many QPs at once (perftest -q) stays
// well under them; a flood from one address stops at 256 half-open
// connections, a listener at 1024 (about 1.4 KiB each before Accept,
// 31 KiB with a Listener's QP and CQ: docs/rdmacm.md).
const (
	DefaultMaxHalfOpenPerPeer = 256
	DefaultMaxHalfOpen        = 1024
)

const limitRejectText = "tbrdma: too many pending connection requests"

func (l Limits) withDefaults() Limits {
	if l.MaxHalfOpenPerPeer <= 0 {
		l.MaxHalfOpenPerPeer = DefaultMaxHalfOpenPerPeer
	}
	if l.MaxHalfOpen <= 0 {
		l.MaxHalfOpen = DefaultMaxHalfOpen
	}
	return l
}

// SetLimits sets the half-open limits of a listening (or not yet
// listening) ID; zero fields take the defaults.
func (id *ID) SetLimits(l Limits) error {
	id.d.mu.Lock()
	defer id.d.mu.Unlock()
	if id.state != stateIdle && id.state != stateListen {
		return fmt.Errorf("rdmacm: set limits: not a listener: %w", ErrInvalidState)
	}
	id.listen.limits = l.withDefaults()
	return nil
}

// halfOpen is a listener's count of half-open connections.
type halfOpen struct {
	total  int
	byPeer map[netip.Addr]int
}

// halfOpenRoom says whether the listener may take one more half-open
// connection from peer.
func (ln *ID) halfOpenRoom(peer netip.Addr) bool {
	l := ln.listen.limits.withDefaults()
	return ln.listen.half.total < l.MaxHalfOpen && ln.listen.half.byPeer[peer] < l.MaxHalfOpenPerPeer
}

// enterHalfOpen counts child, a new passive connection from peer, on ln.
func (ln *ID) enterHalfOpen(child *ID, peer netip.Addr) {
	if ln.listen.half.byPeer == nil {
		ln.listen.half.byPeer = map[netip.Addr]int{}
	}
	ln.listen.half.total++
	ln.listen.half.byPeer[peer]++
	child.passive.halfOn, child.passive.halfPeer = ln, peer
}

// leaveHalfOpen stops counting the ID as half-open.
func (id *ID) leaveHalfOpen() {
	ln := id.passive.halfOn
	if ln == nil {
		return
	}
	ln.listen.half.total--
	if n := ln.listen.half.byPeer[id.passive.halfPeer] - 1; n > 0 {
		ln.listen.half.byPeer[id.passive.halfPeer] = n
	} else {
		delete(ln.listen.half.byPeer, id.passive.halfPeer)
	}
	id.passive.halfOn = nil
}

// settleHalfOpen stops counting the ID once its connection is no longer
// half-open.
func (id *ID) settleHalfOpen() {
	if id.passive.halfOn == nil || id.conn == nil {
		return
	}
	switch id.conn.State() {
	case fsm.REQRcvd, fsm.MRAREQSent, fsm.REPSent:
		return
	}
	id.leaveHalfOpen()
}
