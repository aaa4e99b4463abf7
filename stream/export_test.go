package stream

// CorruptFin makes c's FIN announce a different CRC-32C (or, with
// lengthToo, one byte more) than what c wrote.
func CorruptFin(c *Conn, lengthToo bool) {
	c.finHook = func(m *msg) {
		m.sum ^= 1
		if lengthToo {
			m.bytes++
		}
	}
}

// SegmentSize is the packet payload size c's QP agreed on (0: the path
// MTU).
func SegmentSize(c *Conn) int { return c.qp.Query().SegmentSize }

// SelectiveRetransmit reports whether c's QP does selective
// retransmission (the connection agreed on "tbs2").
func SelectiveRetransmit(c *Conn) bool { return c.sr }

// DialTBS1 makes d dial as a dialer from before "tbs2": it offers "tbs1"
// and does no selective retransmission.
func DialTBS1(d *Dialer) { d.tbs1 = true }

// ListenTBS1 makes lc listen as a listener from before "tbs2": it
// rejects a "tbs2" dialer as it rejects any request it cannot read.
func ListenTBS1(lc *ListenConfig) { lc.tbs1 = true }
