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
