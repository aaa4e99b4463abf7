package transport

import (
	"net/netip"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// The portable data path: one datagram per system call through
// net.UDPConn, which does not allocate for netip addresses. It is the only
// path on systems other than Linux; on Linux tests can select it
// (Options.forcePortable) so that it runs somewhere in CI.

// portableState belongs to the goroutine in ReadBatch.
type portableState struct {
	rbuf []byte // one datagram, plus a byte to detect truncation
	t    tally
	icrc wire.ICRCPath // the ICRC's share for the last source accept checked
}

func newPortableState(maxPkt int) *portableState {
	return &portableState{rbuf: make([]byte, maxPkt+1)}
}

func (c *udpConn) readPortable(s *portableState, msgs []Message) (int, error) {
	for {
		n, _, _, src, err := c.pc.ReadMsgUDPAddrPort(s.rbuf, nil)
		if err != nil {
			return 0, err
		}
		c.ctr.readCalls.Add(1)
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		ok := false
		if n > c.maxPkt {
			s.t.drops[wire.ReasonPayload]++ // larger than MaxPacketSize
		} else {
			ok = c.accept(&s.t, &s.icrc, s.rbuf[:n:n], src, &msgs[0], 0)
		}
		c.ctr.addIn(&s.t)
		if ok {
			return 1, nil
		}
	}
}

func (c *udpConn) writePortable(msgs []Message) (int, error) {
	for i := range msgs {
		m := &msgs[i]
		dst, err := c.checkOut(m)
		if err != nil {
			return i, err
		}
		c.putICRC(m, dst, 0)
		pkt := m.Buf
		if m.Payload != nil { // one datagram per call: flatten into a scratch buffer
			t := len(m.Buf) - tailLen(m)
			if c.flat == nil {
				c.flat = make([]byte, 0, maxUDPPayload)
			}
			c.flat = append(append(append(c.flat[:0], m.Buf[:t]...), m.Payload...), m.Buf[t:]...)
			pkt = c.flat
		}
		if _, err := c.pc.WriteToUDPAddrPort(pkt, dst); err != nil {
			return i, err
		}
		c.ctr.writeCalls.Add(1)
		c.ctr.packetsOut.Add(1)
		c.ctr.bytesOut.Add(uint64(len(pkt)))
	}
	return len(msgs), nil
}
