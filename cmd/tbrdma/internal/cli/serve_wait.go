package cli

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// A served device has one receive loop for all of serve's sessions, so it
// can wait in one way at a time. A dedicated server picks its wait from
// its test (perftest.setup): latency tests busy-poll the socket, the
// receiving side of a large-segment bandwidth test too, a bandwidth test
// at the path MTU and any -e test sleep in the kernel (+40 % for write-bw
// at 4096 B, docs/performance.md). serveWait gives serve's sessions the
// same: while every perftest session under way on the device is one that
// a dedicated server would run with the kernel wait, the device waits in
// the kernel; while any wants polling, or none of them cares, it polls
// after each packet as before (runServe), which is what a latency session
// needs to be answered as fast as by a dedicated server.
//
// Sessions that do not register (rping, pingpong, cat's relay, a
// large-segment sender, which a dedicated server runs on the runtime's
// poller) take the wait the others chose.

// waitKind is what a served session needs of its device's receive loop.
type waitKind int

const (
	waitAny    waitKind = iota // no preference: the device's default
	waitPoll                   // busy polling after each packet
	waitKernel                 // the kernel wait
)

// receiveWaiter is the part of a device's hooks.Engine that serveWait
// drives.
type receiveWaiter interface {
	SetBusyPoll(d time.Duration) bool
	SetKernelWait(d time.Duration) (bool, error)
}

// serveWait counts a served device's sessions by waitKind and sets the
// device's wait from the counts.
type serveWait struct {
	e   receiveWaiter
	log io.Writer

	mu     sync.Mutex
	poll   int
	kernel int
	inKern bool // the device waits in the kernel now
}

func newServeWait(e receiveWaiter, log io.Writer) *serveWait {
	return &serveWait{e: e, log: log}
}

// join registers a session that needs k and returns the function that
// ends it (call it once, when the session's QP is gone).
func (w *serveWait) join(k waitKind) (leave func()) {
	if w == nil || k == waitAny {
		return func() {}
	}
	w.add(k, 1)
	var once sync.Once
	return func() { once.Do(func() { w.add(k, -1) }) }
}

func (w *serveWait) add(k waitKind, d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k == waitPoll {
		w.poll += d
	} else {
		w.kernel += d
	}
	kern := w.kernel > 0 && w.poll == 0
	if kern == w.inKern {
		return
	}
	w.inKern = kern
	if kern {
		w.e.SetBusyPoll(0)
		if _, err := w.e.SetKernelWait(perf.KernelWaitWindow); err != nil {
			// The sessions still run, on the runtime's poller.
			fmt.Fprintf(w.log, "tbrdma serve: %v (the bandwidth sessions run without it)\n", err)
		}
		return
	}
	if _, err := w.e.SetKernelWait(0); err != nil {
		fmt.Fprintf(w.log, "tbrdma serve: %v\n", err)
	}
	w.e.SetBusyPoll(perf.BusyPollWindow)
}

// servedWaitKind is the wait a dedicated server would pick for t's test
// (perftest.setup), once the client's offers are agreed (t.seg).
func (t *perftest) servedWaitKind() waitKind {
	o := t.o
	switch {
	case o.Events, o.Kind.bw && t.seg == 0:
		return waitKernel
	case !o.Kind.bw, t.receivesData():
		return waitPoll
	default: // a large-segment sender: the poller, whatever the others need
		return waitAny
	}
}
