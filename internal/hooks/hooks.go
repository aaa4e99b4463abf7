// Package hooks holds what the module's packages offer each other but not
// applications. Package verbs offers, per Context, its QP1 (the GSI, on
// which package rdmacm speaks the IB CM), the connection manager's
// counters and the receive loop's tuning knobs (busy polling, kernel wait),
// which the C library and the CLI set; package transport's UDP endpoint
// offers package verbs its receive-path controls (endpoint.go).
//
// An internal package can be imported only from inside the module, so none
// of this is API. Package verbs imports this one, so this one cannot name
// verbs' types: verbs registers, at init, the function that maps its
// *Context to an Engine (Register), and callers reach it with Of(ctx).
// Everything but that one mapping is checked by the compiler.
package hooks

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// Engine is a verbs.Context as the module's own packages see it.
type Engine interface {
	// GSI returns the context's QP1, creating it on first use. MADs that
	// arrive before then are dropped, as they would be with no MAD agent
	// registered.
	GSI() GSI
	// CM returns the context's connection-manager counters, which package
	// rdmacm moves and verbs.Context.Counters reports (Counters.CM).
	CM() *CMCounters

	// SetBusyPoll makes the context's receive loop poll its socket
	// instead of sleeping while packets keep coming: after each packet it
	// polls for up to d more (yielding the processor between polls)
	// before it sleeps in the runtime's poller again; d = 0 turns it off
	// (the default). It is the engine half of a busy-polling application
	// (perftest's default mode: spin on ibv_poll_cq): it saves the
	// receiver's wake-up, about half of a small round trip, at the price
	// of a processor while it spins. It reports false when the transport
	// cannot busy-poll (in-memory links; it is a no-op off Linux).
	SetBusyPoll(d time.Duration) bool
	// Spinning tells a busy-polling context (SetBusyPoll) that a
	// goroutine starts (true) or stops (false) spinning on its completions
	// or its memory: while one is, the receive loop keeps polling its
	// socket instead of sleeping. Calls must pair. A goroutine that spins
	// with runtime.Gosched while the receive loop sleeps delays the loop's
	// wake-up (by up to the runtime's 10 ms network-poll backstop on one
	// processor).
	Spinning(on bool)
	// SetKernelWait makes the context's receive loop, for up to d after
	// each packet, wait for the next one in a blocking system call on its
	// own thread instead of in the Go runtime's network poller; d = 0
	// turns it off (the default). It is the engine half of an application
	// that sleeps on a completion channel (perftest's -e): a round trip
	// then costs one wake-up and two system calls per side, as for a
	// blocking C program, where the poller's hand-off and the runtime's
	// sysmon thread cost three wake-ups and about seven calls
	// (docs/performance.md). The price: while the loop waits, its goroutine
	// keeps its processor, so with GOMAXPROCS=1 other goroutines (another
	// context's receive loop, timers) run only between waits, which last
	// at most 500 µs each. It suits a process whose one context carries
	// the latency-critical traffic. It reports false when the transport
	// cannot (in-memory links, and systems other than Linux, where it is a
	// no-op).
	SetKernelWait(d time.Duration) (bool, error)
	// OnUnreachable sets the function that receives the ICMP destination
	// unreachable messages answering the context's datagrams (Linux; see
	// transport.Options.OnUnreachable); nil removes it. There is one per
	// context (rdmacm's dispatcher). It is called on the context's
	// receive or send path: it must return at once, without calling into
	// the context.
	OnUnreachable(fn func(*transport.UnreachableError))
}

// GSI is the general services interface of a context: QP1, which carries
// management datagrams (MADs) such as the IB CM messages rdma_cm uses:
// MADs in, MADs out, in UD SEND_ONLY packets with Q_Key 0x80010000 and
// P_Key 0xFFFF, from and to QP1, as the Linux kernel's MAD layer sends
// them over rdma_rxe.
type GSI interface {
	// Recv waits for the next MAD. After Close, or once the context is
	// closed, it returns an error matching verbs.ErrClosed.
	Recv(ctx context.Context) (MADPacket, error)
	// Send sends a 256-byte MAD from QP1 to QP1 at dst (UDP port 0 means
	// 4791).
	Send(dst netip.AddrPort, mad []byte) error
	// Close stops delivery; pending and later Recv calls return
	// verbs.ErrClosed.
	Close() error
	// Dropped counts MADs discarded because the receiver fell behind.
	Dropped() uint64
}

// MADPacket is a received management datagram.
type MADPacket struct {
	// From is the sender's UDP address (its IP is the peer's GID).
	From netip.AddrPort
	// SrcQP is the sending QP from the DETH (1 for CM traffic).
	SrcQP wire.QPN
	// MAD holds the 256-byte datagram.
	MAD [wire.MADSize]byte
}

// CMCounters are the connection manager's counters of one context, in the
// order of verbs.CMCounter.
type CMCounters struct {
	Retries         atomic.Uint64 // CM MADs resent by a timer (verbs.CMRetries)
	RejectsLimit    atomic.Uint64 // requests refused by a limit on pending connections (verbs.CMRejectsLimit)
	AuthFailures    atomic.Uint64 // messages that failed the pre-shared key check (verbs.CMAuthFailures)
	HalfOpenExpired atomic.Uint64 // passive connections whose RTU never came (verbs.CMHalfOpenExpired)
}

// engineOf is the func(*verbs.Context) Engine that package verbs
// registers. It is held as any because this package cannot name
// verbs.Context.
var engineOf any

// Register is called once, by package verbs' init, with the function that
// returns a context's Engine.
func Register[C any](f func(C) Engine) {
	if engineOf != nil {
		panic("hooks: Register called twice")
	}
	engineOf = f
}

// Of returns the Engine of a *verbs.Context.
func Of[C any](c C) Engine {
	f, ok := engineOf.(func(C) Engine)
	if !ok {
		panic(fmt.Sprintf("hooks: Of(%T): package verbs registered Engines for %T", c, engineOf))
	}
	return f(c)
}
