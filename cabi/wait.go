//go:build tbrdma_cabi

package main

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
)

// How an engine's receive loop waits for packets follows what the program
// does, as the CLI picks it per test (docs/cabi.md, "Waiting"):
//
//   - A program that spins on ibv_poll_cq (perftest's and the pingpongs'
//     default) does the receive loop's work itself: an empty poll reads
//     the socket and handles what came (verbs.Context.SetInlineReceive,
//     ReceiveInline), so a packet is picked up by the thread that waits
//     for it, without a wake-up or a second thread spinning beside it.
//     Spinning is seen after spinAfter empty polls in a row on one CQ and
//     ends spinIdle after the last one. Where the transport cannot
//     (another OS), the receive loop busy-polls instead (SetBusyPoll,
//     Spinning).
//   - A program that sleeps in ibv_get_cq_event (-e) gets a receive loop
//     that sleeps in the kernel (hooks.Engine.SetKernelWait), one wake-up
//     per packet as for a C program.
//
// $TBRDMA_WAIT overrides it: "busy" (the receive loop busy-polls while a
// program spins), "kernel" (always sleep in the kernel), "poller" (neither:
// the Go runtime's poller), "auto" (default).
type waitMode uint8

const (
	waitAuto waitMode = iota
	waitBusy
	waitKernel
	waitPoller
)

var waitFromEnv = func() waitMode {
	switch os.Getenv("TBRDMA_WAIT") {
	case "busy":
		return waitBusy
	case "kernel":
		return waitKernel
	case "poller":
		return waitPoller
	}
	return waitAuto
}()

var debugWait = os.Getenv("TBRDMA_DEBUG_WAIT") != ""

const (
	spinAfter      = 32
	spinIdle       = 2 * time.Millisecond
	busyPollWindow = 2 * time.Millisecond
	kernelWindow   = 50 * time.Millisecond
)

// waiter is an engine's wait state.
type waiter struct {
	empties atomic.Uint64 // polls while spinning, for the watcher
	spin    atomic.Bool   // a spin is in progress (the watcher runs)
	inline  atomic.Bool   // and the program's polls receive inline
	kernel  atomic.Bool   // the receive loop sleeps in the kernel
}

// startWait applies the mode fixed at open. Outside a spin or a kernel
// wait, the receive loop polls its socket for busyPollWindow after each
// packet before it sleeps (hooks.Engine.SetBusyPoll), as the CLI's latency
// tests do: a passive responder (the server of ib_read_lat, which waits on
// TCP meanwhile) answers without a wake-up per request.
func (e *engine) startWait() {
	switch waitFromEnv {
	case waitKernel:
		e.kernelHint()
	case waitAuto, waitBusy:
		hooks.Of(e.vctx).SetBusyPoll(busyPollWindow)
	}
}

// The library keeps Go's GOMAXPROCS (the CPUs the process may run on).
// More Ps than CPUs made things worse: with four Ps on one CPU (taskset),
// idle Ms woke in the runtime's poller and sysmon on every C call into Go,
// on the CPU the program spins on, and ib_send_lat took 50 µs per message
// instead of 19. With one P, though, a receive loop that sleeps in the
// kernel (RawSyscall) keeps the only P for up to a slice, and every C call
// into Go waits for it (ib_read_lat -e: 4.5 ms per READ), so the kernel
// wait comes with a second P (kernelHint).

// polled is called after every poll of a CQ: n is the number of empty
// polls in a row on that CQ (0 when this one found something). While a
// spin is on, every poll counts as the program still spinning (with inline
// receive an empty poll costs a system call, so a short wait holds few of
// them: counting only long runs of empty polls ended the spin between
// ib_send_lat's messages, and each restart cost a kick of the receive
// loop); a spin starts after spinAfter empty polls in a row.
func (e *engine) polled(n uint32) {
	if e.w.spin.Load() {
		e.w.empties.Add(1)
		return
	}
	if n < spinAfter || (waitFromEnv != waitAuto && waitFromEnv != waitBusy) {
		return
	}
	e.w.empties.Add(1)
	e.spinMu.Lock()
	defer e.spinMu.Unlock()
	if e.w.spin.Load() {
		return
	}
	e.w.spin.Store(true)
	if debugWait {
		fmt.Fprintf(os.Stderr, "tbrdma: %v spin starts\n", time.Now().Format("15:04:05.000000"))
	}
	if waitFromEnv == waitAuto && e.vctx.SetInlineReceive(true) {
		e.w.inline.Store(true)
	} else {
		hooks.Of(e.vctx).Spinning(true)
	}
	go e.spinWatch()
}

// stopSpin ends a spin: the receive loop takes over again.
func (e *engine) stopSpin() {
	if !e.w.spin.Load() {
		return
	}
	if debugWait {
		fmt.Fprintf(os.Stderr, "tbrdma: %v spin ends\n", time.Now().Format("15:04:05.000000"))
	}
	if e.w.inline.Swap(false) {
		e.vctx.SetInlineReceive(false)
	} else {
		hooks.Of(e.vctx).Spinning(false)
	}
	e.w.spin.Store(false)
}

// receiveInline does the receive loop's work for a program that spins on
// an empty CQ; it reports whether it handled anything.
func (e *engine) receiveInline() bool {
	return e.w.inline.Load() && e.vctx.ReceiveInline() > 0
}

// spinWatch ends the spin once the program has stopped polling.
func (e *engine) spinWatch() {
	t := time.NewTicker(spinIdle)
	defer t.Stop()
	last := e.w.empties.Load()
	for {
		select {
		case <-t.C:
		case <-e.done:
			return
		}
		e.spinMu.Lock()
		if !e.w.spin.Load() {
			e.spinMu.Unlock()
			return
		}
		cur := e.w.empties.Load()
		if cur == last {
			e.stopSpin()
			e.spinMu.Unlock()
			return
		}
		e.spinMu.Unlock()
		last = cur
	}
}

// kernelHint is called when the program is about to sleep on a completion
// channel.
func (e *engine) kernelHint() {
	if waitFromEnv != waitAuto && waitFromEnv != waitKernel {
		return
	}
	if e.w.spin.Load() { // the program stops spinning: it is about to sleep
		e.spinMu.Lock()
		e.stopSpin()
		e.spinMu.Unlock()
	}
	if e.w.kernel.Load() || !e.w.kernel.CompareAndSwap(false, true) {
		return
	}
	// The program sleeps between completions: a receive loop that polls
	// its socket after each packet only keeps the processor from it.
	hooks.Of(e.vctx).SetBusyPoll(0)
	if runtime.GOMAXPROCS(0) < 2 {
		// A second P, for the C threads' calls while the loop sleeps
		// in the kernel on the first (the program does not spin now, so
		// idle Ms have no spinning thread to disturb).
		runtime.GOMAXPROCS(2)
	}
	hooks.Of(e.vctx).SetKernelWait(kernelWindow)
}
