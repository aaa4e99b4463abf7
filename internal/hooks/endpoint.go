package hooks

import (
	"time"

	"github.com/tbrdma/tbrdma/transport"
)

// The receive-path controls of transport's UDP endpoint, for package
// verbs. The endpoint has them as methods; the functions here find the
// endpoint behind a Conn (following Unwrap() transport.Conn methods, as
// transport/sniff's wrapper has), and report false for a Conn that is not
// one (the in-memory links of transport/transporttest).

// endpointAs returns c, or the first Conn that c wraps, that implements T.
func endpointAs[T any](c transport.Conn) (T, bool) {
	for c != nil {
		if v, ok := c.(T); ok {
			return v, true
		}
		u, ok := c.(interface{ Unwrap() transport.Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	var zero T
	return zero, false
}

// MaxPacketSizeOf returns the largest UDP payload the endpoint behind c
// receives: any datagram with UDP GRO, else transport.Options.MaxPacketSize.
func MaxPacketSizeOf(c transport.Conn) (n int, ok bool) {
	if v, ok := endpointAs[interface{ MaxPacketSize() int }](c); ok {
		return v.MaxPacketSize(), true
	}
	return 0, false
}

// SetBusyPollOf turns busy polling on (d > 0) or off on the endpoint
// behind c, and reports whether there is one. Only the Linux batched path
// polls; the others accept and ignore it.
func SetBusyPollOf(c transport.Conn, d time.Duration) bool {
	v, ok := endpointAs[interface{ SetBusyPoll(time.Duration) }](c)
	if ok {
		v.SetBusyPoll(d)
	}
	return ok
}

// HoldBusyPollOf tells the endpoint behind c that a goroutine starts
// (delta +1) or stops (-1) spinning on data the endpoint receives: while
// one is, a reader keeps polling instead of sleeping.
func HoldBusyPollOf(c transport.Conn, delta int) {
	if v, ok := BusyHolderOf(c); ok {
		v.HoldBusyPoll(delta)
	}
}

// BusyHolder is the endpoint's side of HoldBusyPollOf.
type BusyHolder interface{ HoldBusyPoll(delta int) }

// BusyHolderOf returns the endpoint behind c that HoldBusyPollOf calls,
// for a caller that holds and releases it at every busy poll: finding it
// (type assertions, ~100 ns each time on the benchmark's VM) is then done
// once.
func BusyHolderOf(c transport.Conn) (BusyHolder, bool) {
	return endpointAs[BusyHolder](c)
}

// SetKernelWaitOf turns the kernel wait on (d > 0) or off on the endpoint
// behind c, and reports whether there is one: for up to d after the last
// datagram arrived, a ReadBatch that finds the socket empty sleeps in its
// receive system call, on its own thread and keeping its P, instead of in
// the runtime's poller. A round trip then costs one wake-up, as in a
// blocking C program; with the poller it costs three on a process
// confined to one core (the poller's, and two of the runtime's sysmon
// thread, which the first system call after an idle wait wakes). While
// the reader sleeps, with GOMAXPROCS=1 nothing else in the process runs:
// it yields before each sleep and sleeps at most a slice (500 µs, rounded
// up to the kernel's tick), and only the runtime's sysmon polls the
// network for other sockets (every 10 ms). It is meant for a process
// whose one endpoint carries the latency-critical traffic (perftest's
// -e). Only the Linux batched path waits; the others accept it and ignore
// it.
func SetKernelWaitOf(c transport.Conn, d time.Duration) (bool, error) {
	if v, ok := endpointAs[interface{ SetKernelWait(time.Duration) error }](c); ok {
		return true, v.SetKernelWait(d)
	}
	return false, nil
}

// InlineReader is the part of a UDP endpoint that lets a caller take over
// its receive path for a while (package verbs' inline receive): read what
// is queued without waiting, and make a reader blocked in ReadBatch give
// up.
type InlineReader interface {
	// TryReadBatch is ReadBatch without waiting: 0 when nothing is
	// queued. Like ReadBatch it must not run concurrently with another
	// read.
	TryReadBatch(msgs []transport.Message) (int, error)
	// SetReadDeadline makes ReadBatch calls, a blocked one included,
	// return an error matching os.ErrDeadlineExceeded once t has passed
	// (a zero t: no deadline). TryReadBatch ignores it.
	SetReadDeadline(t time.Time) error
}

// InlineReaderOf returns c's InlineReader if c itself (not a wrapper,
// whose own receive stages would be bypassed) is a UDP endpoint on the
// Linux batched path. The endpoint's method spells InlineReader's method
// set out, since package transport cannot import this one.
func InlineReaderOf(c transport.Conn) (InlineReader, bool) {
	v, ok := c.(interface {
		InlineReader() (interface {
			TryReadBatch([]transport.Message) (int, error)
			SetReadDeadline(time.Time) error
		}, bool)
	})
	if !ok {
		return nil, false
	}
	return v.InlineReader()
}
