//go:build !linux

package transport

import "time"

// Systems other than Linux use the portable path (portable.go) only.

const defaultBatchSize = 1

// sysConn is the non-Linux part of udpConn.
type sysConn struct{}

func (c *udpConn) initSys(o *Options) error {
	c.portable = newPortableState(c.maxPkt)
	gsoErr, groErr := errNotSupportedOnOS, errNotSupportedOnOS
	if o.DisableGSO {
		gsoErr = errDisabledByOption
	}
	if o.DisableGRO {
		groErr = errDisabledByOption
	}
	c.offloads = Offloads{
		GSOError: &OffloadError{Offload: "UDP GSO", Err: gsoErr},
		GROError: &OffloadError{Offload: "UDP GRO", Err: groErr},
	}
	return nil
}

func (c *udpConn) readBatch(msgs []Message) (int, error) { return c.readPortable(c.portable, msgs) }

func (c *udpConn) writeBatch(msgs []Message) (int, error) { return c.writePortable(msgs) }

func (s *sysConn) groOn() bool { return false }

// SetBusyPoll is accepted and ignored off Linux: the portable path reads
// through net.UDPConn, which sleeps in the runtime's poller.
func (c *udpConn) SetBusyPoll(d time.Duration) {}

// HoldBusyPoll is accepted and ignored off Linux.
func (c *udpConn) HoldBusyPoll(delta int) {}

// SetKernelWait is accepted and ignored off Linux.
func (c *udpConn) SetKernelWait(d time.Duration) error { return nil }

// tryReadBatch is not offered off Linux (InlineReader says so).
func (c *udpConn) tryReadBatch(msgs []Message) (int, error) { return 0, errNoInlineRead }

// kick is a no-op off Linux: the portable path neither busy-polls nor waits
// in the kernel.
func (c *udpConn) kick(on bool) {}
